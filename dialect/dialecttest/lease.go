package dialecttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/testutil"
)

// leaseChecks run on every lease table: the lock table, and the version
// table of an optimistic dialect.
var leaseChecks = []struct {
	name  string
	check func(t *testing.T, e *env, tb *table)
}{
	{"Tokens", checkTokens},
	{"RenewMany", checkRenewMany},
	{"RenewManyBatch", checkRenewManyBatch},
	{"Release", checkRelease},
	{"MinHold", checkMinHold},
	{"Guard", checkGuard},
	{"List", checkList},
	{"Names", checkNames},
	{"CancelledGrant", checkCancelledGrant},
}

// Acquire inserts a row, re-enters the lease of the same owner (same
// token, one more hold), refuses another owner's live lease (0, the lease
// untouched), and takes over an expired or released row with a larger
// token and one hold, the same owner's expired lease included.
func checkAcquire(t *testing.T, e *env) {
	tb := e.table(Locks)
	const name = "acquire"
	a := e.grant(tb, name, "a")
	e.holder(tb, a, 1)
	if again := e.grant(tb, name, "a"); again.Token != a.Token {
		t.Fatalf("re-entry: token %d, want the lease's own %d", again.Token, a.Token)
	}
	e.holder(tb, a, 2)
	e.refused(tb, name, "b")
	e.holder(tb, a, 2)

	e.expire(tb, name)
	b := e.grant(tb, name, "b")
	if b.Token <= a.Token {
		t.Fatalf("takeover of an expired lease: token %d, want > %d", b.Token, a.Token)
	}
	e.holder(tb, b, 1)

	e.release(tb, b, true)
	c := e.grant(tb, name, "c")
	if c.Token <= b.Token {
		t.Fatalf("acquire of a released lock: token %d, want > %d", c.Token, b.Token)
	}
	e.holder(tb, c, 1)

	// An expired lease is not re-entered, even by its owner: the owner
	// gets a new lease.
	e.expire(tb, name)
	c2 := e.grant(tb, name, "c")
	if c2.Token <= c.Token {
		t.Fatalf("acquire by the owner of an expired lease: token %d, want a new token > %d", c2.Token, c.Token)
	}
	e.holder(tb, c2, 1)

	// Names are separate locks.
	e.grant(tb, name+"-2", "a")
	e.holder(tb, c2, 1)
}

// Remaining reports no row for a name never acquired, the time left on the
// database clock for a live lease, and 0 for an expired or released one.
func checkRemaining(t *testing.T, e *env) {
	lt := e.tables(e.Dialect).Locks
	remaining := func(name string) (time.Duration, bool) {
		t.Helper()
		d, ok, err := lt.Remaining(e.ctx, name)
		e.must(err, "Remaining "+name)
		return d, ok
	}
	if d, ok := remaining("remaining-none"); ok {
		t.Fatalf("Remaining of a name without a row: %v, true; want false", d)
	}
	tb := e.table(Locks)
	start := time.Now()
	l := e.grant(tb, "remaining", "o")
	d, ok := remaining(l.Name)
	// The lease's end is an hour after its grant on the database clock;
	// the statements took at most this long, plus the clock's resolution.
	elapsed := time.Since(start)
	const resolution = 2 * time.Millisecond
	if !ok || d > long+resolution || d < long-elapsed-resolution {
		t.Fatalf("Remaining of a fresh lease: %v, %v; want ok and within %v of %v", d, ok, elapsed, long)
	}
	e.expire(tb, l.Name)
	if d, ok := remaining(l.Name); !ok || d != 0 {
		t.Fatalf("Remaining of an expired lease: %v, %v; want 0, true", d, ok)
	}
	l = e.grant(tb, l.Name, "p")
	e.release(tb, l, true)
	if d, ok := remaining(l.Name); !ok || d != 0 {
		t.Fatalf("Remaining of a released lease: %v, %v; want 0, true", d, ok)
	}
}

