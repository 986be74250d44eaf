package latch_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/latch"
)

func TestLatchCreateCount(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.latch(t)
		if _, err := l.Count(ctx, "phase"); !errors.Is(err, latch.ErrNotFound) {
			t.Fatalf("Count before Create: %v, want ErrLatchNotFound", err)
		}
		if _, err := l.CountDown(ctx, "phase"); !errors.Is(err, latch.ErrNotFound) {
			t.Fatalf("CountDown before Create: %v, want ErrLatchNotFound", err)
		}
		if err := l.Wait(ctx, "phase"); !errors.Is(err, latch.ErrNotFound) {
			t.Fatalf("Wait before Create: %v, want ErrLatchNotFound", err)
		}
		if err := l.Create(ctx, "phase", 2); err != nil {
			t.Fatal(err)
		}
		if err := l.Create(ctx, "phase", 2); err != nil {
			t.Fatalf("second Create with the same count: %v", err)
		}
		if err := l.Create(ctx, "phase", 3); !errors.Is(err, latch.ErrCountMismatch) {
			t.Fatalf("Create with another count: %v, want ErrLatchCountMismatch", err)
		}
		for i, want := range []int{1, 0, 0} {
			left, err := l.CountDown(ctx, "phase")
			if err != nil || left != want {
				t.Fatalf("CountDown %d = %d, %v; want %d", i, left, err, want)
			}
		}
		if n, err := l.Count(ctx, "phase"); err != nil || n != 0 {
			t.Fatalf("Count = %d, %v; want 0", n, err)
		}
		if err := l.Wait(ctx, "phase"); err != nil {
			t.Fatalf("Wait on an open latch: %v", err)
		}
		if err := l.Create(ctx, "phase", 5); !errors.Is(err, latch.ErrCountMismatch) {
			t.Fatalf("Create of an open latch with another count: %v, want ErrLatchCountMismatch", err)
		}
		if ok, err := l.Delete(ctx, "phase"); !ok || err != nil {
			t.Fatalf("Delete = %v, %v", ok, err)
		}
		if ok, err := l.Delete(ctx, "phase"); ok || err != nil {
			t.Fatalf("second Delete = %v, %v", ok, err)
		}
		if err := l.Create(ctx, "phase", 5); err != nil {
			t.Fatalf("Create after Delete: %v", err)
		}
	})
}

func TestLatchBadInput(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.latch(t)
		for _, n := range []int{0, -1, latch.MaxCount + 1} {
			if err := l.Create(ctx, "x", n); !errors.Is(err, sqllock.ErrInvalidOptions) {
				t.Errorf("Create(%d): %v, want ErrInvalidOptions", n, err)
			}
		}
		if err := l.Create(ctx, "", 1); !errors.Is(err, sqllock.ErrInvalidName) {
			t.Errorf("Create(\"\"): %v, want ErrInvalidName", err)
		}
		if _, err := l.CountDown(ctx, "a\x00b"); !errors.Is(err, sqllock.ErrInvalidName) {
			t.Errorf("CountDown(NUL): %v, want ErrInvalidName", err)
		}
		if err := l.Wait(ctx, ""); !errors.Is(err, sqllock.ErrInvalidName) {
			t.Errorf("Wait(\"\"): %v, want ErrInvalidName", err)
		}
		if _, err := latch.New(e.d, latch.Options{MaxBackoff: -1}); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Errorf("NewLatch(MaxBackoff -1): %v, want ErrInvalidOptions", err)
		}
	})
}

// TestLatchWait has n workers, each with a Latch of its own (as in
// processes of their own), count a latch down while waiters wait: no
// waiter returns before the count is 0, exactly one count-down leaves 0,
// and every waiter returns.
func TestLatchWait(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const n = 5
		coord := e.latch(t)
		if err := coord.Create(ctx, "done", n); err != nil {
			t.Fatal(err)
		}
		var (
			mu      sync.Mutex
			counted int // count-downs that returned
			zeros   int // count-downs that left 0
		)
		waited := make(chan error, 3)
		for range 3 {
			w := e.latch(t)
			go func() {
				err := w.Wait(ctx, "done")
				if err == nil {
					// Counts only fall: a Wait that returned early
					// would find the count above 0 here unless the
					// last count-down committed meanwhile, and
					// zeros below tells that apart only as a whole.
					if left, cerr := w.Count(ctx, "done"); cerr != nil || left != 0 {
						err = fmt.Errorf("after Wait, Count = %d, %v; want 0", left, cerr)
					}
				}
				waited <- err
			}()
		}
		var wg sync.WaitGroup
		for range n {
			w := e.latch(t)
			wg.Go(func() {
				left, err := w.CountDown(ctx, "done")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				counted++
				if left == 0 {
					zeros++
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		for range 3 {
			if err := <-waited; err != nil {
				t.Fatal(err)
			}
		}
		if zeros != 1 {
			t.Fatalf("%d count-downs left 0, want 1", zeros)
		}
		if left, err := coord.CountDown(ctx, "done"); err != nil || left != 0 {
			t.Fatalf("CountDown past 0 = %d, %v; want 0", left, err)
		}
	})
}

func TestLatchWaitContext(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		l := e.latch(t)
		if err := l.Create(ctxT(t), "never", 1); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
		defer cancel()
		if err := l.Wait(ctx, "never"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait: %v, want DeadlineExceeded", err)
		}
	})
}
