package dialecttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/internal/testutil"
)

// RWHolders is the holders table of read/write locks
// (sqlrun.RWLockTable), for the hooks.
const RWHolders Table = "sqllock_rwlock_holders"

// rwLeaseChecks are the lease checks that hold for the holders table,
// granted on the write side: all but the minimum hold, which read/write
// locks do not offer.
var rwLeaseChecks = []string{"Tokens", "RenewMany", "RenewManyBatch", "Release", "Guard", "List", "Names", "CancelledGrant"}

// rwChecks run on a sqlrun.RWLockTable.
var rwChecks = []struct {
	name  string
	check func(t *testing.T, e *env, rw sqlrun.RWLockTable)
}{
	{"Sides", checkRWSides},
	{"Intent", checkRWIntent},
	{"Expired", checkRWExpired},
	{"Concurrent", checkRWConcurrent},
	{"Downgrade", checkRWDowngrade},
	{"Upgradeable", checkRWUpgradeable},
}

// exerciseRW runs the read/write lock checks on probe's RWLocks.
func exerciseRW(probe *dialect.Catalogue, polling bool, run func(string, func(*testing.T, *env))) {
	rwOf := func(_ *testing.T, e *env) sqlrun.RWLockTable { return e.tables(e.Dialect).RWLocks }
	for _, c := range rwChecks {
		run("RWLocks/"+c.name, func(t *testing.T, e *env) { c.check(t, e, rwOf(t, e)) })
	}
	if probe.Notifier != nil && probe.RWLocks.Announces && !polling {
		run("RWLocks/Announce", func(t *testing.T, e *env) { checkRWAnnounce(t, e, rwOf(t, e)) })
	}
	for _, c := range leaseChecks {
		for _, want := range rwLeaseChecks {
			if c.name == want {
				run("RWLocks/"+c.name, func(t *testing.T, e *env) { c.check(t, e, rwTable(rwOf(t, e))) })
			}
		}
	}
}

// rwTable is the holders table as a lease table whose leases are granted
// on the write side.
func rwTable(rw sqlrun.RWLockTable) *table {
	return &table{name: RWHolders, stmts: rw,
		grant: func(ctx context.Context, name, owner string, ttl time.Duration) (int64, error) {
			g, err := rw.Acquire(ctx, dialect.RWAcquireParams{Name: name, Owner: owner, TTL: ttl})
			if err == nil && g.Upgrade {
				err = fmt.Errorf("refused as an upgrade: %+v", g)
			}
			return g.Token, err
		}}
}

// rwGrant makes one attempt on the side of name asked for.
func rwGrant(e *env, rw sqlrun.RWLockTable, name, owner string, shared, wait bool) dialect.RWGrant {
	e.t.Helper()
	g, err := rw.Acquire(e.ctx, dialect.RWAcquireParams{Name: name, Owner: owner, TTL: long, Shared: shared, Wait: wait})
	e.must(err, fmt.Sprintf("Acquire %s by %s (shared %v)", name, owner, shared))
	return g
}

// rwRelease releases one hold of a granted lease.
func rwRelease(e *env, rw sqlrun.RWLockTable, name, owner string, g dialect.RWGrant) {
	e.t.Helper()
	ok, err := rw.Release(e.ctx, dialect.Lease{Name: name, Owner: owner, Token: g.Token}, 0)
	e.must(err, "Release "+name)
	if !ok {
		e.t.Fatalf("Release %s of %s: false, want true", name, owner)
	}
}

