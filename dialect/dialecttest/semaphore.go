package dialecttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/testutil"
)

// Semaphores is the table of semaphore holders, sqlrun.SemaphoreTable,
// for the hooks: a row per (name, owner). The suite's checks of it that
// expire or hold a name's row keep one holder per name.
const Semaphores Table = "sqllock_semaphore_holders"

// exerciseSemaphores runs the semaphore checks of a sqlrun.SemaphoreTable.
//
// Semaphore table: with a limit of 1, every lease check of the lock table
// (tokens, renewal, release, minimum hold, guard, list, names, cancelled
// grant). With larger limits: Acquire grants up to the limit to distinct
// owners with growing tokens, refuses the next (0), re-enters an owner's
// permit (same token, one more hold), and counts a grant asking for
// another limit against the holders' limit while holders remain, taking
// the new limit once none does; SetLimit changes a name's limit for every
// grant at once (a lower one grants nothing until fewer hold, a raise
// grants at once), atomically with concurrent grants, and Available reads
// it (see setlimit.go);
// expired holders' permits go to new owners; Remaining reports no row
// without holders and the first lease's end otherwise; Reap deletes
// expired holders only; concurrent acquirers on pools of their own never
// hold more than the limit at once; and, for a Notifier whose semaphores
// announce releases, a freed permit of a name someone waited for is
// announced.
func exerciseSemaphores(t *testing.T, run func(name string, check func(t *testing.T, e *env)), notifier bool) {
	for _, c := range leaseChecks {
		run("Semaphores/"+c.name, func(t *testing.T, e *env) { c.check(t, e, e.semaphoreTable(1)) })
	}
	run("Semaphores/Limit", checkSemaphoreLimit)
	run("Semaphores/Expiry", checkSemaphoreExpiry)
	run("Semaphores/Remaining", checkSemaphoreRemaining)
	run("Semaphores/Reap", checkSemaphoreReap)
	run("Semaphores/Concurrent", checkSemaphoreConcurrent)
	run("Semaphores/SetLimit", checkSemaphoreSetLimit)
	run("Semaphores/SetLimitConcurrent", checkSemaphoreSetLimitConcurrent)
	run("Semaphores/AvailableConcurrent", checkSemaphoreAvailableConcurrent)
	if notifier {
		run("Semaphores/Announced", checkSemaphoreAnnounced)
		run("Semaphores/RaiseAnnounced", checkSemaphoreRaiseAnnounced)
	}
}

// semaphoreTable returns the semaphore table as a lease table whose grants
// ask for limit permits.
func (e *env) semaphoreTable(limit int) *table {
	st := e.tables(e.Dialect).Semaphores
	return &table{name: Semaphores, stmts: st,
		grant: func(ctx context.Context, name, owner string, ttl time.Duration) (int64, error) {
			return st.Acquire(ctx, dialect.SemaphoreParams{Name: name, Owner: owner, TTL: ttl, Limit: limit})
		}}
}

// holders counts the holders of name that List shows.
func (e *env) holders(tb *table, name string) int {
	e.t.Helper()
	infos, err := tb.stmts.List(e.ctx)
	e.must(err, "List")
	n := 0
	for _, li := range infos {
		if li.Name == name && li.Holds > 0 {
			n++
		}
	}
	return n
}

