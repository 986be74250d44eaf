package sqllock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
//
// A machine too busy to make its checks within the minimum hold (the
// statement that got the lock began after the hold could have ended) makes
// the test try again, on a fresh name with twice the hold.
func TestMinHold(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		for minHold, try := 2*time.Second, 0; ; minHold, try = 2*minHold, try+1 {
			if minHold > time.Minute {
				t.Fatalf("the checks never ran within a minimum hold of up to %v", minHold/2)
			}
			if minHoldOnce(t, ctx, e, fmt.Sprintf("job-%d", try), minHold) {
				return
			}
			t.Logf("the checks outlasted the minimum hold of %v; again with twice that", minHold)
		}
	})
}

// minHoldOnce runs TestMinHold's checks on name with minHold, and reports
// false if the machine was too slow to make them within the hold.
func minHoldOnce(t *testing.T, ctx context.Context, e *env, name string, minHold time.Duration) bool {
	t.Helper()
	a := e.locker(t, sqllock.TableOptions{MinHold: minHold})
	// The grant is no earlier than this: the hold ends no earlier than a
	// minimum hold after it (the test's database runs on this machine's
	// clock).
	granted := time.Now()
	held, err := a.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := context.Cause(held.Context()); !errors.Is(err, sqllock.ErrNotHeld) {
		t.Fatalf("released lock's context: %v, want ErrNotHeld", err)
	}
	infos, err := listNamed(ctx, a, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Holds != 0 || infos[0].ExpiresAt.Sub(infos[0].AcquiredAt) != minHold {
		t.Fatalf("List after an early release: %+v, want the lock with no holds until acquired + %v", infos, minHold)
	}
	end := infos[0].ExpiresAt
	// tryWithin checks that a TryAcquire is refused within the hold; one
	// that was not, begun when the hold could have ended, proves nothing.
	tryWithin := func(what string, l sqllock.Locker, ctx context.Context) bool {
		t.Helper()
		at := time.Now()
		k, err := l.TryAcquire(ctx, name)
		switch {
		case errors.Is(err, sqllock.ErrLocked):
			return true
		case err == nil && !at.Before(granted.Add(minHold-time.Second)):
			_ = k.Release(ctx)
			return false
		}
		t.Fatalf("%s within the minimum hold: %v, want ErrLocked", what, err)
		return false
	}
	for _, l := range []sqllock.Locker{a, e.locker(t, sqllock.TableOptions{})} {
		if !tryWithin("TryAcquire", l, ctx) {
			return false
		}
	}
	if !tryWithin("TryAcquire by the releasing owner", a, sqllock.WithOwner(ctx, held.Owner())) {
		return false
	}

	// A waiter gets it once the database's clock passes the end.
	next, err := e.locker(t, sqllock.TableOptions{}).Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= held.Token() {
		t.Fatalf("token after the minimum hold %d, want > %d", next.Token(), held.Token())
	}
	infos, err = listNamed(ctx, a, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].AcquiredAt.Before(end) {
		t.Fatalf("acquired at %+v, before the minimum hold ended at %v", infos, end)
	}
	return true
}

// listNamed is l.List of the locks named name.
func listNamed(ctx context.Context, l locker, name string) ([]sqllock.LockInfo, error) {
	infos, err := l.List(ctx)
	var named []sqllock.LockInfo
	for _, li := range infos {
		if li.Name == name {
			named = append(named, li)
		}
	}
	return named, err
}

// MinHold must not be negative.
func TestMinHoldNegative(t *testing.T) {
	t.Parallel()
	d, err := mysql.New(nonNilDB)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range leaseStrategies {
		if _, err := s.new(d, sqllock.TableOptions{MinHold: -time.Second}); !errors.Is(err, sqllock.ErrInvalidOptions) {
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

// TryDoBounded's AtLeast is the minimum hold of that run alone: the name
// stays taken after fn returned, while a plain TryDo of the same locker
// frees its name at once; AtMost ends fn's context with a cause naming it,
// and the lock is released once fn returns.
func TestTryDoBounded(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.locker(t, sqllock.TableOptions{}) // no MinHold of its own
		ran, err := sqllock.TryDoBounded(ctx, l, "nightly", sqllock.Bounds{AtLeast: time.Hour}, func(context.Context) error { return nil })
		if !ran || err != nil {
			t.Fatalf("TryDoBounded on a free lock: ran %v, err %v", ran, err)
		}
		ran, err = sqllock.TryDo(ctx, e.locker(t, sqllock.TableOptions{}), "nightly", func(context.Context) error {
			t.Error("ran within the run's minimum hold")
			return nil
		})
		if ran || err != nil {
			t.Fatalf("TryDo within AtLeast: ran %v, err %v; want skipped", ran, err)
		}
		infos, err := listNamed(ctx, l, "nightly")
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != 1 || infos[0].Holds != 0 || infos[0].ExpiresIn < 30*time.Minute {
			t.Fatalf("after a run with AtLeast 1h: %+v, want no hold and about an hour left", infos)
		}
		// The locker itself keeps no minimum hold.
		if ran, err := sqllock.TryDo(ctx, l, "hourly", func(context.Context) error { return nil }); !ran || err != nil {
			t.Fatalf("TryDo: ran %v, err %v", ran, err)
		}
		free, err := e.locker(t, sqllock.TableOptions{}).TryAcquire(ctx, "hourly")
		if err != nil {
			t.Fatalf("a plain TryDo of the same locker left its name taken: %v", err)
		}
		if err := free.Release(ctx); err != nil {
			t.Fatal(err)
		}

		ran, err = sqllock.TryDoBounded(ctx, l, "long", sqllock.Bounds{AtMost: 20 * time.Millisecond}, func(ctx context.Context) error {
			<-ctx.Done() // the test's deadline bounds it if AtMost never came
			return context.Cause(ctx)
		})
		if !ran || err == nil || !strings.Contains(err.Error(), "AtMost") {
			t.Fatalf("a run past AtMost: ran %v, err %v; want fn's context ended naming AtMost", ran, err)
		}
		again, err := e.locker(t, sqllock.TableOptions{}).TryAcquire(ctx, "long")
		if err != nil {
			t.Fatalf("after a run ended by AtMost: %v, want the lock released", err)
		}
		if err := again.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Bounds are checked before anything is acquired.
func TestTryDoBoundedRefuses(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	fn := func(context.Context) error { t.Error("fn ran"); return nil }
	for _, b := range []sqllock.Bounds{{AtLeast: -1}, {AtMost: -1}} {
		if _, err := sqllock.TryDoBounded(ctx, new(sqllock.Table), "x", b, fn); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Errorf("Bounds %+v: %v, want ErrInvalidOptions", b, err)
		}
	}
	for _, l := range []sqllock.Locker{new(sqllock.RWLock), new(sqllock.Pessimistic)} {
		if _, err := sqllock.TryDoBounded(ctx, l, "x", sqllock.Bounds{AtLeast: time.Minute}, fn); !errors.Is(err, sqllock.ErrUnsupported) {
			t.Errorf("AtLeast on a %T: %v, want ErrUnsupported", l, err)
		}
	}
}
