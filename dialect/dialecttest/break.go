package dialecttest

import (
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/testutil"
)

// Break ends a live lease and reports it as it was: afterwards the broken
// holder's guard is refused, its renewal and release find no lease, the
// next grant's token is larger, and a second break finds nothing. It frees
// a lock released within its minimum hold too, and leaves a name never
// granted or an expired lease alone.
func checkBreak(t *testing.T, e *env) {
	lt := e.tables(e.Dialect).Locks
	tb := e.table(Locks)
	broke := func(name string) (dialect.LockInfo, bool) {
		t.Helper()
		li, ok, err := lt.Break(e.ctx, name, 0)
		e.must(err, "Break "+name)
		return li, ok
	}
	if li, ok := broke("break-never"); ok {
		t.Fatalf("Break of a name never granted = %+v, true; want false", li)
	}

	const name = "break"
	a := e.grant(tb, name, "a")
	e.grant(tb, name, "a") // re-entered: two holds
	// Scoped to another token, the break leaves the lease and names it.
	if li, ok, err := lt.Break(e.ctx, name, a.Token+1); err != nil || ok || li.Owner != a.Owner || li.Token != a.Token {
		t.Fatalf("Break scoped to token %d of a lease of token %d = %+v, %v, %v; want the lease unbroken and named", a.Token+1, a.Token, li, ok, err)
	}
	if _, ok := e.held(tb, name); !ok {
		t.Fatal("a break scoped to another token ended the lease")
	}
	li, ok, err := lt.Break(e.ctx, name, a.Token)
	e.must(err, "Break scoped to the holder's token")
	if !ok || li.Name != name || li.Owner != a.Owner || li.Token != a.Token || li.Holds != 2 || li.ExpiresIn <= 0 {
		t.Fatalf("Break of a live lease = %+v, %v; want %q's lease of owner %q, token %d, 2 holds, time left", li, ok, name, a.Owner, a.Token)
	}
	if _, ok := e.held(tb, name); ok {
		t.Fatal("List shows a broken lease")
	}
	g := e.Open(t, 0)
	tx, err := g.DB().BeginTx(e.ctx, nil)
	e.must(err, "begin")
	guarded, err := tb.stmts.Guard(e.ctx, tx, a)
	e.must(tx.Rollback(), "rollback")
	e.must(err, "Guard")
	if guarded {
		t.Fatal("Guard of a broken lease = true, want false")
	}
	renewed, err := testutil.Renewed(tb.stmts.RenewMany(e.ctx, []dialect.Lease{a}, long))
	e.must(err, "RenewMany")
	if renewed[0] {
		t.Fatal("RenewMany renewed a broken lease")
	}
	e.release(tb, a, false)
	if li, ok := broke(name); ok {
		t.Fatalf("second Break = %+v, true; want false", li)
	}
	b := e.grant(tb, name, "b")
	if b.Token <= a.Token {
		t.Fatalf("grant after a break: token %d, want > %d", b.Token, a.Token)
	}

	// A release within its minimum hold keeps the lock taken until a break.
	e.releaseMin(tb, b, time.Hour, true)
	e.refused(tb, name, "c")
	if li, ok := broke(name); !ok || li.Owner != b.Owner || li.Token != b.Token || li.Holds != 0 {
		t.Fatalf("Break within a minimum hold = %+v, %v; want owner %q, token %d, no hold", li, ok, b.Owner, b.Token)
	}
	if c := e.grant(tb, name, "c"); c.Token <= b.Token {
		t.Fatalf("grant after breaking a minimum hold: token %d, want > %d", c.Token, b.Token)
	}

	x := e.grant(tb, "break-expired", "x")
	e.expire(tb, x.Name)
	if li, ok := broke(x.Name); ok {
		t.Fatalf("Break of an expired lease = %+v, true; want false", li)
	}
}