func checkSemaphoreLimit(t *testing.T, e *env) {
	const name = "limit"
	tb := e.semaphoreTable(3)
	var (
		held []dialect.Lease
		last int64
	)
	for i := range 3 {
		l := e.grant(tb, name, fmt.Sprint("o", i))
		if l.Token <= last {
			t.Fatalf("permit %d: token %d, want > %d", i, l.Token, last)
		}
		last = l.Token
		held = append(held, l)
	}
	e.refused(tb, name, "o3")
	if n := e.holders(tb, name); n != 3 {
		t.Fatalf("List shows %d holders, want 3", n)
	}
	again := e.grant(tb, name, "o1")
	if again != held[1] {
		t.Fatalf("re-entry: %+v, want %+v", again, held[1])
	}
	// Another limit counts against the holders' while they hold.
	e.refused(e.semaphoreTable(5), name, "o4")
	e.release(tb, again, true)
	e.refused(tb, name, "o3")
	for _, l := range held {
		e.release(tb, l, true)
	}
	if n := e.holders(tb, name); n != 0 {
		t.Fatalf("List shows %d holders after every release, want 0", n)
	}
	two := e.semaphoreTable(2)
	l := e.grant(two, name, "o5")
	if l.Token <= last {
		t.Fatalf("token %d after the limit changed, want > %d", l.Token, last)
	}
	e.grant(two, name, "o6")
	e.refused(two, name, "o7")
}

// An expired holder's permit goes to the next owner, with a larger token;
// the other holders keep theirs, and the expired one is not renewed.
func checkSemaphoreExpiry(t *testing.T, e *env) {
	const name = "expiry"
	tb := e.semaphoreTable(2)
	a := e.grant(tb, name, "a")
	// A holder whose lease ends a millisecond after its grant, as a
	// crashed one's does once its TTL has passed.
	b := e.grantTTL(tb, name, "b", time.Millisecond)
	var c int64
	e.eventually("the expired holder's permit goes to another owner", func() bool {
		var err error
		c, err = tb.grant(e.ctx, name, "c", long)
		e.must(err, "grant to c")
		return c != 0
	})
	if c <= b.Token {
		t.Fatalf("token %d after the expiry, want > %d", c, b.Token)
	}
	e.refused(tb, name, "d")
	ok, err := testutil.Renewed(tb.stmts.RenewMany(e.ctx, []dialect.Lease{a, b, {Name: name, Owner: "c", Token: c}}, long))
	e.must(err, "RenewMany")
	if !ok[0] || ok[1] || !ok[2] {
		t.Fatalf("RenewMany(live a, expired b, live c) = %v, want [true false true]", ok)
	}
}

// Remaining reports no row for a name without holders, otherwise at most
// the time the first holder's lease has left, and 0 once a permit is free.
func checkSemaphoreRemaining(t *testing.T, e *env) {
	st := e.tables(e.Dialect).Semaphores
	const name = "remaining"
	if d, ok, err := st.Remaining(e.ctx, name); err != nil || ok {
		t.Fatalf("Remaining without holders: %v, %v, %v; want false", d, ok, err)
	}
	tb := e.semaphoreTable(2)
	a := e.grant(tb, name, "a")
	e.grantTTL(tb, name, "b", 2*long)
	// The first answer may be 0 (look again at once): a dialect that
	// announces releases marks the name as waited for.
	for i := range 2 {
		d, ok, err := st.Remaining(e.ctx, name)
		e.must(err, "Remaining")
		if !ok || d > long+2*time.Millisecond {
			t.Fatalf("Remaining with holders (ask %d): %v, %v; want ok and at most %v", i, d, ok, long)
		}
		if i == 1 && d <= 0 {
			t.Fatalf("Remaining with live holders, asked again: %v; want > 0", d)
		}
	}
	// A released permit's row may stay until the next grant or the
	// reaper: the waiter is told to look again at once, not an error.
	e.release(tb, a, true)
	if d, ok, err := st.Remaining(e.ctx, name); err != nil || ok && d != 0 {
		t.Fatalf("Remaining beside a released permit: %v, %v, %v; want 0 (look again)", d, ok, err)
	}
}

// Reap deletes released and expired holders' rows, not live ones, and
// tokens keep growing after it.
func checkSemaphoreReap(t *testing.T, e *env) {
	tb := e.semaphoreTable(1)
	live := e.grant(tb, "reap-live", "a")
	gone := e.grant(tb, "reap-expired", "b")
	e.expire(tb, gone.Name)
	freed := e.grant(tb, "reap-released", "c")
	e.release(tb, freed, true)
	if n := e.reapAll(); n < 2 {
		t.Fatalf("Reap deleted %d rows, want at least 2", n)
	}
	e.holder(tb, live, 1)
	for _, l := range []dialect.Lease{gone, freed} {
		if next := e.grant(tb, l.Name, "d"); next.Token <= l.Token {
			t.Fatalf("token %d after reaping %s, want > %d", next.Token, l.Name, l.Token)
		}
	}
}

