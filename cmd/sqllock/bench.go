package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/sqllock/sqllock"
)

func benchFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := localDSNFlag(fs), schemaFlag(fs)
	ops := fs.Int("ops", 1000, "acquire+release operations per strategy and client count")
	handoffs := fs.Int("handoffs", 200, "hand-offs measured per strategy")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 0 {
			return usageError{msg: "bench takes no arguments"}
		}
		if *ops < 1 || *handoffs < 1 {
			return usageError{msg: "bench needs --ops >= 1 and --handoffs >= 1"}
		}
		t, err := openReady(ctx, *dsn, *schema)
		if err != nil {
			return err
		}
		defer t.Close()
		if err := t.hasSchema(ctx); err != nil {
			return t.fail(err)
		}
		t.db.SetMaxIdleConns(16)
		fmt.Fprintf(stdout, "sqllock bench on %s: uncontended TryAcquire+Release on distinct names, and hand-off\n"+
			"latency (holder releases -> the waiting Acquire returns) with one waiter.\n\n", t.d.Name())
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "STRATEGY\tCLIENTS\tOPS/S\tP50 µs\tP99 µs\tHAND-OFF P50 ms\tP99 ms\t")
		for _, strategy := range []string{"table", "optimistic", "pessimistic"} {
			l, err := newLocker(t.d, strategy, sqllock.TableOptions{})
			if errors.Is(err, sqllock.ErrUnsupported) || errors.As(err, new(usageError)) {
				continue
			}
			if err != nil {
				return t.fail(err)
			}
			var hp50, hp99 time.Duration
			for _, clients := range []int{1, 8} {
				fmt.Fprintf(os.Stderr, "sqllock bench: %s, %d client(s), %d acquire+release...\n", strategy, clients, *ops)
				rate, lat, err := benchAcquire(ctx, l, strategy, clients, *ops)
				if err != nil {
					return t.fail(fmt.Errorf("bench %s: %w", strategy, err))
				}
				hand := "\t"
				if clients == 1 {
					fmt.Fprintf(os.Stderr, "sqllock bench: %s, %d hand-offs...\n", strategy, *handoffs)
					if hp50, hp99, err = benchHandoff(ctx, l, "sqllock-bench-handoff-"+strategy, *handoffs); err != nil {
						return t.fail(fmt.Errorf("bench %s hand-off: %w", strategy, err))
					}
					hand = fmt.Sprintf("%.2f\t%.2f", ms(hp50), ms(hp99))
				}
				fmt.Fprintf(tw, "%s\t%d\t%.0f\t%d\t%d\t%s\t\n", strategy, clients, rate,
					lat[len(lat)/2].Microseconds(), lat[len(lat)*99/100].Microseconds(), hand)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprint(stdout, "\nThe rows named sqllock-bench-* stay behind for the reaper (sqllock reap).\n"+
			"Ratios against raw SQL: see BENCHMARKS.md.\n")
		return nil
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// benchAcquire runs ops TryAcquire+Release pairs on distinct names, spread
// over clients goroutines, and returns the rate and the sorted latencies.
func benchAcquire(ctx context.Context, l sqllock.Locker, strategy string, clients, ops int) (float64, []time.Duration, error) {
	var (
		next atomic.Int64
		mu   sync.Mutex
		lat  = make([]time.Duration, 0, ops)
		errs = make(chan error, clients)
		wg   sync.WaitGroup
	)
	start := time.Now()
	for c := range clients {
		name := "sqllock-bench-" + strategy + "-" + strconv.Itoa(c)
		wg.Go(func() {
			for next.Add(1) <= int64(ops) {
				t0 := time.Now()
				k, err := l.TryAcquire(ctx, name)
				if err == nil {
					err = k.Release(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				lat = append(lat, time.Since(t0))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, nil, err
	}
	slices.Sort(lat)
	return float64(len(lat)) / elapsed.Seconds(), lat, nil
}

// benchHandoff has two goroutines take turns on name, each releasing once
// the other waits, and returns the p50 and p99 of n hand-offs.
func benchHandoff(ctx context.Context, l sqllock.Locker, name string, n int) (p50, p99 time.Duration, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		released atomic.Int64
		lat      = make([]time.Duration, 0, n)
		mu       sync.Mutex
		wg       sync.WaitGroup
		waiting  = make(chan struct{}, 1) // a waiter is about to call Acquire
		firstErr error
	)
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case waiting <- struct{}{}:
				default:
				}
				k, err := l.Acquire(ctx, name)
				if err != nil {
					return
				}
				now := time.Now()
				mu.Lock()
				if r := released.Load(); r != 0 {
					lat = append(lat, now.Sub(time.Unix(0, r)))
				}
				done := len(lat) >= n
				mu.Unlock()
				if done {
					cancel()
				}
				// Release once the other goroutine has announced its wait,
				// plus a moment for its Acquire to reach the database.
				select {
				case <-waiting:
				case <-ctx.Done():
				}
				time.Sleep(2 * time.Millisecond)
				released.Store(time.Now().UnixNano())
				if err := k.Release(context.WithoutCancel(ctx)); err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return 0, 0, firstErr
	}
	if len(lat) == 0 {
		return 0, 0, errors.New("no hand-off measured")
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