// Tokens grow strictly per name across release, takeover of an expired
// lease, a new lease of the same owner, and the reaping of released and
// expired rows (the floor rule).
func checkTokens(t *testing.T, e *env, tb *table) {
	const name = "tokens"
	var last int64
	next := func(owner, after string) dialect.Lease {
		t.Helper()
		l := e.grant(tb, name, owner)
		if l.Token <= last {
			t.Fatalf("token %d after %s, want > %d", l.Token, after, last)
		}
		last = l.Token
		return l
	}
	l := next("a", "nothing")
	e.release(tb, l, true)
	l = next("b", "a release")
	e.expire(tb, name)
	l = next("c", "a takeover of an expired lease")
	e.expire(tb, name)
	l = next("c", "its owner's new lease after expiry")
	e.release(tb, l, true)
	e.reapAll()
	l = next("a", "reaping a released row")
	e.expire(tb, name)
	e.reapAll()
	next("b", "reaping an expired row")
}

// RenewMany renews exactly the live leases of a mixed batch, to the TTL
// from now on the database clock, and leaves the others alone.
func checkRenewMany(t *testing.T, e *env, tb *table) {
	live := e.grant(tb, "renew-live", "o")
	expired := e.grant(tb, "renew-expired", "o")
	e.expire(tb, expired.Name)
	stale := e.grant(tb, "renew-stale", "o")
	e.expire(tb, stale.Name)
	newer := e.grant(tb, stale.Name, "p")
	released := e.grant(tb, "renew-released", "o")
	e.release(tb, released, true)
	unknown := dialect.Lease{Name: "renew-unknown", Owner: "o", Token: live.Token}
	otherToken := dialect.Lease{Name: live.Name, Owner: live.Owner, Token: live.Token + 1000}
	otherOwner := dialect.Lease{Name: live.Name, Owner: "p", Token: live.Token}

	before, _ := e.held(tb, live.Name)
	batch := []dialect.Lease{live, expired, stale, released, unknown, otherToken, otherOwner, newer}
	start := time.Now()
	got, err := testutil.Renewed(tb.stmts.RenewMany(e.ctx, batch, 2*long))
	e.must(err, "RenewMany")
	want := []bool{true, false, false, false, false, false, false, true}
	if !slices.Equal(got, want) {
		t.Fatalf("RenewMany of live, expired, taken over, released, unknown, other token, other owner, newer: %v, want %v", got, want)
	}
	after, _ := e.held(tb, live.Name)
	if after.Token != live.Token || after.Holds != 1 || !after.AcquiredAt.Equal(before.AcquiredAt) {
		t.Fatalf("renewed lease listed as %+v, was %+v: only its expiry may change", after, before)
	}
	if !after.ExpiresAt.After(before.ExpiresAt) || after.ExpiresIn < 2*long-time.Since(start)-time.Second || after.ExpiresIn > 2*long {
		t.Fatalf("renewed lease expires at %v (in %v), was %v: want two hours from the renewal", after.ExpiresAt, after.ExpiresIn, before.ExpiresAt)
	}
	if li, ok := e.held(tb, expired.Name); !ok || li.ExpiresIn > 0 {
		t.Fatalf("expired lease after RenewMany: %+v (listed: %v), want still expired", li, ok)
	}
	if _, ok := e.held(tb, released.Name); ok {
		t.Fatal("released lease listed again after RenewMany")
	}
	e.holder(tb, newer, 1)
	if li, _ := e.held(tb, newer.Name); li.ExpiresIn < long {
		t.Fatalf("the new holder's lease expires in %v after RenewMany, want its renewal to two hours", li.ExpiresIn)
	}
}

