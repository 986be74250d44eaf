package dialecttest

import (
	"errors"
	"strings"
	"testing"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/internal/testutil"
)

// electionChecks are the checks of a sqlrun.Elections: a value is stored
// with a live lease only, and read back only for the token it was
// proclaimed for.
var electionChecks = []struct {
	name  string
	check func(t *testing.T, e *env, el sqlrun.Elections)
}{
	{"ProclaimAndRead", checkProclaimAndRead},
	{"StaleLeases", checkProclaimStale},
	{"Values", checkElectionValues},
	{"Campaign", checkCampaign},
}

// electionsRefused reports whether el refuses elections on this server
// with an error wrapping dialect.ErrUnsupported (TiDB); it fails the test
// on any other error.
func electionsRefused(t *testing.T, el sqlrun.Elections) bool {
	t.Helper()
	_, _, err := el.Leader(t.Context(), "probe")
	if errors.Is(err, dialect.ErrUnsupported) {
		return true
	}
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	return false
}

// leader reads the leader of name.
func (e *env) leader(el sqlrun.Elections, name string) (dialect.LeaderInfo, bool) {
	e.t.Helper()
	info, ok, err := el.Leader(e.ctx, name)
	e.must(err, "Leader "+name)
	return info, ok
}

// proclaim proclaims value for l and checks the reply.
func (e *env) proclaim(el sqlrun.Elections, l dialect.Lease, value string, want bool) {
	e.t.Helper()
	ok, err := el.Proclaim(e.ctx, l, value)
	e.must(err, "Proclaim "+l.Name)
	if ok != want {
		e.t.Fatalf("Proclaim(%+v, %q) = %v, want %v", l, value, ok, want)
	}
}

// The leader is the live lease that proclaimed a value: none without a
// row or before the proclamation; then its owner, token, value and expiry
// on the database clock. Proclaiming again (the same value too) succeeds.
func checkProclaimAndRead(t *testing.T, e *env, el sqlrun.Elections) {
	tb := e.table(Locks)
	if _, ok := e.leader(el, "svc"); ok {
		t.Fatal("Leader without a row: found one")
	}
	l := e.grant(tb, "svc", "a")
	if info, ok := e.leader(el, "svc"); ok {
		t.Fatalf("Leader before the proclamation: %+v", info)
	}
	e.proclaim(el, l, "a:8080", true)
	info, ok := e.leader(el, "svc")
	if !ok || info.Name != "svc" || info.Owner != "a" || info.Term != l.Token || info.Value != "a:8080" {
		t.Fatalf("Leader = %+v, %v; want owner a, term %d, value a:8080", info, ok, l.Token)
	}
	if info.ExpiresIn <= 0 || info.ExpiresIn > long {
		t.Fatalf("Leader's ExpiresIn %v, want in (0, %v]", info.ExpiresIn, long)
	}
	li, _ := e.held(tb, "svc")
	if d := info.ExpiresAt.Sub(li.ExpiresAt); d < -1e6 || d > 1e6 { // within a millisecond
		t.Fatalf("Leader's ExpiresAt %v, List's %v", info.ExpiresAt, li.ExpiresAt)
	}
	e.proclaim(el, l, "a:8080", true) // the same value: matched, whatever the driver counts
	e.proclaim(el, l, "a:9090", true)
	if info, _ := e.leader(el, "svc"); info.Value != "a:9090" {
		t.Fatalf("Leader's value after a second proclamation: %q", info.Value)
	}
	// Renewals keep the value.
	ok2, err := testutil.Renewed(tb.stmts.RenewMany(e.ctx, []dialect.Lease{l}, long))
	e.must(err, "RenewMany")
	if !ok2[0] {
		t.Fatal("RenewMany refused the leader's lease")
	}
	if info, ok := e.leader(el, "svc"); !ok || info.Value != "a:9090" {
		t.Fatalf("Leader after a renewal: %+v, %v", info, ok)
	}
}

