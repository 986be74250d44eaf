package sqllock_test

import (
	"context"
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/testutil"
)

// The conformance suite: every behaviour of a lease-based Locker, against
// every dialect.

func TestTryAcquireExcludesOtherOwners(t *testing.T) {
	eachStrategy(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.anyLocker(t)
		a, err := l.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.TryAcquire(ctx, "job"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("second TryAcquire in the same goroutine: got %v, want ErrLocked", err)
		}
		other := e.anyLocker(t)
		if _, err := other.TryAcquire(ctx, "job"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("TryAcquire from another locker: got %v, want ErrLocked", err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		b, err := other.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		defer b.Release(ctx)
		if b.Token() <= a.Token() {
			t.Fatalf("token after release %d, want > %d", b.Token(), a.Token())
		}
		if b.Owner() == a.Owner() {
			t.Fatalf("two acquisitions share owner %q", a.Owner())
		}
	})
}

func TestReentrancyWithExplicitOwner(t *testing.T) {
	eachStrategy(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.anyLocker(t)
		octx := sqllock.WithOwner(ctx, "worker-7")
		first, err := l.TryAcquire(octx, "res")
		if err != nil {
			t.Fatal(err)
		}
		second, err := l.Acquire(octx, "res")
		if err != nil {
			t.Fatal(err)
		}
		if first.Token() != second.Token() || second.Owner() != "worker-7" {
			t.Fatalf("re-entry: tokens %d/%d owner %q", first.Token(), second.Token(), second.Owner())
		}
		// Re-entering through the lock's own owner works too.
		third, err := l.TryAcquire(sqllock.WithOwner(ctx, first.Owner()), "res")
		if err != nil {
			t.Fatal(err)
		}
		if got := holds(t, l, "res"); got != 3 && got != -1 {
			t.Fatalf("hold count %d, want 3", got)
		}
		for i, k := range []*sqllock.Lock{third, second} {
			if err := k.Release(ctx); err != nil {
				t.Fatalf("release %d: %v", i, err)
			}
			if _, err := l.TryAcquire(ctx, "res"); !errors.Is(err, sqllock.ErrLocked) {
				t.Fatalf("after releasing %d of 3 holds another owner got %v, want ErrLocked", i+1, err)
			}
		}
		if first.Context().Err() != nil {
			t.Fatal("lock context ended while a hold remains")
		}
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if cause := context.Cause(first.Context()); cause != sqllock.ErrNotHeld {
			t.Fatalf("context cause after the last release: %v, want ErrNotHeld", cause)
		}
		k, err := l.TryAcquire(ctx, "res")
		if err != nil {
			t.Fatalf("after the last hold: %v", err)
		}
		if k.Token() <= first.Token() {
			t.Fatalf("token %d after re-entrant holds, want > %d", k.Token(), first.Token())
		}
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// holds returns the hold count of name, or -1 if l cannot list its locks.
func holds(t *testing.T, l sqllock.Locker, name string) int {
	t.Helper()
	ll, ok := l.(locker)
	if !ok {
		return -1
	}
	infos, err := ll.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, li := range infos {
		if li.Name == name {
			return li.Holds
		}
	}
	return 0
}

// Goroutines sharing one locker must exclude each other: there is no thread
// identity to re-enter with.
func TestGoroutinesExcludeEachOther(t *testing.T) {
	eachStrategy(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.anyLocker(t)
		const workers, rounds = 6, 5
		var (
			inside, maxInside, done atomic.Int32
			lastToken               atomic.Int64
			wg                      sync.WaitGroup
			errs                    = make(chan error, workers)
		)
		for range workers {
			wg.Go(func() {
				for range rounds {
					k, err := l.Acquire(ctx, "shared")
					if err != nil {
						errs <- err
						return
					}
					n := inside.Add(1)
					for {
						m := maxInside.Load()
						if n <= m || maxInside.CompareAndSwap(m, n) {
							break
						}
					}
					if prev := lastToken.Swap(k.Token()); prev >= k.Token() {
						errs <- errors.New("token did not increase")
					}
					inside.Add(-1)
					done.Add(1)
					if err := k.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if maxInside.Load() != 1 || done.Load() != workers*rounds {
			t.Fatalf("max holders at once %d (want 1), critical sections %d (want %d)", maxInside.Load(), done.Load(), workers*rounds)
		}
	})
}

func TestAcquireWaitsForRelease(t *testing.T) {
	eachStrategy(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.anyLocker(t)
		holder, err := l.TryAcquire(ctx, "handoff")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *sqllock.Lock, 1)
		go func() {
			k, err := l.Acquire(ctx, "handoff")
			if err != nil {
				t.Error(err)
			}
			got <- k
		}()
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		k := <-got
		if k == nil {
			return
		}
		if k.Token() <= holder.Token() {
			t.Fatalf("waiter token %d, want > %d", k.Token(), holder.Token())
		}
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestAcquireHonoursContext(t *testing.T) {
	eachStrategy(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.anyLocker(t)
		holder, err := l.TryAcquire(ctx, "busy")
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Release(ctx)
		wctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		defer cancel()
		if _, err := l.Acquire(wctx, "busy"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire past its deadline: %v, want DeadlineExceeded", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := l.Acquire(cctx, "busy"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire with a cancelled context: %v, want Canceled", err)
		}
	})
}

// A holder that stops renewing (crashed) is taken over once its lease has
// expired — within 10 × TTL, a bound no busy machine comes near (the
// waiter polls at most every 500 ms) — and its guarded write after the
// takeover is rejected.
func TestCrashedHolderTakenOverAndFenced(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const ttl = 2 * time.Second
		// The crashed process: a grant nobody renews. It ends at most a TTL
		// after the statement returned.
		crashed := dialect.Lease{Name: "nightly", Owner: "crashed-host:1"}
		tok, err := e.s.grant(ctx, e.d, dialect.AcquireParams{Name: crashed.Name, Owner: crashed.Owner, TTL: ttl})
		if err != nil || tok == 0 {
			t.Fatalf("crashed holder's grant: %d, %v", tok, err)
		}
		start := time.Now()
		crashed.Token = tok

		// The new holder's own lease is long: it must still be held at the
		// end of the test, however busy the machine.
		l := e.locker(t, sqllock.TableOptions{})
		k, err := l.Acquire(ctx, "nightly")
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release(ctx)
		if took := time.Since(start); took > 10*ttl {
			t.Fatalf("takeover after %v, want within 10 × TTL = %v", took, 10*ttl)
		}
		if k.Token() <= crashed.Token {
			t.Fatalf("takeover token %d, want > %d", k.Token(), crashed.Token)
		}
		// The old holder wakes up and tries a guarded write.
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := e.s.stmts(e.d).Guard(ctx, tx, crashed)
		if err != nil || ok {
			t.Fatalf("old holder's guard after takeover: ok=%v err=%v, want rejected", ok, err)
		}
		// A refused guard means roll back (InnoDB keeps the examined row
		// share-locked until then).
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if ok, err := e.s.stmts(e.d).Release(ctx, crashed, 0); err != nil || ok {
			t.Fatalf("old holder's release after takeover: ok=%v err=%v, want false", ok, err)
		}
		// The new holder is unaffected.
		if err := guardOnce(t, e, k); err != nil {
			t.Fatalf("new holder's guard: %v", err)
		}
	})
}

// A holder whose lease was taken over learns it through its context, its
// guard and its release.
func TestLostLeaseIsReported(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		// A long lease, renewed often: only a renewal that finds the lease
		// taken over can end it, and one comes soon.
		l := e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute, RenewInterval: 100 * time.Millisecond}})
		old, err := l.TryAcquire(ctx, "lease")
		if err != nil {
			t.Fatal(err)
		}
		e.expire(t, "lease")
		thief, err := e.locker(t, sqllock.TableOptions{}).TryAcquire(ctx, "lease")
		if err != nil {
			t.Fatalf("takeover of an expired lease: %v", err)
		}
		defer thief.Release(ctx)

		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := old.Guard(ctx, tx); !errors.Is(err, sqllock.ErrLockLost) {
			t.Fatalf("guard after takeover: %v, want ErrLockLost", err)
		}
		_ = tx.Rollback()
		select {
		case <-old.Done():
		case <-ctx.Done():
			t.Fatal("lost lock's context never ended")
		}
		if cause := context.Cause(old.Context()); cause != sqllock.ErrLockLost {
			t.Fatalf("cause %v, want ErrLockLost", cause)
		}
		if err := old.Release(ctx); !errors.Is(err, sqllock.ErrLockLost) {
			t.Fatalf("release after loss: %v, want ErrLockLost", err)
		}
		if err := old.Release(ctx); !errors.Is(err, sqllock.ErrNotHeld) {
			t.Fatalf("second release: %v, want ErrNotHeld", err)
		}
		if thief.Context().Err() != nil {
			t.Fatal("new holder's context ended")
		}
	})
}

