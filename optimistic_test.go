package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/rowlock"
	"github.com/sqllock/sqllock/sqllocktest/shop"
)

// Many processes touching a name for the first time at once: exactly one
// creates the row and holds the lock, the others are refused, and nobody
// sees a duplicate-key error.
func TestOptimisticFirstUseRace(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		e.s = optimisticStrategy
		const n = 16
		var (
			wg      sync.WaitGroup
			winners atomic.Int32
			start   = make(chan struct{})
			got     = make(chan *sqllock.Lock, n)
		)
		for range n {
			l := e.locker(t, sqllock.TableOptions{})
			wg.Go(func() {
				<-start
				k, err := l.TryAcquire(ctx, "fresh")
				switch {
				case err == nil:
					winners.Add(1)
					got <- k
				case !errors.Is(err, sqllock.ErrLocked):
					t.Errorf("TryAcquire: %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		close(got)
		if winners.Load() != 1 {
			t.Fatalf("%d winners, want 1", winners.Load())
		}
		k := <-got
		if k.Token() < 1 {
			t.Fatalf("first version %d, want a positive one", k.Token())
		}
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A swap succeeds only at the version that was read: the heart of the
// strategy, at the dialect level.
func TestOptimisticSwapNeedsReadVersion(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		e.s = optimisticStrategy
		v := testutil.Tables(t, e.d).Versions
		p := dialect.AcquireParams{Name: "cas", Owner: "a", TTL: time.Minute}
		start := time.Now()
		v1, err := v.Create(ctx, p)
		if err != nil || v1 < 1 {
			t.Fatalf("create: %v %v, want a version", v1, err)
		}
		if version, err := v.Create(ctx, p); err != nil || version != 0 {
			t.Fatalf("second create: %v %v, want 0 without error", version, err)
		}
		row, ok, err := v.Read(ctx, "cas")
		if err != nil || !ok || row.Version != v1 || row.Owner != "a" || row.Holds != 1 || !row.Live {
			t.Fatalf("read: %+v %v %v", row, ok, err)
		}
		// Created at most this long ago; up to a millisecond for the
		// clock's resolution.
		if since := time.Since(start); row.Remaining < p.TTL-since-time.Millisecond || row.Remaining > p.TTL {
			t.Fatalf("remaining %v, want the TTL %v less at most the %v since the grant", row.Remaining, p.TTL, since)
		}
		// Held and live: no take, and no re-entry by another owner.
		sw := dialect.SwapParams{Name: "cas", Owner: "b", TTL: time.Minute, Version: v1}
		if got, err := v.Take(ctx, sw); err != nil || got != 0 {
			t.Fatalf("take of a live lease: %v %v", got, err)
		}
		if ok, err := v.Reenter(ctx, sw); err != nil || ok {
			t.Fatalf("re-entry by another owner: %v %v", ok, err)
		}
		if ok, err := v.Release(ctx, dialect.Lease{Name: "cas", Owner: "a", Token: v1}, 0); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
		row, _, _ = v.Read(ctx, "cas")
		if row.Live || row.Holds != 0 || row.Version != v1 {
			t.Fatalf("after release: %+v", row)
		}
		// Two takers read the same version; the first swap wins, the
		// second finds the version moved.
		v2, err := v.Take(ctx, sw)
		if err != nil || v2 <= v1 {
			t.Fatalf("take of a free row: %v %v, want a version above %d", v2, err, v1)
		}
		late := dialect.SwapParams{Name: "cas", Owner: "c", TTL: time.Minute, Version: v1}
		e.expire(t, "cas")
		if got, err := v.Take(ctx, late); err != nil || got != 0 {
			t.Fatalf("take at a stale version: %v %v", got, err)
		}
		late.Version = v2
		v3, err := v.Take(ctx, late)
		if err != nil || v3 <= v2 {
			t.Fatalf("take at the current version of an expired row: %v %v, want a version above %d", v3, err, v2)
		}
		row, _, _ = v.Read(ctx, "cas")
		if row.Version != v3 || row.Owner != "c" || !row.Live {
			t.Fatalf("after takeover: %+v", row)
		}
	})
}

// The version is the fencing token: the reaper deletes released and
// expired rows, and a name's next row starts above the versions it had.
func TestOptimisticVersionsGrowAcrossReaping(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		e.s = optimisticStrategy
		l := e.locker(t, sqllock.TableOptions{})
		r, err := sqllock.NewReaper(e.d, sqllock.ReaperOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var last int64
		for i := range 4 {
			k, err := l.TryAcquire(ctx, "v")
			if err != nil {
				t.Fatal(err)
			}
			if k.Token() <= last {
				t.Fatalf("round %d: version %d after %d", i, k.Token(), last)
			}
			last = k.Token()
			if i%2 == 0 {
				e.expire(t, "v")
			}
			_ = k.Release(ctx)
			if _, err := r.Reap(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var n int
		if err := e.db.QueryRowContext(ctx, e.q("SELECT count(*) FROM {sqllock_versions}")).Scan(&n); err != nil || n != 0 {
			t.Fatalf("version rows after reaping: %d, %v; want 0", n, err)
		}
	})
}

// The inventory scenario: 2 items in stock, 50 buyers of 1 or 2 at once,
// each a read and a version-checked write retried on conflict. Nothing is
// oversold and no order or update is lost; every item is sold.
func TestOptimisticInventory(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		s := e.shop(t)
		res, err := s.Run(ctx, 2, 50, func(ctx context.Context, buyer int) (int, error) {
			qty := 1 + buyer%2
			return qty, rowlock.RetryOnConflict(ctx, rowlock.RetryOptions{Attempts: 100}, func(ctx context.Context) error {
				var stock int
				var version int64
				if err := e.db.QueryRowContext(ctx, s.Q("SELECT stock, version FROM {products} WHERE id = 1")).Scan(&stock, &version); err != nil {
					return err
				}
				if stock < qty {
					return shop.ErrSoldOut
				}
				tx, err := e.db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				err = rowlock.CheckUpdate(tx.ExecContext(ctx,
					s.Q("UPDATE {products} SET stock = ?, version = version + 1 WHERE id = 1 AND version = ?"), stock-qty, version))
				if err != nil {
					return err
				}
				if err := s.Order(ctx, tx, buyer, qty); err != nil {
					return err
				}
				return tx.Commit()
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", res)
		if err := res.Check(); err != nil {
			t.Fatal(err)
		}
		if res.Left != 0 {
			t.Fatalf("%d left with %d buyers refused", res.Left, res.Refused)
		}
	})
}

// shop creates the inventory scenario's tables in the test's namespace.
func (e *env) shop(t *testing.T) *shop.Shop {
	t.Helper()
	s := shop.New(e.db, e.table(""), e.kind == "postgres")
	if err := s.Create(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConflictOrMissing(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		if _, err := e.db.ExecContext(ctx, e.q("CREATE TABLE {items} (id INT PRIMARY KEY, version BIGINT NOT NULL)")); err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.ExecContext(ctx, e.q("INSERT INTO {items} VALUES (1, 5)")); err != nil {
			t.Fatal(err)
		}
		upd := e.q("UPDATE {items} SET version = version + 1 WHERE id = ? AND version = ?")
		exists := e.q("SELECT 1 FROM {items} WHERE id = ?")
		for _, c := range []struct {
			id, version int
			want        error
		}{
			{1, 5, nil},
			{1, 5, rowlock.ErrConflict},
			{2, 5, rowlock.ErrNotFound},
		} {
			err := rowlock.CheckUpdate(e.db.ExecContext(ctx, upd, c.id, c.version))
			if errors.Is(err, rowlock.ErrConflict) {
				err = rowlock.ConflictOrMissing(ctx, e.db, exists, c.id)
			}
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Fatalf("id %d version %d: %v, want %v", c.id, c.version, err, c.want)
			}
		}
		// The write's own error passes through, untouched.
		if err := rowlock.CheckUpdate(e.db.ExecContext(ctx, e.q("UPDATE {nothing} SET x = 1"))); err == nil || errors.Is(err, rowlock.ErrConflict) {
			t.Fatalf("failed write: %v", err)
		}
		if err := rowlock.ConflictOrMissing(ctx, e.db, e.q("SELECT 1 FROM {nothing}")); err == nil || errors.Is(err, rowlock.ErrConflict) {
			t.Fatalf("failed existence query: %v", err)
		}
	})
}

// RetryOnConflict's backoff, on synctest's clock: each wait is at most its
// cap, which starts at MinBackoff and doubles up to MaxBackoff; without
// Attempts it retries until the context's deadline, and returns then.
func TestRetryOnConflictBackoff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const minB, maxB, attempts = 10 * time.Millisecond, 80 * time.Millisecond, 12
		var at []time.Time
		err := rowlock.RetryOnConflict(t.Context(), rowlock.RetryOptions{Attempts: attempts, MinBackoff: minB, MaxBackoff: maxB}, func(context.Context) error {
			at = append(at, time.Now())
			return rowlock.ErrConflict
		})
		if !errors.Is(err, rowlock.ErrConflict) || len(at) != attempts {
			t.Fatalf("err %v after %d attempts, want ErrConflict after %d", err, len(at), attempts)
		}
		capped := minB
		for i := 1; i < len(at); i++ {
			if wait := at[i].Sub(at[i-1]); wait < 0 || wait > capped {
				t.Errorf("wait before attempt %d: %v, want at most %v", i+1, wait, capped)
			}
			capped = min(2*capped, maxB)
		}

		const limit = 5 * time.Second
		ctx, cancel := context.WithTimeout(t.Context(), limit)
		defer cancel()
		start, calls := time.Now(), 0
		err = rowlock.RetryOnConflict(ctx, rowlock.RetryOptions{MinBackoff: minB, MaxBackoff: maxB}, func(context.Context) error {
			calls++
			return rowlock.ErrConflict
		})
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, rowlock.ErrConflict) {
			t.Fatalf("retrying until the deadline: %v, want DeadlineExceeded and ErrConflict", err)
		}
		// Returns at the deadline, not a backoff later; at least one attempt
		// per MaxBackoff.
		if took := time.Since(start); took != limit {
			t.Errorf("returned %v after the start, want at the deadline %v", took, limit)
		}
		if calls < int(limit/maxB) {
			t.Errorf("%d attempts in %v, want at least one per MaxBackoff %v", calls, limit, maxB)
		}
	})
}

func TestRetryOnConflict(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	fast := rowlock.RetryOptions{Attempts: 5, MinBackoff: time.Microsecond, MaxBackoff: time.Microsecond}
	t.Run("until success", func(t *testing.T) {
		calls := 0
		err := rowlock.RetryOnConflict(ctx, fast, func(context.Context) error {
			calls++
			if calls < 3 {
				return rowlock.ErrConflict
			}
			return nil
		})
		if err != nil || calls != 3 {
			t.Fatalf("err %v after %d calls, want nil after 3", err, calls)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		calls := 0
		err := rowlock.RetryOnConflict(ctx, fast, func(context.Context) error {
			calls++
			return rowlock.ErrConflict
		})
		if !errors.Is(err, rowlock.ErrConflict) || calls != 5 {
			t.Fatalf("err %v after %d calls, want ErrConflict after 5", err, calls)
		}
	})
	t.Run("other errors end it", func(t *testing.T) {
		for _, want := range []error{sql.ErrNoRows, rowlock.ErrNotFound, sqllock.ErrLocked} {
			calls := 0
			err := rowlock.RetryOnConflict(ctx, fast, func(context.Context) error {
				calls++
				return want
			})
			if err != want || calls != 1 {
				t.Fatalf("err %v after %d calls, want %v after 1", err, calls, want)
			}
		}
	})
	t.Run("context", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		calls := 0
		err := rowlock.RetryOnConflict(cctx, rowlock.RetryOptions{MinBackoff: time.Hour, MaxBackoff: time.Hour}, func(context.Context) error {
			calls++
			cancel()
			return rowlock.ErrConflict
		})
		if !errors.Is(err, context.Canceled) || !errors.Is(err, rowlock.ErrConflict) || calls != 1 {
			t.Fatalf("err %v after %d calls, want Canceled and ErrConflict after 1", err, calls)
		}
	})
	t.Run("bad options", func(t *testing.T) {
		for _, o := range []rowlock.RetryOptions{
			{Attempts: -1},
			{MinBackoff: -time.Second},
			{MaxBackoff: -time.Second},
			{MinBackoff: time.Second, MaxBackoff: time.Millisecond},
		} {
			err := rowlock.RetryOnConflict(ctx, o, func(context.Context) error {
				t.Fatal("fn ran with invalid options")
				return nil
			})
			if !errors.Is(err, sqllock.ErrInvalidOptions) {
				t.Fatalf("%+v: %v, want ErrInvalidOptions", o, err)
			}
		}
	})
}

// A dialect without the optimistic statements is refused with a clear error.
func TestOptimisticUnsupported(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		plain := plainDialect{e.d}
		if _, err := sqllock.NewOptimistic(plain, sqllock.OptimisticOptions{}); !errors.Is(err, sqllock.ErrUnsupported) {
			t.Fatalf("NewOptimistic on a dialect without versions: %v, want ErrUnsupported", err)
		}
	})
}