// Readers share; a writer excludes readers and writers; tokens grow in
// grant order; re-entry keeps the token; an owner of the read side asking
// for the write side is refused as an upgrade; a read by the writer
// re-enters the write lease.
func checkRWSides(t *testing.T, e *env, rw sqlrun.RWLockTable) {
	const name = "sides"
	r1 := rwGrant(e, rw, name, "r1", true, false)
	r2 := rwGrant(e, rw, name, "r2", true, false)
	if r1.Token == 0 || r2.Token <= r1.Token || !r1.Shared || !r2.Shared {
		t.Fatalf("readers: %+v, %+v, want shared grants with growing tokens", r1, r2)
	}
	if g := rwGrant(e, rw, name, "w", false, false); g.Token != 0 || g.Left <= 0 {
		t.Fatalf("writer beside readers: %+v, want refused with time left", g)
	}
	if g := rwGrant(e, rw, name, "r1", true, false); g.Token != r1.Token {
		t.Fatalf("re-entered read: %+v, want token %d", g, r1.Token)
	}
	if g := rwGrant(e, rw, name, "r1", false, true); !g.Upgrade || g.Token != 0 {
		t.Fatalf("write by a reader: %+v, want refused as an upgrade", g)
	}
	rwRelease(e, rw, name, "r1", r1)
	rwRelease(e, rw, name, "r1", r1)
	rwRelease(e, rw, name, "r2", r2)
	w := rwGrant(e, rw, name, "w", false, false)
	if w.Token <= r2.Token || w.Shared {
		t.Fatalf("writer: %+v, want an exclusive grant above %d", w, r2.Token)
	}
	if g := rwGrant(e, rw, name, "r3", true, false); g.Token != 0 {
		t.Fatalf("reader beside a writer: %+v, want refused", g)
	}
	if g := rwGrant(e, rw, name, "w2", false, false); g.Token != 0 {
		t.Fatalf("second writer: %+v, want refused", g)
	}
	if g := rwGrant(e, rw, name, "w", true, false); g.Token != w.Token || g.Shared {
		t.Fatalf("read by the writer: %+v, want the write lease %d", g, w.Token)
	}
	rwRelease(e, rw, name, "w", w)
	rwRelease(e, rw, name, "w", w)
	if g := rwGrant(e, rw, name, "r3", true, false); g.Token <= w.Token {
		t.Fatalf("reader after the writer: %+v, want a token above %d", g, w.Token)
	}
}

// A refused writer that will wait records an intent that keeps new
// readers out (not the readers in, re-entering), until it is withdrawn,
// or until the writer's grant clears it; an intent does not stop another
// writer.
func checkRWIntent(t *testing.T, e *env, rw sqlrun.RWLockTable) {
	const name = "intent"
	r := rwGrant(e, rw, name, "r", true, false)
	if g := rwGrant(e, rw, name, "w", false, true); g.Token != 0 || !g.Marked {
		t.Fatalf("writer beside a reader: %+v, want refused, the name marked as waited for the first time", g)
	}
	if g := rwGrant(e, rw, name, "r2", true, false); g.Token != 0 || g.Left <= 0 {
		t.Fatalf("new reader behind a writer's intent: %+v, want refused with time left", g)
	}
	if g := rwGrant(e, rw, name, "r", true, true); g.Token != r.Token {
		t.Fatalf("the reader in, re-entering: %+v, want token %d", g, r.Token)
	}
	e.must(rw.Withdraw(e.ctx, name, "w"), "Withdraw")
	r2 := rwGrant(e, rw, name, "r2", true, false)
	if r2.Token == 0 {
		t.Fatal("new reader after the intent's withdrawal: refused")
	}
	if g := rwGrant(e, rw, name, "w", false, true); g.Token != 0 || g.Marked {
		t.Fatalf("writer beside readers: %+v, want refused, the name marked already", g)
	}
	rwRelease(e, rw, name, "r", r)
	rwRelease(e, rw, name, "r", r)
	rwRelease(e, rw, name, "r2", r2)
	w := rwGrant(e, rw, name, "w", false, true)
	if w.Token == 0 {
		t.Fatal("waiting writer with the readers gone: refused")
	}
	rwRelease(e, rw, name, "w", w)
	if g := rwGrant(e, rw, name, "r3", true, false); g.Token == 0 {
		t.Fatal("reader after the writer's grant and release: refused (intent left behind)")
	}
}

// Expired holders are gone: a crashed reader's lease does not keep a
// writer out, is not renewed, and its row is reaped; tokens keep growing.
func checkRWExpired(t *testing.T, e *env, rw sqlrun.RWLockTable) {
	const name = "expired"
	r := rwGrant(e, rw, name, "r", true, false)
	e.must(e.Expire(e.ctx, RWHolders, name), "Expire")
	w := rwGrant(e, rw, name, "w", false, false)
	if w.Token <= r.Token {
		t.Fatalf("writer after the reader expired: %+v, want a token above %d", w, r.Token)
	}
	ok, err := testutil.Renewed(rw.RenewMany(e.ctx, []dialect.Lease{{Name: name, Owner: "r", Token: r.Token}}, long))
	e.must(err, "RenewMany")
	if ok[0] {
		t.Fatal("the expired reader's lease was renewed")
	}
	e.must(e.Expire(e.ctx, RWHolders, name), "Expire")
	if e.reapAll() == 0 {
		t.Fatal("Reap deleted no expired holder")
	}
	if g := rwGrant(e, rw, name, "r", true, false); g.Token <= w.Token {
		t.Fatalf("reader after reaping: %+v, want a token above %d", g, w.Token)
	}
}