// Renewal keeps a lease alive past its TTL: each renewal moves the lease's
// end, on the database clock, to a TTL from then. The TTL is long, so that
// no busy machine can miss the trust window; the renewals are frequent, so
// the database shows several of them quickly.
func TestRenewalKeepsLease(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const ttl, every, renewals = time.Minute, 50 * time.Millisecond, 4
		l := e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl, RenewInterval: every}})
		k, err := l.TryAcquire(ctx, "long")
		if err != nil {
			t.Fatal(err)
		}
		other := e.locker(t, sqllock.TableOptions{})
		// Poll the row until the lease's end has moved several times, to
		// beyond a TTL after the grant: the database, not a sleep, says when.
		var ends []time.Time
		testutil.Eventually(ctx, t, "the lease's end moves with several renewals, to beyond a TTL after the grant", func() bool {
			if k.Context().Err() != nil {
				t.Fatalf("lease lost: %v", context.Cause(k.Context()))
			}
			if _, err := other.TryAcquire(ctx, "long"); !errors.Is(err, sqllock.ErrLocked) {
				t.Fatalf("TryAcquire while renewed: %v, want ErrLocked", err)
			}
			infos, err := l.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(infos) != 1 || infos[0].Token != k.Token() {
				t.Fatalf("List: %+v, want the lease of token %d", infos, k.Token())
			}
			li := infos[0]
			switch {
			case len(ends) == 0:
				if d := li.ExpiresAt.Sub(li.AcquiredAt); d < ttl {
					t.Fatalf("lease ends %v after its grant, want at least the TTL %v", d, ttl)
				}
				ends = append(ends, li.ExpiresAt)
			case li.ExpiresAt.After(ends[len(ends)-1]):
				ends = append(ends, li.ExpiresAt)
			}
			return len(ends) > renewals && li.ExpiresAt.Sub(li.AcquiredAt) > ttl
		})
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestReleaseSemantics(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.locker(t, sqllock.TableOptions{})
		k, err := l.TryAcquire(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := k.Release(ctx); !errors.Is(err, sqllock.ErrNotHeld) {
			t.Fatalf("double release: %v, want ErrNotHeld", err)
		}
		if cause := context.Cause(k.Context()); cause != sqllock.ErrNotHeld {
			t.Fatalf("cause after release %v, want ErrNotHeld", cause)
		}
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Guard(ctx, tx); !errors.Is(err, sqllock.ErrNotHeld) {
			t.Fatalf("guard after release: %v, want ErrNotHeld", err)
		}
		// Done with tx: on SQLite an open transaction holds the database's
		// write lock, which the statements below need.
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		// A release whose context is already over fails, and gives the
		// lease up all the same: the handle is released, renewal stops,
		// and the release is retried in the background, which frees the
		// lock for the next acquirer.
		k2, err := l.TryAcquire(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		dead, cancel := context.WithCancel(ctx)
		cancel()
		if err := k2.Release(dead); !errors.Is(err, context.Canceled) {
			t.Fatalf("release with a cancelled context: %v, want context.Canceled", err)
		}
		if cause := context.Cause(k2.Context()); cause != sqllock.ErrNotHeld {
			t.Fatalf("cause after a failed release %v, want ErrNotHeld", cause)
		}
		if err := k2.Release(ctx); err != sqllock.ErrNotHeld {
			t.Fatalf("release after a failed release: %v, want ErrNotHeld", err)
		}
		k3, err := l.Acquire(ctx, "r")
		if err != nil {
			t.Fatalf("acquire after the background release: %v", err)
		}
		if err := k3.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A guarded transaction commits only while the lease is held, and a takeover
// waits for it.
func TestGuardedWrite(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		if _, err := e.db.ExecContext(ctx, e.q("CREATE TABLE {ledger} (id INT PRIMARY KEY, total INT NOT NULL, token BIGINT NOT NULL)")); err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.ExecContext(ctx, e.q("INSERT INTO {ledger} VALUES (1, 0, 0)")); err != nil {
			t.Fatal(err)
		}
		// Renewals every 100ms queue behind the guarded transaction too (on
		// the optimistic strategy the thief only reads a live lease). The
		// TTL is long, so that the lease outlives any wait for the commit.
		l := e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute, RenewInterval: 100 * time.Millisecond}})
		k, err := l.TryAcquire(ctx, "ledger")
		if err != nil {
			t.Fatal(err)
		}
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Guard(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, e.q("UPDATE {ledger} SET total = total + 1, token = ? WHERE id = 1"), k.Token()); err != nil {
			t.Fatal(err)
		}
		// While tx is open, every transition of the lock row, a takeover
		// included, waits for it: the guard share-locked the row.
		thief := make(chan *sqllock.Lock, 1)
		go func() {
			nk, err := e.locker(t, sqllock.TableOptions{}).Acquire(ctx, "ledger")
			if err != nil {
				t.Error(err)
			}
			thief <- nk
		}()
		waitForLockWait(t, e)
		if err := tx.Commit(); err != nil {
			t.Fatalf("guarded commit: %v", err)
		}
		var total int
		var token int64
		if err := e.db.QueryRowContext(ctx, e.q("SELECT total, token FROM {ledger} WHERE id = 1")).Scan(&total, &token); err != nil {
			t.Fatal(err)
		}
		if total != 1 || token != k.Token() {
			t.Fatalf("ledger %d/%d, want 1/%d", total, token, k.Token())
		}
		_ = k.Release(ctx)
		if nk := <-thief; nk != nil {
			if nk.Token() <= k.Token() {
				t.Fatalf("thief token %d, want > %d", nk.Token(), k.Token())
			}
			_ = nk.Release(ctx)
		}
	})
}

