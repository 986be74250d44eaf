package chaos

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock/latch"
)

// TestLatchChaos counts a latch down from workers, each with a pool and a
// Latch of its own (as processes of their own would), while waiters wait
// and readers read, with the workers' connections through a proxy that
// resets some of them: the history must satisfy CheckLatch.
func TestLatchChaos(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, kind, nil)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			proxy, dsn := s.proxied(t)
			newLatch := func() *latch.Latch {
				d, _ := s.process(t, dsn)
				l, err := latch.New(d, latch.Options{MaxBackoff: 50 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			const initial, downs = 12, 16
			if err := newLatch().Create(ctx, "phase", initial); err != nil {
				t.Fatal(err)
			}
			var (
				mu  sync.Mutex
				ops []LatchOp
				wg  sync.WaitGroup
			)
			record := func(kind string, start time.Time, value int, err error) {
				op := LatchOp{Kind: kind, Start: start, End: time.Now(), Value: value}
				if err != nil {
					op.Err = err.Error()
				}
				mu.Lock()
				ops = append(ops, op)
				mu.Unlock()
			}
			for range 3 {
				l := newLatch()
				wg.Go(func() {
					start := time.Now()
					err := l.Wait(ctx, "phase")
					record("wait", start, 0, err)
				})
			}
			reader := newLatch()
			wg.Go(func() {
				for range 20 {
					start := time.Now()
					n, err := reader.Count(ctx, "phase")
					record("count", start, n, err)
				}
			})
			var workers sync.WaitGroup
			for i := range downs {
				l := newLatch()
				workers.Go(func() {
					time.Sleep(time.Duration(i) * 5 * time.Millisecond) // spread the count-downs out, not to synchronise
					start := time.Now()
					n, err := l.CountDown(ctx, "phase")
					record("countdown", start, n, err)
				})
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for range 5 {
				proxy.ResetRandom(0.3, rng)
				time.Sleep(10 * time.Millisecond)
			}
			workers.Wait()
			// Count-downs that failed on reset connections may have taken
			// nothing: a late worker counts down, with no more faults,
			// until the count is 0, so that the waiters return.
			late := newLatch()
			for range initial {
				start := time.Now()
				n, err := late.CountDown(ctx, "phase")
				record("countdown", start, n, err)
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					break
				}
			}
			wg.Wait()
			final, err := newLatch().Count(ctx, "phase")
			if err != nil {
				t.Fatal(err)
			}
			h := LatchHistory{Initial: initial, Ops: ops, Final: final}
			for _, v := range CheckLatch(h) {
				t.Error(v)
			}
			failed := 0
			for _, op := range ops {
				if op.Err != "" {
					failed++
				}
			}
			t.Logf("%d ops, %d failed, final count %d", len(ops), failed, final)
		})
	}
}