// Holders on pools of their own, as processes, take both sides of a few
// names at random: never a reader beside a writer, never two writers, and
// every writer's token above every token granted for its name before.
func checkRWConcurrent(t *testing.T, e *env, rw sqlrun.RWLockTable) {
	const (
		workers = 6
		rounds  = 40
	)
	names := []string{"c0", "c1"}
	var (
		mu      sync.Mutex
		readers = map[string]int{}
		writers = map[string]int{}
		top     = map[string]int64{}
		grants  int
	)
	var wg sync.WaitGroup
	for i := range workers {
		other := e.tables(e.Open(t, 2)).RWLocks
		wg.Go(func() {
			owner := fmt.Sprintf("worker-%d", i)
			for range rounds {
				name := names[rand.N(len(names))]
				shared := rand.N(3) > 0
				g, err := other.Acquire(e.ctx, dialect.RWAcquireParams{Name: name, Owner: owner, TTL: long, Shared: shared})
				if errors.Is(err, dialect.ErrTransient) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if g.Token == 0 {
					continue
				}
				mu.Lock()
				switch {
				case shared && writers[name] > 0:
					t.Errorf("%s: a reader granted beside a writer", name)
				case !shared && (writers[name] > 0 || readers[name] > 0):
					t.Errorf("%s: a writer granted beside %d writers and %d readers", name, writers[name], readers[name])
				case !shared && g.Token <= top[name]:
					t.Errorf("%s: writer's token %d, not above %d", name, g.Token, top[name])
				}
				if shared {
					readers[name]++
				} else {
					writers[name]++
				}
				top[name] = max(top[name], g.Token)
				grants++
				mu.Unlock()
				mu.Lock()
				if shared {
					readers[name]--
				} else {
					writers[name]--
				}
				mu.Unlock()
				lease := dialect.Lease{Name: name, Owner: owner, Token: g.Token}
				ok, err := other.Release(e.ctx, lease, 0)
				for errors.Is(err, dialect.ErrTransient) && e.ctx.Err() == nil { // as a lease's release is retried
					ok, err = other.Release(e.ctx, lease, 0)
				}
				if err != nil || !ok {
					t.Errorf("Release: %v, %v", ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if grants == 0 {
		t.Fatal("no grant at all")
	}
}

// The last release of a name that a refused waiter marked, a withdrawn
// intent, and a downgrade are announced to the dialect's subscribers.
func checkRWAnnounce(t *testing.T, e *env, rw sqlrun.RWLockTable) {
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
	// A name announced again later is a spurious wake-up, which waiters
	// tolerate (a bell connection made anew announces its watched names
	// once more): only an announcement of a name never due is wrong.
	seen := map[string]bool{}
	announced := func(want string) {
		t.Helper()
		for {
			select {
			case got := <-s.released:
				if got == want {
					seen[got] = true
					return
				}
				if !seen[got] {
					t.Fatalf("announced %q, want %q", got, want)
				}
			case err := <-s.lost:
				t.Fatalf("the listening connection failed: %v", err)
			case <-e.ctx.Done():
				t.Fatalf("never: the announcement of %q", want)
			}
		}
	}
	// Where the notifier watches names, waiters wait for them: each
	// registration is announced once.
	watched := func(name string) {
		t.Helper()
		if e.Dialect.Catalogue().WatchesNames {
			sub.Watch(name)
			t.Cleanup(func() { sub.Unwatch(name) })
			announced(name)
		}
	}
	// A writer's release, with a reader waiting.
	w := rwGrant(e, rw, "announce-w", "w", false, false)
	if g := rwGrant(e, rw, "announce-w", "r", true, true); g.Token != 0 {
		t.Fatalf("reader beside a writer: %+v, want refused", g)
	}
	watched("announce-w")
	rwRelease(e, rw, "announce-w", "w", w)
	announced("announce-w")
	// A waiting writer's withdrawn intent, with a reader waiting.
	r := rwGrant(e, rw, "announce-i", "r", true, false)
	if g := rwGrant(e, rw, "announce-i", "w", false, true); g.Token != 0 {
		t.Fatalf("writer beside a reader: %+v, want refused", g)
	}
	watched("announce-i")
	e.must(rw.Withdraw(e.ctx, "announce-i", "w"), "Withdraw")
	announced("announce-i")
	rwRelease(e, rw, "announce-i", "r", r)
	announced("announce-i")
	// A writer's downgrade, with a reader waiting.
	w = rwGrant(e, rw, "announce-d", "w", false, false)
	if g := rwGrant(e, rw, "announce-d", "r", true, true); g.Token != 0 {
		t.Fatalf("reader beside a writer: %+v, want refused", g)
	}
	watched("announce-d")
	if !rwDowngrade(e, rw, "announce-d", "w", w) {
		t.Fatal("Downgrade: false, want true")
	}
	announced("announce-d")
	rwRelease(e, rw, "announce-d", "w", w)
}