// waitForLockWait polls the server until a transition (acquire, renewal) of
// this test's lock table waits for a row lock: proof that the lock's
// transitions queue behind a guarded transaction, obtained without sleeping.
func waitForLockWait(t *testing.T, e *env) {
	t.Helper()
	ctx := ctxT(t)
	waiting := func() bool {
		var q string
		switch e.kind {
		case "postgres":
			q = `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
AND (query LIKE 'INSERT INTO "` + e.ns + `".` + e.s.table + `%' OR query LIKE 'UPDATE "` + e.ns + `".` + e.s.table + `%')`
		case "mysql":
			// MariaDB lists a queued INSERT ... SELECT in the processlist, not
			// in innodb_trx; a statement on the row lasts only while it waits.
			// Acquires carry a leading comment (see mysql.Dialect's grant).
			q = "SELECT count(*) FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND (info LIKE '%INSERT INTO `" + e.ns + "`." + e.s.table + "%' OR info LIKE '%UPDATE `" + e.ns + "`." + e.s.table + "%')"
		case "sqlite":
			// SQLite lists no waiting statements. Open's pool has one
			// connection, which the guarded transaction holds, so a
			// transition of this process waits for it, and database/sql
			// counts that wait. (Other processes wait for SQLite's write
			// lock instead: see TestSQLiteGuardHoldsOffOtherConnections.)
			return e.db.Stats().WaitCount > 0
		}
		var n int
		if err := e.db.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	testutil.Eventually(ctx, t, "an acquire waits on the guarded row", waiting)
}

func TestListShowsHeldLocks(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const ttl = 10 * time.Second
		l := e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl}})
		start := time.Now()
		a, err := l.TryAcquire(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		defer a.Release(ctx)
		b, err := l.TryAcquire(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
		infos, err := l.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// a was granted or renewed (every TTL/3) at most this long ago.
		since := time.Since(start)
		if len(infos) != 1 {
			t.Fatalf("List: %+v, want only a", infos)
		}
		li := infos[0]
		if li.Name != "a" || li.Owner != a.Owner() || li.Token != a.Token() || li.Holds != 1 {
			t.Fatalf("List: %+v", li)
		}
		// Up to a millisecond for the database clocks' resolution.
		if li.ExpiresIn < ttl-since-time.Millisecond || li.ExpiresIn > ttl {
			t.Fatalf("ExpiresIn %v, want the TTL %v less at most the %v since the grant", li.ExpiresIn, ttl, since)
		}
		if d := li.ExpiresAt.Sub(li.AcquiredAt); d < ttl || d > ttl+since+time.Millisecond {
			t.Fatalf("ExpiresAt - AcquiredAt = %v, want the TTL %v plus at most the %v since the grant", d, ttl, since)
		}
		if skew := time.Since(li.AcquiredAt); skew < -time.Minute || skew > time.Minute {
			t.Fatalf("AcquiredAt %v is far from now", li.AcquiredAt)
		}
	})
}

