package sqllock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/internal/testutil"
)

// siblingSemaphore returns a semaphore of limit on a pool of its own, as
// another process would have.
func (e *env) siblingSemaphore(t *testing.T, limit int, opts sqllock.SemaphoreOptions) *sqllock.Semaphore {
	t.Helper()
	_, d := e.sibling(t, 0)
	s, err := sqllock.NewSemaphore(d, limit, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// available returns s's free permits of name.
func available(t *testing.T, ctx context.Context, s *sqllock.Semaphore, name string) int {
	t.Helper()
	n, err := s.Available(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSemaphoreSetLimitValidates(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		s := e.semaphore(t, 2, sqllock.SemaphoreOptions{})
		for _, n := range []int{0, -1, sqllock.MaxSemaphoreLimit + 1} {
			if err := s.SetLimit(ctx, "v", n); !errors.Is(err, sqllock.ErrInvalidOptions) {
				t.Errorf("SetLimit(%d): %v, want ErrInvalidOptions", n, err)
			}
		}
		if err := s.SetLimit(ctx, "", 2); !errors.Is(err, sqllock.ErrInvalidName) {
			t.Errorf("SetLimit of an empty name: %v, want ErrInvalidName", err)
		}
		if _, err := s.Available(ctx, ""); !errors.Is(err, sqllock.ErrInvalidName) {
			t.Errorf("Available of an empty name: %v, want ErrInvalidName", err)
		}
		if n := available(t, ctx, s, "never"); n != 2 {
			t.Errorf("Available of a name never granted: %d, want the Semaphore's 2", n)
		}
	})
}

// A lower limit lets the holders finish and grants nothing until fewer
// than it hold, for every Semaphore whatever its own limit.
func TestSemaphoreSetLimitLower(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		s := e.semaphore(t, 3, sqllock.SemaphoreOptions{})
		other := e.siblingSemaphore(t, 5, sqllock.SemaphoreOptions{})
		var held []*sqllock.Lock
		for range 3 {
			l, err := s.TryAcquire(ctx, "pool")
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
		}
		if err := other.SetLimit(ctx, "pool", 1); err != nil {
			t.Fatal(err)
		}
		for i, l := range held {
			if l.Context().Err() != nil {
				t.Fatalf("holder %d lost its lease to the lower limit", i)
			}
			if n := available(t, ctx, other, "pool"); n != 0 {
				t.Fatalf("Available with %d holders of 1: %d", 3-i, n)
			}
			for _, sem := range []*sqllock.Semaphore{s, other} {
				if _, err := sem.TryAcquire(ctx, "pool"); !errors.Is(err, sqllock.ErrLocked) {
					t.Fatalf("TryAcquire with %d holders of 1 (limit %d): %v, want ErrLocked", 3-i, sem.Limit(), err)
				}
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := available(t, ctx, s, "pool"); n != 1 {
			t.Fatalf("Available once the holders left: %d, want 1", n)
		}
		l, err := other.TryAcquire(ctx, "pool")
		if err != nil {
			t.Fatalf("once the holders left: %v", err)
		}
		defer l.Release(ctx)
		if _, err := s.TryAcquire(ctx, "pool"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("a second permit of the set 1: %v, want ErrLocked", err)
		}
	})
}

// A waiter refused under the old limit is granted by a raise made in
// another process, while the holder keeps its permit (its lease lasts far
// longer than the test); on a fair Semaphore too, where the dialect has
// one.
func TestSemaphoreSetLimitRaiseWakesWaiter(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		for _, fair := range []bool{false, true} {
			t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
				ctx := ctxT(t)
				opts := sqllock.SemaphoreOptions{Fair: fair, LeaseOptions: sqllock.LeaseOptions{TTL: time.Hour}}
				s, err := sqllock.NewSemaphore(e.d, 1, opts)
				if errors.Is(err, sqllock.ErrUnsupported) {
					t.Skip(err)
				}
				if err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprint("raise-", fair)
				holder, err := s.TryAcquire(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				defer holder.Release(ctx)
				waiter := e.siblingSemaphore(t, 1, opts)
				got := acquireAsync(ctx, waiter, name)
				testutil.Eventually(ctx, t, "the waiter waits", func() bool {
					_, n := sqllock.RoomState(waiter, name)
					return n == 1
				})
				setter := e.siblingSemaphore(t, 1, sqllock.SemaphoreOptions{})
				if err := setter.SetLimit(ctx, name, 2); err != nil {
					t.Fatal(err)
				}
				select {
				case l := <-got:
					if l == nil {
						t.Fatal("the waiter's Acquire failed")
					}
					defer l.Release(ctx)
					if l.Token() <= holder.Token() {
						t.Fatalf("token %d, want > %d", l.Token(), holder.Token())
					}
				case <-ctx.Done():
					t.Fatal("never: the waiter granted after the raise")
				}
				if holder.Context().Err() != nil {
					t.Fatal("the holder lost its lease")
				}
				if n := available(t, ctx, s, name); n != 0 {
					t.Fatalf("Available with 2 holders of 2: %d", n)
				}
			})
		}
	})
}

// Acquirers in several processes race a setter that raises and lowers the
// limit: the acquires that began after a SetLimit returned and returned
// before the next one was sent are never more than its limit at once, and
// every acquirer gets its permits.
func TestSemaphoreSetLimitRaceNeverOverGrants(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const workers, rounds, perPhase = 4, 10, 3
		limits := []int{2, 1, 3, 1, 2, 4, 1}
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		var (
			phase  atomic.Int64 // odd: a SetLimit is under way; even 2i+2: limits[i] is set
			inside = make([]atomic.Int32, 2*len(limits)+3)
			grants atomic.Int32
			bad    atomic.Value
			wg     sync.WaitGroup
		)
		tick := make(chan struct{}, 1)
		errs := make(chan error, workers+1)
		for w := range workers {
			s := e.siblingSemaphore(t, 2, sqllock.SemaphoreOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					from := phase.Load()
					l, err := s.Acquire(ctx, "race")
					if err != nil {
						if ctx.Err() == nil {
							errs <- fmt.Errorf("worker %d: %w", w, err)
						}
						return
					}
					p := phase.Load()
					counted := p == from && p%2 == 0 && p > 0
					if counted {
						if n := inside[p].Add(1); int(n) > limits[(p-2)/2] {
							bad.CompareAndSwap(nil, fmt.Sprintf("%d holders at once in phase %d, limit %d", n, p, limits[(p-2)/2]))
						}
					}
					grants.Add(1)
					select {
					case tick <- struct{}{}:
					default:
					}
					if counted {
						inside[p].Add(-1)
					}
					if err := l.Release(context.WithoutCancel(ctx)); err != nil {
						errs <- fmt.Errorf("worker %d: release: %w", w, err)
						return
					}
				}
			}()
		}
		setter := e.siblingSemaphore(t, 2, sqllock.SemaphoreOptions{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i, n := range limits {
				phase.Store(int64(2*i + 1))
				if err := setter.SetLimit(ctx, "race", n); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				phase.Store(int64(2*i + 2))
				target := grants.Load() + perPhase
				for grants.Load() < target && grants.Load() < workers*rounds {
					select {
					case <-tick:
					case <-ctx.Done():
						return
					}
				}
			}
			phase.Store(int64(2*len(limits) + 1))
		}()
		wg.Wait()
		cancel()
		<-done
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if msg := bad.Load(); msg != nil {
			t.Fatal(msg)
		}
		if g := grants.Load(); g != workers*rounds {
			t.Fatalf("%d grants, want %d", g, workers*rounds)
		}
	})
}
