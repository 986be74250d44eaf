package sqllock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/internal/testutil"
)

// failing is a dialect whose lock table's acquire statements fail while
// fail is set: a woken waiter that cannot be granted.
type failing struct {
	dialect.Dialect
	fail *atomic.Bool
}

func (d failing) Tables() (*sqlrun.Tables, error) {
	tb, err := sqlrun.Open(d.Dialect)
	if err != nil {
		return nil, err
	}
	tb.Locks = failingLocks{tb.Locks, d.fail}
	if tb.Waking != nil {
		tb.Waking = failingTickets{tb.Waking, d.fail}
	}
	return tb, nil
}

// failingTickets fails the grants of a waiter with a ticket as
// failingLocks fails acquires.
type failingTickets struct {
	sqlrun.FairTable
	fail *atomic.Bool
}

func (q failingTickets) Grant(ctx context.Context, p dialect.AcquireParams, ticket int64) (int64, error) {
	if q.fail.Load() {
		return 0, errAcquireFailed
	}
	return q.FairTable.Grant(ctx, p, ticket)
}

type failingLocks struct {
	sqlrun.LockTable
	fail *atomic.Bool
}

var errAcquireFailed = errors.New("the acquire statement failed")

func (l failingLocks) Acquire(ctx context.Context, p dialect.AcquireParams) (int64, error) {
	if l.fail.Load() {
		return 0, errAcquireFailed
	}
	return l.LockTable.Acquire(ctx, p)
}

// A release wakes the waiter of one locker, the one that began to wait
// first, not every locker's; a woken waiter whose attempt fails passes the
// wake-up on to the next, and the last stays asleep until it is its turn.
// Polling is slowed to ten minutes, so a waiter that acquires within the
// test was woken.
func TestReleaseWakesOneLocker(t *testing.T) {
	t.Parallel()
	for _, m := range envs {
		t.Run(m.kind, func(t *testing.T) {
			t.Parallel()
			e := m.make(t)
			ctx := ctxT(t)
			slow := sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 10 * time.Minute, MaxBackoff: 10 * time.Minute}}
			holder, err := sqllock.NewTable(e.d, slow)
			if err != nil {
				t.Fatal(err)
			}
			fail := new(atomic.Bool)
			var (
				lockers []*sqllock.Table
				probes  []*sqllock.RoomProbe
				got     []<-chan *sqllock.Lock
			)
			for i := range 3 {
				var d dialect.Dialect = e.d
				if i == 0 {
					d = failing{e.d, fail}
				}
				l, err := sqllock.NewTable(d, slow)
				if err != nil {
					t.Fatal(err)
				}
				lockers, probes = append(lockers, l), append(probes, sqllock.ProbeRoom(l))
			}
			// A waiter on another name gets the listener going first: the
			// waiters of "one" then make no attempt unwoken before the
			// release (a new listener wakes every waiter).
			w, err := holder.TryAcquire(ctx, "warm-up")
			if err != nil {
				t.Fatal(err)
			}
			defer w.Release(ctx)
			warm, err := sqllock.NewTable(e.d, slow)
			if err != nil {
				t.Fatal(err)
			}
			wctx, stopWarm := context.WithCancel(ctx)
			warmed := acquireAsync(wctx, warm, "warm-up")
			defer func() { stopWarm(); <-warmed }()
			waitRoom(t, warm, "warm-up", "listener ready", func(up bool, waiting int) bool { return up && waiting == 1 })
			k, err := holder.TryAcquire(ctx, "one")
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range lockers {
				got = append(got, acquireAsync(ctx, l, "one"))
				waitRoom(t, l, "one", "a waiter", func(_ bool, waiting int) bool { return waiting == 1 })
				if cat := e.d.Catalogue(); i == 0 && cat.WatchesNames && cat.Waking == nil {
					// The registration of the name is announced (once, or
					// again if the bell restarts): the first waiter has
					// tried before its attempts fail. (A waiter with a
					// ticket registers no name.)
					testutil.Eventually(ctx, t, "the registration's announcement", func() bool { return probes[0].Retries("one") >= 1 })
				}
			}
			fail.Store(true)
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if k := <-got[0]; k != nil {
				t.Fatal("the failing waiter acquired")
			}
			k = <-got[1]
			if k == nil {
				t.Fatal("the second waiter failed")
			}
			if probes[1].Notified("one") == 0 && probes[1].Losses() == 0 {
				t.Fatal("the second waiter acquired unwoken, its listening connection never lost")
			}
			if _, waiting := sqllock.RoomState(lockers[2], "one"); probes[2].Notified("one") != 0 || waiting != 1 {
				t.Fatalf("the third waiter: %d wake-ups, %d waiting; want 0 and 1", probes[2].Notified("one"), waiting)
			}
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}
			k = <-got[2]
			if k == nil {
				t.Fatal("the third waiter failed")
			}
			_ = k.Release(ctx)
		})
	}
}