// Tokens keep growing per name across releases, expiry, takeover and reaping.
func TestTokensGrowAcrossReaping(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.locker(t, sqllock.TableOptions{})
		r, err := sqllock.NewReaper(e.d, sqllock.ReaperOptions{BatchSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		var last int64
		check := func(k *sqllock.Lock) {
			t.Helper()
			if k.Token() <= last {
				t.Fatalf("token %d after %d", k.Token(), last)
			}
			last = k.Token()
		}
		for i := range 4 {
			k, err := l.TryAcquire(ctx, "tok")
			if err != nil {
				t.Fatal(err)
			}
			check(k)
			switch i % 2 {
			case 0:
				if err := k.Release(ctx); err != nil {
					t.Fatal(err)
				}
			case 1:
				e.expire(t, "tok")
				k2, err := l.TryAcquire(ctx, "tok")
				if err != nil {
					t.Fatal(err)
				}
				check(k2)
				if err := k2.Release(ctx); err != nil {
					t.Fatal(err)
				}
				_ = k.Release(ctx)
			}
			// Other names' rows reaped in the same passes.
			for _, n := range []string{"x", "y", "z"} {
				k, err := l.TryAcquire(ctx, n)
				if err != nil {
					t.Fatal(err)
				}
				_ = k.Release(ctx)
			}
			// The reaper skips rows another transaction has locked, so
			// a pass may leave one for the next (seen once on a loaded
			// server); the four rows go, and no more.
			reaped, calls := 0, 0
			testutil.Eventually(ctx, t, "the four released rows reaped", func() bool {
				n, err := r.Reap(ctx)
				if err != nil {
					t.Fatalf("reap: %v", err)
				}
				reaped, calls = reaped+n, calls+1
				return reaped >= 4
			})
			if reaped != 4 {
				t.Fatalf("reaped %d rows, want 4", reaped)
			}
			if calls > 1 {
				t.Logf("the four rows took %d Reap calls", calls)
			}
		}
	})
}