// Acquirers on pools of their own, as processes, never hold more than the
// limit at once: each counts itself in after its grant returned and out
// before it releases, so the count never exceeds the holders the database
// has.
func checkSemaphoreConcurrent(t *testing.T, e *env) {
	const (
		name                   = "concurrent"
		limit, workers, rounds = 2, 6, 15
	)
	var (
		inside, peak atomic.Int32
		grants       atomic.Int32
		wg           sync.WaitGroup
	)
	errs := make(chan error, workers)
	for w := range workers {
		st := e.tables(e.Open(t, 2)).Semaphores
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprint("w", w)
			for r := 0; r < rounds && e.ctx.Err() == nil; {
				p := dialect.SemaphoreParams{Name: name, Owner: owner, TTL: long, Limit: limit}
				token, err := st.Acquire(e.ctx, p)
				if errors.Is(err, dialect.ErrTransient) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				if token == 0 {
					continue
				}
				n := inside.Add(1)
				for pk := peak.Load(); n > pk && !peak.CompareAndSwap(pk, n); pk = peak.Load() {
				}
				grants.Add(1)
				inside.Add(-1)
				// A transient conflict (SQLite's busy timeout, passed on a
				// loaded machine with six writers) left the release
				// undone: again, as a lease's release is retried.
				_, err = st.Release(e.ctx, dialect.Lease{Name: name, Owner: owner, Token: token}, 0)
				for errors.Is(err, dialect.ErrTransient) && e.ctx.Err() == nil {
					_, err = st.Release(e.ctx, dialect.Lease{Name: name, Owner: owner, Token: token}, 0)
				}
				if err != nil {
					errs <- err
					return
				}
				r++
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if p := peak.Load(); p > limit {
		t.Fatalf("%d holders at once, limit %d", p, limit)
	}
	if g := grants.Load(); g != workers*rounds {
		t.Fatalf("%d grants, want %d", g, workers*rounds)
	}
}

// A freed permit of a name someone waited for (as Remaining marks) is
// announced.
func checkSemaphoreAnnounced(t *testing.T, e *env) {
	st := e.tables(e.Dialect).Semaphores
	if !st.Announces() {
		t.Skip("the dialect's semaphores do not announce releases")
	}
	s := newSubscriber()
	sub := e.Dialect.Catalogue().Notifier.Subscribe(s)
	defer sub.Unsubscribe()
	select {
	case <-s.ready:
	case err := <-s.lost:
		t.Fatalf("the listening connection failed: %v", err)
	case <-e.ctx.Done():
		t.Fatal("never: Ready")
	}
	const name = "announced"
	tb := e.semaphoreTable(1)
	l := e.grant(tb, name, "a")
	e.refused(tb, name, "b")
	_, _, err := st.Remaining(e.ctx, name)
	e.must(err, "Remaining")
	if e.Dialect.Catalogue().WatchesNames {
		// Waiters wait for the names they watch: the registration is
		// announced once, then the release.
		sub.Watch(name)
		defer sub.Unwatch(name)
		awaitName(e, s, name)
	}
	e.release(tb, l, true)
	awaitName(e, s, name)
}

// awaitName waits until s is told of a release of name.
func awaitName(e *env, s *subscriber, name string) {
	e.t.Helper()
	t := e.t
	for {
		select {
		case got := <-s.released:
			if got == name {
				return
			}
		case err := <-s.lost:
			t.Fatalf("the listening connection failed: %v", err)
		case <-e.ctx.Done():
			t.Fatal("never: the release announced")
		}
	}
}
