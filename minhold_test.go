package sqllock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/mysql"
)

// With MinHold, a lock released early stays taken — for every owner, the
// releasing one and its locker included — until acquired + MinHold on the
// database clock, and is then acquired by a waiter with no one left to
// release it: the releasing locker is closed down (no renewal, no
// statement) as a process that exited.
func TestMinHold(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const minHold = 2 * time.Second
		a := e.locker(t, sqllock.Options{MinHold: minHold})
		held, err := a.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := context.Cause(held.Context()); !errors.Is(err, sqllock.ErrNotHeld) {
			t.Fatalf("released lock's context: %v, want ErrNotHeld", err)
		}
		infos, err := a.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != 1 || infos[0].Holds != 0 || infos[0].ExpiresAt.Sub(infos[0].AcquiredAt) != minHold {
			t.Fatalf("List after an early release: %+v, want the lock with no holds until acquired + %v", infos, minHold)
		}
		end := infos[0].ExpiresAt
		if infos[0].ExpiresIn <= 0 {
			// The machine took the whole minimum hold to get here: the
			// rest of the test would prove nothing.
			t.Skipf("release and List took longer than the minimum hold of %v", minHold)
		}
		for _, l := range []sqllock.Locker{a, e.locker(t, sqllock.Options{})} {
			if _, err := l.TryAcquire(ctx, "job"); !errors.Is(err, sqllock.ErrLocked) {
				t.Fatalf("TryAcquire within the minimum hold: %v, want ErrLocked", err)
			}
		}
		if _, err := a.TryAcquire(sqllock.WithOwner(ctx, held.Owner()), "job"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("TryAcquire by the releasing owner within the minimum hold: %v, want ErrLocked", err)
		}

		// A waiter gets it once the database's clock passes the end.
		next, err := e.locker(t, sqllock.Options{}).Acquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		defer next.Release(ctx)
		if next.Token() <= held.Token() {
			t.Fatalf("token after the minimum hold %d, want > %d", next.Token(), held.Token())
		}
		infos, err = a.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != 1 || infos[0].AcquiredAt.Before(end) {
			t.Fatalf("acquired at %+v, before the minimum hold ended at %v", infos, end)
		}
	})
}

// MinHold must not be negative.
func TestMinHoldNegative(t *testing.T) {
	t.Parallel()
	d, err := mysql.New(nonNilDB)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range leaseStrategies {
		if _, err := s.new(d, sqllock.Options{MinHold: -time.Second}); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Errorf("%s with MinHold -1s: %v, want ErrInvalidOptions", s.name, err)
		}
	}
}

// TryDo runs fn when the lock is free and releases it; when another owner
// holds the lock it reports (false, nil) without running fn; fn's error
// comes back with ran true; other errors with ran false.
func TestTryDo(t *testing.T) {
	eachStrategy(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.anyLocker(t)
		var runs atomic.Int32
		job := func(ctx context.Context) error {
			if ctx.Err() != nil {
				t.Errorf("fn got an ended context: %v", ctx.Err())
			}
			runs.Add(1)
			return nil
		}
		ran, err := sqllock.TryDo(ctx, l, "cron", job)
		if !ran || err != nil || runs.Load() != 1 {
			t.Fatalf("TryDo on a free lock: ran %v, err %v, runs %d", ran, err, runs.Load())
		}
		holder, err := l.TryAcquire(ctx, "cron") // released by TryDo
		if err != nil {
			t.Fatalf("after TryDo: %v", err)
		}
		ran, err = sqllock.TryDo(ctx, e.anyLocker(t), "cron", job)
		if ran || err != nil || runs.Load() != 1 {
			t.Fatalf("TryDo on a held lock: ran %v, err %v, runs %d; want skipped without error", ran, err, runs.Load())
		}
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		ran, err = sqllock.TryDo(ctx, l, "cron", func(context.Context) error { return boom })
		if !ran || !errors.Is(err, boom) {
			t.Fatalf("TryDo with a failing fn: ran %v, err %v", ran, err)
		}
		ran, err = sqllock.TryDo(ctx, l, "", job)
		if ran || !errors.Is(err, sqllock.ErrInvalidName) {
			t.Fatalf("TryDo with an empty name: ran %v, err %v", ran, err)
		}
	})
}