func TestReaperSparesLiveLeases(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.locker(t, sqllock.TableOptions{})
		live, err := l.TryAcquire(ctx, "live")
		if err != nil {
			t.Fatal(err)
		}
		defer live.Release(ctx)
		for _, n := range []string{"expired", "released"} {
			if _, err := testutil.Tables(t, e.d).Locks.Acquire(ctx, dialect.AcquireParams{Name: n, Owner: "o", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		e.expire(t, "expired")
		if k, err := l.TryAcquire(ctx, "released2"); err != nil {
			t.Fatal(err)
		} else if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r, err := sqllock.NewReaper(e.d, sqllock.ReaperOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Several reapers at once, as in several processes.
		var (
			wg    sync.WaitGroup
			total atomic.Int64
		)
		for range 4 {
			wg.Go(func() {
				n, err := r.Reap(ctx)
				if err != nil {
					t.Error(err)
				}
				total.Add(int64(n))
			})
		}
		wg.Wait()
		if total.Load() != 2 {
			t.Fatalf("reaped %d rows, want 2 (expired, released2)", total.Load())
		}
		var n int
		if err := e.db.QueryRowContext(ctx, e.q("SELECT count(*) FROM {sqllock_locks}")).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 2 {
			t.Fatalf("%d rows left, want 2 (live, released-by-nobody)", n)
		}
		if err := guardOnce(t, e, live); err != nil {
			t.Fatalf("live lease after reaping: %v", err)
		}
	})
}

// guardOnce runs k.Guard in a fresh transaction and rolls it back, so that
// the guard's share lock is gone before the test goes on.
func guardOnce(t *testing.T, e *env, k *sqllock.Lock) error {
	t.Helper()
	ctx := ctxT(t)
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	return k.Guard(ctx, tx)
}

func TestReaperRun(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(ctxT(t))
		l := e.locker(t, sqllock.TableOptions{})
		for _, n := range []string{"a", "b", "c"} {
			k, err := l.TryAcquire(ctx, n)
			if err != nil {
				t.Fatal(err)
			}
			_ = k.Release(ctx)
		}
		r, err := sqllock.NewReaper(e.d, sqllock.ReaperOptions{Interval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		testutil.Eventually(ctx, t, "the reaper empties the lock table", func() bool {
			var n int
			if err := e.db.QueryRowContext(ctx, e.q("SELECT count(*) FROM {sqllock_locks}")).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 0
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}

func TestDo(t *testing.T) {
	eachStrategy(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.anyLocker(t)
		boom := errors.New("boom")
		var token int64
		err := sqllock.Do(ctx, l, "do", func(ctx context.Context) error {
			if ctx.Err() != nil {
				t.Fatal("lock context already ended")
			}
			if _, err := l.TryAcquire(context.Background(), "do"); !errors.Is(err, sqllock.ErrLocked) {
				t.Fatalf("inside Do: %v, want ErrLocked", err)
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Do: %v, want boom", err)
		}
		k, err := l.TryAcquire(ctx, "do")
		if err != nil {
			t.Fatalf("after Do the lock is still held: %v", err)
		}
		token = k.Token()
		_ = k.Release(ctx)
		if token == 0 {
			t.Fatal("zero token")
		}
	})
}

func TestSchemaMissingSaysToMigrate(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		if err := sqllock.MigrateDown(ctx, e.d); err != nil {
			t.Fatal(err)
		}
		l := e.locker(t, sqllock.TableOptions{})
		_, err := l.TryAcquire(ctx, "x")
		if !errors.Is(err, sqllock.ErrSchemaMissing) || !strings.Contains(err.Error(), "sqllock.Migrate") {
			t.Fatalf("TryAcquire without schema: %v", err)
		}
		if _, err := l.Acquire(ctx, "x"); !errors.Is(err, sqllock.ErrSchemaMissing) {
			t.Fatalf("Acquire without schema: %v", err)
		}
		if _, err := l.List(ctx); !errors.Is(err, sqllock.ErrSchemaMissing) {
			t.Fatalf("List without schema: %v", err)
		}
		r, _ := sqllock.NewReaper(e.d, sqllock.ReaperOptions{})
		if _, err := r.Reap(ctx); !errors.Is(err, sqllock.ErrSchemaMissing) {
			t.Fatalf("Reap without schema: %v", err)
		}
	})
}

func TestMigrations(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		v, dirty, err := sqllock.MigrationVersion(ctx, e.d)
		if want := latestMigration(t, e.d); err != nil || v != want || dirty {
			t.Fatalf("version %d dirty %v err %v, want version %d", v, dirty, err, want)
		}
		// Many processes starting at once, on an up-to-date and on an
		// empty schema.
		for range 2 {
			var wg sync.WaitGroup
			for range 5 {
				wg.Go(func() {
					if err := sqllock.Migrate(ctx, e.d); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if err := sqllock.MigrateDown(ctx, e.d); err != nil {
				t.Fatal(err)
			}
			if v, _, err := sqllock.MigrationVersion(ctx, e.d); err != nil || v != 0 {
				t.Fatalf("after down: version %d err %v", v, err)
			}
		}
		if err := sqllock.Migrate(ctx, e.d); err != nil {
			t.Fatal(err)
		}
		// The caller's pool is still open, and the application's
		// schema_migrations table was never touched.
		if err := e.db.PingContext(ctx); err != nil {
			t.Fatalf("pool closed by migrations: %v", err)
		}
		var n int
		q, args := "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = 'schema_migrations'", []any{e.ns}
		if e.kind == "sqlite" {
			q, args = "SELECT count(*) FROM sqlite_schema WHERE name = 'schema_migrations'", nil
		}
		if err := e.db.QueryRowContext(ctx, e.q(q), args...).Scan(&n); err != nil || n != 0 {
			t.Fatalf("schema_migrations tables: %d, %v", n, err)
		}
		k, err := e.locker(t, sqllock.TableOptions{}).TryAcquire(ctx, "after-migrations")
		if err != nil {
			t.Fatal(err)
		}
		_ = k.Release(ctx)
	})
}

// latestMigration is the highest version among d's migration files.
func latestMigration(t *testing.T, d dialect.Dialect) uint {
	t.Helper()
	files, err := fs.Glob(d.Migrations(), "*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	var latest uint
	for _, f := range files {
		v, err := strconv.ParseUint(f[:strings.IndexByte(f, '_')], 10, 64)
		if err != nil {
			t.Fatalf("migration file %s: %v", f, err)
		}
		latest = max(latest, uint(v))
	}
	return latest
}