// A proclamation for a lease that is not live changes nothing, and a value
// is never read as a later lease's.
func checkProclaimStale(t *testing.T, e *env, el sqlrun.Elections) {
	tb := e.table(Locks)
	l := e.grant(tb, "svc", "a")
	e.proclaim(el, l, "a", true)
	e.proclaim(el, dialect.Lease{Name: "svc", Owner: "b", Token: l.Token}, "b", false)
	e.proclaim(el, dialect.Lease{Name: "svc", Owner: "a", Token: l.Token + 1}, "b", false)
	e.proclaim(el, dialect.Lease{Name: "other", Owner: "a", Token: l.Token}, "b", false)

	e.expire(tb, "svc")
	if info, ok := e.leader(el, "svc"); ok {
		t.Fatalf("Leader of an expired lease: %+v", info)
	}
	e.proclaim(el, l, "a2", false)

	m := e.grant(tb, "svc", "b") // the takeover: a new token
	if info, ok := e.leader(el, "svc"); ok {
		t.Fatalf("Leader after a takeover, before the new holder proclaimed: %+v (the old value read as the new term's)", info)
	}
	e.proclaim(el, l, "a3", false)
	e.proclaim(el, m, "b", true)
	if info, ok := e.leader(el, "svc"); !ok || info.Term != m.Token || info.Value != "b" {
		t.Fatalf("Leader after the new holder proclaimed: %+v, %v", info, ok)
	}

	e.release(tb, m, true)
	if info, ok := e.leader(el, "svc"); ok {
		t.Fatalf("Leader of a released lease: %+v", info)
	}
	e.proclaim(el, m, "b2", false)
}

// Values travel byte for byte as bind parameters, up to 65535 bytes.
func checkElectionValues(t *testing.T, e *env, el sqlrun.Elections) {
	tb := e.table(Locks)
	for i, v := range []string{"", "it's \"quoted\"; DROP TABLE x; --", "ünïcödé ✓", strings.Repeat("x", 65535)} {
		name := "svc" + string(rune('a'+i))
		l := e.grant(tb, name, "a")
		e.proclaim(el, l, v, true)
		if info, ok := e.leader(el, name); !ok || info.Value != v {
			t.Fatalf("value %.20q read back as %.20q (found: %v)", v, info.Value, ok)
		}
	}
}

// campaign runs Campaign for owner on name and returns the lease, or a
// zero token when refused.
func (e *env) campaign(el sqlrun.Elections, name, owner, value string) dialect.Lease {
	e.t.Helper()
	token, err := el.Campaign(e.ctx, dialect.AcquireParams{Name: name, Owner: owner, TTL: long}, value)
	e.must(err, "Campaign "+name+" for "+owner)
	return dialect.Lease{Name: name, Owner: owner, Token: token}
}

// Campaign grants as the lock table's acquire does and stores the value
// with the lease it grants, in a new row and in a takeover (read back as
// the new term's), or re-enters; a refused campaign changes nothing.
func checkCampaign(t *testing.T, e *env, el sqlrun.Elections) {
	tb := e.table(Locks)
	l := e.campaign(el, "svc", "a", "a:1")
	if l.Token <= 0 {
		t.Fatalf("Campaign on a free name: token %d", l.Token)
	}
	if info, ok := e.leader(el, "svc"); !ok || info.Owner != "a" || info.Term != l.Token || info.Value != "a:1" {
		t.Fatalf("Leader after Campaign = %+v, %v; want owner a, term %d, value a:1", info, ok, l.Token)
	}
	if m := e.campaign(el, "svc", "b", "b:1"); m.Token != 0 {
		t.Fatalf("Campaign while another owner leads: token %d, want 0", m.Token)
	}
	if info, _ := e.leader(el, "svc"); info.Owner != "a" || info.Value != "a:1" {
		t.Fatalf("Leader after a refused Campaign = %+v; want a's, value a:1", info)
	}
	if r := e.campaign(el, "svc", "a", "a:2"); r.Token != l.Token {
		t.Fatalf("Campaign re-entered with token %d, want %d", r.Token, l.Token)
	}
	if info, _ := e.leader(el, "svc"); info.Term != l.Token || info.Value != "a:2" {
		t.Fatalf("Leader after a re-entering Campaign = %+v; want term %d, value a:2", info, l.Token)
	}
	e.expire(tb, "svc")
	m := e.campaign(el, "svc", "b", "b:1") // the takeover: a new token
	if m.Token <= l.Token {
		t.Fatalf("Campaign's takeover: token %d, want above %d", m.Token, l.Token)
	}
	if info, ok := e.leader(el, "svc"); !ok || info.Owner != "b" || info.Term != m.Token || info.Value != "b:1" {
		t.Fatalf("Leader after a takeover by Campaign = %+v, %v; want owner b, term %d, value b:1", info, ok, m.Token)
	}
	e.release(tb, m, true)
	if info, ok := e.leader(el, "svc"); ok {
		t.Fatalf("Leader of a released lease: %+v", info)
	}
	n := e.campaign(el, "svc", "c", "c:1") // the takeover of a released row
	if info, ok := e.leader(el, "svc"); !ok || info.Term != n.Token || n.Token <= m.Token || info.Value != "c:1" {
		t.Fatalf("Leader after Campaign took a released row = %+v, %v; want term %d above %d, value c:1", info, ok, n.Token, m.Token)
	}
}