// A batch of MaxRenewBatch leases, every other one held, renews exactly the
// held ones.
func checkRenewManyBatch(t *testing.T, e *env, tb *table) {
	batch := make([]dialect.Lease, dialect.MaxRenewBatch)
	want := make([]bool, len(batch))
	for i := range batch {
		batch[i] = dialect.Lease{Name: fmt.Sprintf("batch-%04d", i), Owner: "o", Token: 1}
		want[i] = i%2 == 0
	}
	// Granted by a few goroutines: a database that takes them in turn
	// is no slower for it.
	var wg sync.WaitGroup
	errs := make(chan error, len(batch))
	const workers = 4
	for w := range workers {
		wg.Go(func() {
			for i := 2 * w; i < len(batch); i += 2 * workers {
				token, err := tb.grant(e.ctx, batch[i].Name, "o", long)
				if err == nil && token == 0 {
					err = fmt.Errorf("grant %s refused", batch[i].Name)
				}
				if err != nil {
					errs <- err
					return
				}
				batch[i].Token = token
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := testutil.Renewed(tb.stmts.RenewMany(e.ctx, batch, long))
	e.must(err, "RenewMany")
	if !slices.Equal(got, want) {
		t.Fatalf("RenewMany of %d leases, every other one held: %d renewed, want %d", len(batch), count(got), count(want))
	}
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// Release drops one hold; the last one frees the lock, for a larger token
// next; a release after a full release, after a takeover, or of a name
// never granted reports false.
func checkRelease(t *testing.T, e *env, tb *table) {
	const name = "release"
	l := e.grant(tb, name, "o")
	if again := e.grant(tb, name, "o"); again != l {
		t.Fatalf("re-entry: %+v, want %+v", again, l)
	}
	e.release(tb, l, true)
	e.holder(tb, l, 1)
	e.refused(tb, name, "p")
	e.release(tb, l, true)
	if li, ok := e.held(tb, name); ok {
		t.Fatalf("fully released lock still listed: %+v", li)
	}
	e.release(tb, l, false)
	p := e.grant(tb, name, "p")
	if p.Token <= l.Token {
		t.Fatalf("token %d after the release, want > %d", p.Token, l.Token)
	}
	e.release(tb, l, false)
	e.holder(tb, p, 1)

	// After a takeover, the former holder's release changes nothing.
	e.expire(tb, name)
	q := e.grant(tb, name, "q")
	e.release(tb, p, false)
	e.holder(tb, q, 1)

	e.release(tb, dialect.Lease{Name: "release-unknown", Owner: "o", Token: 1}, false)
}

// A last release within the minimum hold keeps the row unexpired, held by
// nobody, until acquired_at + minHold on the database clock: every owner,
// the former holder too, is refused; List shows it with no holds and that
// expiry; Guard, a second release and Reap leave it alone. Afterwards the
// next grant takes it over with a larger token, no statement of the former
// holder needed. Releases of other holds, and a minimum hold already
// passed, behave as without one.
func checkMinHold(t *testing.T, e *env, tb *table) {
	const name = "min-hold"
	l := e.grant(tb, name, "o")
	if again := e.grant(tb, name, "o"); again != l {
		t.Fatalf("re-entry: %+v, want %+v", again, l)
	}
	e.releaseMin(tb, l, time.Hour, true) // not the last hold: the lease stays
	e.holder(tb, l, 1)
	e.releaseMin(tb, l, time.Hour, true)
	e.refused(tb, name, "p")
	e.refused(tb, name, "o")
	li, ok := e.held(tb, name)
	if !ok || li.Holds != 0 || li.Owner != "o" || li.Token != l.Token || li.ExpiresAt.Sub(li.AcquiredAt) != time.Hour || li.ExpiresIn <= 0 {
		t.Fatalf("List shows a lock released within its minimum hold of an hour as %+v (listed: %v), want no holds, owner o, token %d, expiry acquired_at + 1h, still ahead", li, ok, l.Token)
	}
	if tb.name == Locks {
		if left, ok, err := e.tables(e.Dialect).Locks.Remaining(e.ctx, name); err != nil || !ok || left <= 0 {
			t.Fatalf("Remaining within the minimum hold = %v, %v, %v; want time left", left, ok, err)
		}
	}
	e.releaseMin(tb, l, time.Hour, false)
	e.reapAll()
	e.refused(tb, name, "p")
	e.expire(tb, name) // the minimum hold ends
	p := e.grant(tb, name, "p")
	if p.Token <= l.Token {
		t.Fatalf("token %d after the minimum hold, want > %d", p.Token, l.Token)
	}

	// A minimum hold already passed frees the lock at once. (A clock of
	// milliseconds, SQLite's, can read the grant's instant again: wait
	// until it has moved past it.)
	testutil.Eventually(e.ctx, t, "the database's clock past the grant", func() bool {
		li, _ := e.heldBy(tb, name, "p")
		return li.ExpiresAt.Add(-li.ExpiresIn).After(li.AcquiredAt)
	})
	e.releaseMin(tb, p, time.Microsecond, true)
	if li, ok := e.held(tb, name); ok {
		t.Fatalf("lock released after its minimum hold still listed: %+v", li)
	}
	q := e.grant(tb, name, "q")

	// Ends on the database clock by itself: the next owner gets it
	// once the database's time reaches the end of the minimum hold, and
	// not before.
	e.expire(tb, name)
	r := e.grant(tb, name, "r")
	e.release(tb, q, false)
	e.releaseMin(tb, r, 300*time.Millisecond, true)
	li, ok = e.held(tb, name)
	if !ok || li.Holds != 0 {
		// The machine took 300 ms between grant and release: fine, the
		// lock is simply free already.
		e.grant(tb, name, "s")
		return
	}
	var (
		s    int64
		took time.Duration // the granting call's round trip
	)
	e.eventually("the lock is free after its minimum hold", func() bool {
		start := time.Now()
		token, err := tb.grant(e.ctx, name, "s", long)
		took = time.Since(start)
		e.must(err, "grant "+name)
		s = token
		return token != 0
	})
	// A permit table lists the ended permit of r beside s's until it is
	// reaped (the grant's expiry of ended rows and its count of live ones
	// read the clock apart): the row to check is s's own. Its acquired_at
	// may come from an earlier read of the clock than the one that found
	// the minimum hold over (MySQL reads SYSDATE once per use), but not
	// from before the grant's statement began.
	got, ok := e.heldBy(tb, name, "s")
	if !ok || s <= r.Token || got.AcquiredAt.Before(li.ExpiresAt.Add(-took)) {
		t.Fatalf("granted token %d at %v after a minimum hold ending at %v (token %d; the grant took %v): want a larger token, not before the end", s, got.AcquiredAt, li.ExpiresAt, r.Token, took)
	}
}

// Guard is true, in a transaction, for a live lease only; while the
// guarded transaction is open, a takeover of the lease waits for it, even
// after the lease expired, and gets a larger token once it ends.
func checkGuard(t *testing.T, e *env, tb *table) {
	// The guarded transactions run on a pool of their own, as another
	// process's would: on a SingleWriter database they hold its write lock
	// from BEGIN on, and the dialect under test must wait for it.
	g := e.Open(t, 0)
	guard := func(l dialect.Lease) (bool, func() error) {
		t.Helper()
		tx, err := g.DB().BeginTx(e.ctx, nil)
		e.must(err, "begin")
		ok, err := tb.stmts.Guard(e.ctx, tx, l)
		if err != nil {
			_ = tx.Rollback()
			t.Fatalf("Guard(%+v): %v", l, err)
		}
		return ok, tx.Commit
	}
	notLive := func(what string, l dialect.Lease) {
		t.Helper()
		ok, end := guard(l)
		e.must(end(), "commit")
		if ok {
			t.Fatalf("Guard of %s (%+v) = true, want false", what, l)
		}
	}
	l := e.grant(tb, "guard", "o")
	notLive("another token", dialect.Lease{Name: l.Name, Owner: l.Owner, Token: l.Token + 1000})
	notLive("another owner", dialect.Lease{Name: l.Name, Owner: "p", Token: l.Token})
	notLive("a name never granted", dialect.Lease{Name: "guard-unknown", Owner: "o", Token: l.Token})
	x := e.grant(tb, "guard-expired", "o")
	e.expire(tb, x.Name)
	notLive("an expired lease", x)
	r := e.grant(tb, "guard-released", "o")
	e.release(tb, r, true)
	notLive("a released lease", r)

	ok, end := guard(l)
	if !ok {
		_ = end()
		t.Fatalf("Guard of a live lease (%+v) = false", l)
	}
	if !e.Dialect.Catalogue().SingleWriter {
		// A share lock on one row: other names go ahead.
		e.grant(tb, "guard-other", "p")
	}
	e.must(end(), "guarded commit")

	// A takeover waits for the guarded transaction. The lease must expire
	// while the guard holds, so it is short: a machine too busy to guard
	// it in time (the database says whether it had expired) tries again on
	// a fresh name with twice the TTL.
	var (
		holder dialect.Lease
		commit func() error
	)
	for ttl, try := time.Second, 0; ; ttl, try = 2*ttl, try+1 {
		holder = e.grantTTL(tb, fmt.Sprintf("guard-takeover-%d", try), "holder", ttl)
		if ok, commit = guard(holder); ok {
			break
		}
		e.must(commit(), "commit")
		if li, _ := e.held(tb, holder.Name); li.ExpiresIn > 0 || ttl >= time.Minute {
			t.Fatalf("Guard of a live lease (%+v, expires in %v) = false", holder, li.ExpiresIn)
		}
		t.Logf("the lease of %v expired before it was guarded; again with twice the TTL", ttl)
	}
	e.eventually("the guarded lease expires on the database clock", func() bool {
		li, ok := e.held(tb, holder.Name)
		return ok && li.ExpiresIn <= 0
	})
	got := grantAsync(e.ctx, tb, holder.Name, "thief")
	e.eventually("the takeover waits for the guarded transaction", func() bool {
		select {
		case r := <-got:
			t.Fatalf("takeover of a guarded lease returned while the guarded transaction was open: %d, %v", r.token, r.err)
		default:
		}
		return e.waiting() > 0
	})
	e.must(commit(), "guarded commit")
	res := await(e, "the takeover after the guarded commit", got)
	e.must(res.err, "takeover after the guarded commit")
	if res.token <= holder.Token {
		t.Fatalf("takeover after the guarded commit: token %d, want > %d", res.token, holder.Token)
	}
}

// List shows the held rows only (expired ones until they are taken over or
// reaped), ordered by name, with their owner, token and holds, and times on
// the database clock in UTC.
func checkList(t *testing.T, e *env, tb *table) {
	start := time.Now()
	leases := map[string]dialect.Lease{}
	for _, n := range []string{"list-c", "list-a", "list-b"} {
		leases[n] = e.grant(tb, n, "owner-"+n)
	}
	leases["list-a"] = e.grant(tb, "list-a", "owner-list-a") // two holds
	r := e.grant(tb, "list-released", "o")
	e.release(tb, r, true)
	x := e.grant(tb, "list-x-expired", "o")
	e.expire(tb, x.Name)
	leases[x.Name] = x

	infos, err := tb.stmts.List(e.ctx)
	e.must(err, "List")
	elapsed := time.Since(start)
	var names []string
	for _, li := range infos {
		names = append(names, li.Name)
	}
	if want := []string{"list-a", "list-b", "list-c", "list-x-expired"}; !slices.Equal(names, want) {
		t.Fatalf("List: %q, want %q", names, want)
	}
	for _, li := range infos {
		l := leases[li.Name]
		holds := 1
		if li.Name == "list-a" {
			holds = 2
		}
		if li.Owner != l.Owner || li.Token != l.Token || li.Holds != holds {
			t.Errorf("List: %+v, want owner %q, token %d, %d holds", li, l.Owner, l.Token, holds)
		}
		if li.AcquiredAt.Location() != time.UTC || li.ExpiresAt.Location() != time.UTC {
			t.Errorf("List: %s: times not in UTC: %v, %v", li.Name, li.AcquiredAt, li.ExpiresAt)
		}
		// The database's clock, read on this host's servers, is near
		// the local one: a wrong unit would be off by years.
		if d := time.Since(li.AcquiredAt); d < -5*time.Minute || d > 5*time.Minute {
			t.Errorf("List: %s acquired at %v, %v from now", li.Name, li.AcquiredAt, d)
		}
		if li.Name == x.Name {
			if li.ExpiresIn > 0 || li.ExpiresAt.After(time.Now().Add(5*time.Minute)) {
				t.Errorf("List: expired lease %+v, want ExpiresIn <= 0", li)
			}
			continue
		}
		// Granted for an hour by one statement, on one clock (up to the
		// time a statement takes to read it twice).
		if ttl := li.ExpiresAt.Sub(li.AcquiredAt); ttl < long || ttl > long+time.Second {
			t.Errorf("List: %s expires %v after its grant, want %v", li.Name, ttl, long)
		}
		if li.ExpiresIn > long || li.ExpiresIn < long-elapsed-time.Second {
			t.Errorf("List: %s expires in %v, want within %v of %v", li.Name, li.ExpiresIn, elapsed, long)
		}
	}
}

// Lock names and owners are bind parameters, compared byte for byte: none
// of these is SQL, and no two of them are the same lock.
func checkNames(t *testing.T, e *env, tb *table) {
	names := []string{
		`it's`, `"quoted"`, `back\slash`, "`tick`", "%_%", "?", "$1", ":name", "@x",
		"'; DROP TABLE sqllock_locks; --", "ünïcode ☃", "n", "N", "n ", " n", "ñ", "n\u0303",
		strings.Repeat("x", 255), strings.Repeat("é", 127), strings.Repeat("'", 255),
	}
	leases := map[string]dialect.Lease{}
	for _, n := range names {
		leases[n] = e.grant(tb, n, n) // the owner too
	}
	infos, err := tb.stmts.List(e.ctx)
	e.must(err, "List")
	if len(infos) != len(names) {
		t.Fatalf("List: %d rows, want %d", len(infos), len(names))
	}
	for _, li := range infos {
		l, ok := leases[li.Name]
		if !ok || li.Owner != l.Owner || li.Token != l.Token {
			t.Fatalf("List: %q held by %q with token %d: not one of the names granted, byte for byte", li.Name, li.Owner, li.Token)
		}
	}
	for _, n := range names {
		e.refused(tb, n, "another owner")
		e.release(tb, leases[n], true)
	}
}

// A grant whose context ends while it waits behind a row lock returns an
// error wrapping the context's, and leaves nothing behind: once the row is
// free, the lock is not held by the abandoned call's owner, and another
// owner gets it.
func checkCancelledGrant(t *testing.T, e *env, tb *table) {
	const name = "cancelled"
	a := e.grant(tb, name, "a")
	e.expire(tb, name)
	end, err := e.HoldRow(e.ctx, tb.name, name)
	e.must(err, "HoldRow")
	defer end()

	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	got := grantAsync(ctx, tb, name, "abandoned")
	e.eventually("the grant waits for the held row", func() bool {
		select {
		case r := <-got:
			t.Fatalf("grant returned while the row was held: %d, %v", r.token, r.err)
		default:
		}
		return e.waiting() > 0
	})
	cancel()
	start := time.Now()
	r := await(e, "the cancelled grant returns", got)
	t.Logf("the cancelled grant returned %v after the cancel", time.Since(start))
	if r.err == nil || !errors.Is(r.err, context.Canceled) || r.token != 0 {
		t.Fatalf("grant whose context ended while it waited: %d, %v; want an error wrapping context.Canceled", r.token, r.err)
	}
	e.must(end(), "ending the held row's transaction")

	if li, ok := e.held(tb, name); ok && li.Owner == "abandoned" {
		t.Fatalf("the lock went to the owner of a cancelled grant: %+v", li)
	}
	c := e.grant(tb, name, "c")
	if c.Token <= a.Token {
		t.Fatalf("token %d after the cancelled grant, want > %d", c.Token, a.Token)
	}
	e.holder(tb, c, 1)
}

// The version table's transitions are compare-and-swaps on the version:
// Create only makes a missing row (an existing one: 0, without error), Take only an expired or released row
// still at the version read, Reenter only the live lease of the same owner
// at that version; the version grows with every Take and never otherwise.
func checkSwaps(t *testing.T, e *env) {
	vt := e.tables(e.Dialect).Versions
	tb := versionTable(vt)
	const name = "swap"
	read := func() dialect.VersionRow {
		t.Helper()
		row, ok, err := vt.Read(e.ctx, name)
		e.must(err, "Read")
		if !ok {
			t.Fatal("Read: no row")
		}
		return row
	}
	check := func(what string, ok bool, err error, want bool) {
		t.Helper()
		e.must(err, what)
		if ok != want {
			t.Fatalf("%s = %v, want %v", what, ok, want)
		}
	}
	swap := func(owner string, version int64) dialect.SwapParams {
		return dialect.SwapParams{Name: name, Owner: owner, TTL: long, Version: version}
	}

	if row, ok, err := vt.Read(e.ctx, name); err != nil || ok {
		t.Fatalf("Read of a name without a row: %+v, %v, %v", row, ok, err)
	}
	v, err := vt.Create(e.ctx, dialect.AcquireParams{Name: name, Owner: "a", TTL: long})
	e.must(err, "Create")
	if row := read(); v < 1 || row.Version != v || row.Owner != "a" || row.Holds != 1 || !row.Live || row.Remaining <= 0 || row.Remaining > long {
		t.Fatalf("Read after Create (version %d): %+v", v, row)
	}
	if v, err := vt.Create(e.ctx, dialect.AcquireParams{Name: name, Owner: "b", TTL: long}); err != nil || v != 0 {
		t.Fatalf("Create of an existing row: %d, %v; want 0 without error", v, err)
	}
	if row := read(); row.Version != v || row.Owner != "a" {
		t.Fatalf("Read after a refused Create: %+v", row)
	}
	took := func(what string, got int64, err error, want bool) int64 {
		t.Helper()
		e.must(err, what)
		if (got != 0) != want {
			t.Fatalf("%s = version %d, want taken: %v", what, got, want)
		}
		return got
	}
	got, err := vt.Take(e.ctx, swap("b", v))
	took("Take of a live lease", got, err, false)
	ok, err := vt.Reenter(e.ctx, swap("b", v))
	check("Reenter by another owner", ok, err, false)
	ok, err = vt.Reenter(e.ctx, swap("a", v+1))
	check("Reenter at another version", ok, err, false)
	ok, err = vt.Reenter(e.ctx, swap("a", v))
	check("Reenter", ok, err, true)
	if row := read(); row.Version != v || row.Holds != 2 || row.Owner != "a" {
		t.Fatalf("Read after Reenter: %+v, want version %d, 2 holds", row, v)
	}

	lease := dialect.Lease{Name: name, Owner: "a", Token: v}
	e.release(tb, lease, true)
	e.release(tb, lease, true)
	if row := read(); row.Version != v || row.Holds != 0 || row.Live || row.Remaining != 0 {
		t.Fatalf("Read after the last release: %+v, want version %d, free", row, v)
	}
	ok, err = vt.Reenter(e.ctx, swap("a", v))
	check("Reenter of a released lease", ok, err, false)
	got, err = vt.Take(e.ctx, swap("b", v-1))
	took("Take at a stale version", got, err, false)
	v1, err := vt.Take(e.ctx, swap("b", v))
	took("Take of a released lease", v1, err, true)
	if row := read(); v1 <= v || row.Version != v1 || row.Owner != "b" || row.Holds != 1 || !row.Live {
		t.Fatalf("Read after Take to version %d: %+v, want a version above %d held once by b", v1, row, v)
	}

	e.expire(tb, name)
	if row := read(); row.Live || row.Remaining != 0 || row.Version != v1 {
		t.Fatalf("Read of an expired lease: %+v", row)
	}
	ok, err = vt.Reenter(e.ctx, swap("b", v1))
	check("Reenter of an expired lease", ok, err, false)
	got, err = vt.Take(e.ctx, swap("c", v))
	took("Take at a stale version after expiry", got, err, false)
	v2, err := vt.Take(e.ctx, swap("c", v1))
	took("Take of an expired lease", v2, err, true)
	got, err = vt.Take(e.ctx, swap("d", v1))
	took("a second Take at the same version", got, err, false)
	if row := read(); v2 <= v1 || row.Version != v2 || row.Owner != "c" {
		t.Fatalf("Read after the takeover to version %d: %+v, want a version above %d held by c", v2, row, v1)
	}
}