// Where waiters take tickets (dialect.Catalogue.Waking,
// WakingSemaphores), a release wakes one waiting process, the one with the
// oldest ticket, however many processes wait: each process here is a
// dialect on a pool of its own, with a listening connection of its own,
// waiting for a lock table's lock or a semaphore's one permit. Polling is
// slowed to ten minutes, so a waiter that acquires was woken; and no
// wake-up reaches the processes still waiting, which run no statement
// during the hand-offs before theirs: the statements of a hand-off are the
// woken process's alone, the same number whichever the hand-off, however
// many processes still wait. (The server's own work still grows with the
// processes on PostgreSQL: every NOTIFY interrupts each listening
// connection of the database, whatever its channel; BENCHMARKS.md §17.)
func TestReleaseWakesOneProcess(t *testing.T) {
	t.Parallel()
	slow := sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 10 * time.Minute, MaxBackoff: 10 * time.Minute}}
	kinds := []struct {
		name, tickets string
		newLocker     func(d dialect.Dialect) (sqllock.Locker, error)
		waking        func(cat dialect.Catalogue) bool
	}{
		{"table", "sqllock_tickets", func(d dialect.Dialect) (sqllock.Locker, error) { return sqllock.NewTable(d, slow) },
			func(cat dialect.Catalogue) bool { return cat.Waking != nil }},
		{"semaphore", "sqllock_semaphore_tickets", func(d dialect.Dialect) (sqllock.Locker, error) {
			return sqllock.NewSemaphore(d, 1, sqllock.SemaphoreOptions{LeaseOptions: sqllock.LeaseOptions{TTL: slow.TTL, MaxBackoff: slow.MaxBackoff}})
		}, func(cat dialect.Catalogue) bool { return cat.WakingSemaphores != nil }},
	}
	for _, m := range envs {
		for _, kind := range kinds {
			t.Run(m.kind+"/"+kind.name, func(t *testing.T) {
				t.Parallel()
				e := m.make(t)
				if !kind.waking(e.d.Catalogue()) {
					t.Skipf("%s: a release announces the name to every waiting process (no tickets for %s waiters in dialect.Catalogue)", m.kind, kind.name)
				}
				ctx := ctxT(t)
				holder, err := kind.newLocker(e.d)
				if err != nil {
					t.Fatal(err)
				}
				k, err := holder.TryAcquire(ctx, "one")
				if err != nil {
					t.Fatal(err)
				}
				w, err := holder.TryAcquire(ctx, "warm-up")
				if err != nil {
					t.Fatal(err)
				}
				defer w.Release(ctx)
				const processes = 4
				var (
					probes  [processes]*sqllock.RoomProbe
					lockers [processes]sqllock.Locker
					got     [processes]<-chan *sqllock.Lock
					stmts   [processes]atomic.Int64
				)
				for i := range lockers {
					_, d := e.sibling(t, 0)
					l, err := kind.newLocker(counting{d, &stmts[i]})
					if err != nil {
						t.Fatal(err)
					}
					lockers[i], probes[i] = l, sqllock.ProbeRoom(l)
					// Each process's listener is up before its waiter
					// queues (a listener that comes up wakes its
					// waiters), and the waiters take their tickets in
					// turn.
					wctx, stop := context.WithCancel(ctx)
					warmed := acquireAsync(wctx, l, "warm-up")
					testutil.Eventually(ctx, t, "listener ready", func() bool {
						up, _ := sqllock.RoomState(l, "warm-up")
						return up
					})
					stop()
					<-warmed
					got[i] = acquireAsync(ctx, l, "one")
					testutil.Eventually(ctx, t, "the waiter's ticket", func() bool {
						var n int
						err := e.db.QueryRowContext(ctx, e.q("SELECT count(*) FROM {"+kind.tickets+"} WHERE name = 'one'")).Scan(&n)
						return err == nil && n == i+1
					})
					// In the room once its ticket's wait (the last
					// statement before it sleeps) returned.
					testutil.Eventually(ctx, t, "the waiter in its room", func() bool {
						_, waiting := sqllock.RoomState(l, "one")
						return waiting == 1
					})
				}
				var asleep [processes]int64 // statements before the first hand-off
				for i := range stmts {
					asleep[i] = stmts[i].Load()
				}
				perHandoff := int64(-1)
				for i := range lockers {
					if err := k.Release(ctx); err != nil {
						t.Fatal(err)
					}
					// The first process granted is the oldest ticket's.
					first := -1
					testutil.Eventually(ctx, t, "a grant", func() bool {
						for j := i; j < processes && first < 0; j++ {
							if len(got[j]) > 0 {
								first = j
							}
						}
						return first >= 0
					})
					if first != i && probes[first].Losses() > 0 {
						// It polled when its listening connection was
						// lost, as designed (see below).
						t.Skipf("hand-off %d went to process %d, which polled: its listening connection was lost", i, first)
					}
					if first != i {
						t.Fatalf("hand-off %d went to process %d", i, first)
					}
					if k = <-got[i]; k == nil {
						t.Fatalf("waiter %d failed", i)
					}
					if n := stmts[i].Load() - asleep[i]; probes[i].Losses() == 0 {
						if perHandoff >= 0 && n != perHandoff {
							t.Fatalf("hand-off %d: the woken process ran %d statements, hand-off 0's %d", i, n, perHandoff)
						}
						perHandoff = n
					}
					for j := i + 1; j < processes; j++ {
						if n := stmts[j].Load() - asleep[j]; n != 0 && probes[j].Losses() == 0 {
							t.Fatalf("after hand-off %d, process %d, still waiting, ran %d statements, want 0", i, j, n)
						}
					}
					if probes[i].Notified("one") == 0 {
						// A process whose listening connection was lost
						// (a slow machine can make its health check
						// time out) polls until it is back, as designed:
						// its grant proves nothing about wake-ups.
						if probes[i].Losses() == 0 {
							t.Fatalf("waiter %d acquired unwoken, its listening connection never lost", i)
						}
						t.Logf("waiter %d acquired by polling: its listening connection was lost %d times", i, probes[i].Losses())
					}
					for j := i + 1; j < processes; j++ {
						if n := probes[j].Notified("one"); n != 0 {
							t.Fatalf("after hand-off %d, process %d, still waiting, was woken %d times, want 0", i, j, n)
						}
					}
				}
				_ = k.Release(ctx)
			})
		}
	}
}
