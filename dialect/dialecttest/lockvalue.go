package dialecttest

import (
	"strings"
	"testing"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/internal/testutil"
)

// lockValueChecks are the checks of a sqlrun.LockValues: a value is set
// for a live lease only, read back only for the token it was set for, and
// kept apart from elections' values.
var lockValueChecks = []struct {
	name  string
	check func(t *testing.T, e *env, lv sqlrun.LockValues)
}{
	{"SetAndRead", checkLockValueSetAndRead},
	{"Stale", checkLockValueStale},
	{"ApartFromElections", checkLockValueApart},
}

// lockValue reads name's lease and value.
func (e *env) lockValue(lv sqlrun.LockValues, name string) (dialect.LockInfo, bool) {
	e.t.Helper()
	li, ok, err := lv.Value(e.ctx, name)
	e.must(err, "Value "+name)
	return li, ok
}

// setValue sets value for l and checks the reply.
func (e *env) setValue(lv sqlrun.LockValues, l dialect.Lease, value string, want bool) {
	e.t.Helper()
	ok, err := lv.SetValue(e.ctx, l, value)
	e.must(err, "SetValue "+l.Name)
	if ok != want {
		e.t.Fatalf("SetValue(%+v, %q) = %v, want %v", l, value, ok, want)
	}
}

// Value reads a live lease with List's columns, without a value before
// one is set; then the value, byte for byte, in Value and in the lock
// table's List. Setting it again (the same value too) succeeds, and
// renewals keep it.
func checkLockValueSetAndRead(t *testing.T, e *env, lv sqlrun.LockValues) {
	tb := e.table(Locks)
	if li, ok := e.lockValue(lv, "job"); ok {
		t.Fatalf("Value without a row: %+v", li)
	}
	l := e.grant(tb, "job", "a")
	li, ok := e.lockValue(lv, "job")
	if !ok || li.Name != "job" || li.Owner != "a" || li.Token != l.Token || li.Holds != 1 || li.Value != "" {
		t.Fatalf("Value before SetValue = %+v, %v; want a's lease, token %d, no value", li, ok, l.Token)
	}
	listed, _ := e.held(tb, "job")
	if d := li.ExpiresAt.Sub(listed.ExpiresAt); d < -1e6 || d > 1e6 || li.ExpiresIn <= 0 || li.ExpiresIn > long {
		t.Fatalf("Value's expiry %v (in %v), List's %v", li.ExpiresAt, li.ExpiresIn, listed.ExpiresAt)
	}
	value := "host-a, v1.2 — ünïcode " + strings.Repeat("x", 1000)
	e.setValue(lv, l, value, true)
	e.setValue(lv, l, value, true) // the same value: matched, whatever the driver counts
	if li, _ := e.lockValue(lv, "job"); li.Value != value {
		t.Fatalf("Value = %q, want %q", li.Value, value)
	}
	infos, err := e.tables(e.Dialect).Locks.List(e.ctx)
	e.must(err, "List")
	var found bool
	for _, li := range infos {
		found = found || li.Name == "job" && li.Value == value
	}
	if !found {
		t.Fatalf("List = %+v, want job with its value", infos)
	}
	ok2, err := testutil.Renewed(tb.stmts.RenewMany(e.ctx, []dialect.Lease{l}, long))
	e.must(err, "RenewMany")
	if !ok2[0] {
		t.Fatal("RenewMany refused the lease")
	}
	if li, _ := e.lockValue(lv, "job"); li.Value != value {
		t.Fatalf("Value after a renewal = %q", li.Value)
	}
}

// A value set for a lease that is not live changes nothing, and a value is
// never read as a later lease's.
func checkLockValueStale(t *testing.T, e *env, lv sqlrun.LockValues) {
	tb := e.table(Locks)
	l := e.grant(tb, "job", "a")
	e.setValue(lv, l, "a", true)
	e.setValue(lv, dialect.Lease{Name: "job", Owner: "b", Token: l.Token}, "b", false)
	e.setValue(lv, dialect.Lease{Name: "job", Owner: "a", Token: l.Token + 1}, "b", false)
	e.setValue(lv, dialect.Lease{Name: "other", Owner: "a", Token: l.Token}, "b", false)
	if li, _ := e.lockValue(lv, "job"); li.Value != "a" {
		t.Fatalf("Value after stale writes = %q, want a", li.Value)
	}

	e.expire(tb, "job")
	if li, ok := e.lockValue(lv, "job"); ok {
		t.Fatalf("Value of an expired lease: %+v", li)
	}
	e.setValue(lv, l, "a2", false)

	m := e.grant(tb, "job", "b") // the takeover: a new token
	if li, ok := e.lockValue(lv, "job"); !ok || li.Token != m.Token || li.Value != "" {
		t.Fatalf("Value after a takeover = %+v, %v; want token %d without the old value", li, ok, m.Token)
	}
	e.setValue(lv, l, "a3", false)
	e.setValue(lv, m, "b", true)
	if li, _ := e.lockValue(lv, "job"); li.Value != "b" {
		t.Fatalf("Value after the new holder set one = %q", li.Value)
	}
	e.release(tb, m, true)
	if li, ok := e.lockValue(lv, "job"); ok {
		t.Fatalf("Value of a released lease: %+v", li)
	}
	e.setValue(lv, m, "b2", false)
}

// A lock's value is not an election's, nor the reverse.
func checkLockValueApart(t *testing.T, e *env, lv sqlrun.LockValues) {
	el := e.tables(e.Dialect).Elections
	if el == nil || electionsRefused(t, el) {
		t.Skip("no elections on this dialect")
	}
	tb := e.table(Locks)
	l := e.grant(tb, "svc", "a")
	e.setValue(lv, l, "lock value", true)
	if info, ok := e.leader(el, "svc"); ok {
		t.Fatalf("Leader of a lock with a value: %+v", info)
	}
	e.proclaim(el, l, "leader value", true)
	if li, _ := e.lockValue(lv, "svc"); li.Value != "lock value" {
		t.Fatalf("Value after a proclamation = %q, want the lock's", li.Value)
	}
	if info, _ := e.leader(el, "svc"); info.Value != "leader value" {
		t.Fatalf("Leader's value = %q, want the proclaimed one", info.Value)
	}
}
