package ledger_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/ledger"
)

// overlapPeriod is the period of the overlap tests' jobs: occurrence N+1
// comes due while N's function blocks, however slow the machine.
const overlapPeriod = 200 * time.Millisecond

// running starts a Run of job's occurrence of occ on l whose function
// blocks until release is closed (or its context ends, whose cause it
// returns), and waits until the function runs; it returns the
// occurrence's key and a channel that yields the Run's outcome.
func running(t *testing.T, ctx context.Context, l *ledger.Ledger, job string, occ ledger.Occurrence, release <-chan struct{}) (string, <-chan runOutcome) {
	t.Helper()
	started, out := make(chan string, 1), make(chan runOutcome, 1)
	go func() {
		res, err := l.Run(ctx, job, occ, func(ctx context.Context, r *ledger.Run) error {
			started <- r.Occurrence
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		out <- runOutcome{res, err}
	}()
	select {
	case key := <-started:
		return key, out
	case o := <-out:
		t.Fatalf("the first occurrence did not run: %+v, %v", o.res, o.err)
	}
	return "", nil
}

type runOutcome struct {
	res ledger.Result
	err error
}

// pastHalf waits until the database's clock is past the half way from
// the occurrence key to the next, so that a Run takes a later occurrence.
func pastHalf(t *testing.T, e *env, key string) {
	t.Helper()
	at, err := time.Parse(ledger.TimeFormat, key)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(ctxT(t), t, "the next occurrence is due", func() bool {
		return dbNow(t, e).Sub(at) > overlapPeriod*3/4
	})
}

// attemptsOf returns the recorded attempts of job, by occurrence.
func attemptsOf(t *testing.T, ctx context.Context, l *ledger.Ledger, job string) map[string][]ledger.RunInfo {
	t.Helper()
	runs, err := l.Runs(ctx, job, 1000)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string][]ledger.RunInfo{}
	for _, r := range runs {
		by[r.Occurrence] = append(by[r.Occurrence], r)
	}
	return by
}

func TestOverlapSkip(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		a, b := e.ledger(t, ledger.Options{}), e.ledger(t, ledger.Options{})
		occ := ledger.Every(overlapPeriod) // OverlapSkip by default
		release := make(chan struct{})
		first, out := running(t, ctx, a, "tick", occ, release)
		pastHalf(t, e, first)

		res, err := b.Run(ctx, "tick", occ, ok)
		if err != nil || res.Ran || res.State != ledger.StateSkipped || res.Occurrence == first || res.Attempt != 1 {
			t.Fatalf("a Run while %s runs: %+v, %v", first, res, err)
		}
		skipped := res.Occurrence
		// The skipped occurrence is decided: it never runs, even with
		// the first one done, and it is not missed.
		close(release)
		if o := <-out; o.err != nil || o.res.State != ledger.StateSucceeded {
			t.Fatalf("the first occurrence: %+v, %v", o.res, o.err)
		}
		if res, err := b.Run(ctx, "tick", ledger.Key(skipped), ok); err != nil || res.Ran || res.State != ledger.StateSkipped {
			t.Fatalf("the skipped occurrence again: %+v, %v", res, err)
		}
		got := attemptsOf(t, ctx, a, "tick")[skipped]
		if len(got) != 1 || got[0].State != ledger.StateSkipped || got[0].Err == "" {
			t.Fatalf("the skipped occurrence's attempts: %+v", got)
		}
		missed, err := a.Missed(ctx, "tick", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range missed {
			if m.Occurrence == skipped || m.Occurrence == first {
				t.Fatalf("%s is missed: %+v", m.Occurrence, missed)
			}
		}
		// With nothing running, a later occurrence runs.
		testutil.Eventually(ctx, t, "a later occurrence runs", func() bool {
			res, err := b.Run(ctx, "tick", occ, ok)
			if err != nil {
				t.Fatal(err)
			}
			return res.Ran && res.State == ledger.StateSucceeded
		})
	})
}

func TestOverlapAllow(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		a, b := e.ledger(t, ledger.Options{}), e.ledger(t, ledger.Options{})
		occ := ledger.Every(overlapPeriod).Overlap(ledger.OverlapAllow)
		release := make(chan struct{})
		first, out := running(t, ctx, a, "tick", occ, release)
		pastHalf(t, e, first)
		res, err := b.Run(ctx, "tick", occ, ok)
		if err != nil || !res.Ran || res.State != ledger.StateSucceeded || res.Occurrence == first {
			t.Fatalf("a Run while %s runs: %+v, %v", first, res, err)
		}
		close(release)
		if o := <-out; o.err != nil || o.res.State != ledger.StateSucceeded {
			t.Fatalf("the first occurrence: %+v, %v", o.res, o.err)
		}
	})
}

func TestOverlapReplace(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		opts := ledger.Options{TTL: 3 * time.Second}
		a, b := e.ledger(t, opts), e.ledger(t, opts)
		occ := ledger.Every(overlapPeriod).Overlap(ledger.OverlapReplace)
		first, out := running(t, ctx, a, "tick", occ, nil)
		// An occurrence the caller names runs beside, and is not
		// replaced.
		release := make(chan struct{})
		_, sideOut := running(t, ctx, a, "tick", ledger.Key("side"), release)
		pastHalf(t, e, first)
		res, err := b.Run(ctx, "tick", occ, ok)
		if err != nil || !res.Ran || res.State != ledger.StateSucceeded || res.Occurrence == first {
			t.Fatalf("a Run while %s runs: %+v, %v", first, res, err)
		}
		close(release)
		if o := <-sideOut; o.err != nil || o.res.State != ledger.StateSucceeded {
			t.Fatalf("the occurrence beside: %+v, %v", o.res, o.err)
		}
		// The replaced one's function ends as a lost lock, and its
		// outcome is refused.
		o := <-out
		if !errors.Is(o.err, sqllock.ErrLockLost) || o.res.State != ledger.StateAbandoned || !o.res.Ran {
			t.Fatalf("the replaced occurrence: %+v, %v", o.res, o.err)
		}
		by := attemptsOf(t, ctx, a, "tick")
		if got := by[first]; len(got) != 1 || got[0].State != ledger.StateReplaced || got[0].FinishedAt.IsZero() {
			t.Fatalf("the replaced occurrence's attempts: %+v", got)
		}
		// Replaced decides the occurrence: it never runs again.
		if res, err := b.Run(ctx, "tick", ledger.Key(first), ok); err != nil || res.Ran || res.State != ledger.StateReplaced {
			t.Fatalf("the replaced occurrence again: %+v, %v", res, err)
		}
	})
}

// TestOverlapReplicas has five replicas claim the occurrences due while
// one runs, at once, under each policy that takes the job's lease: each
// occurrence is decided by exactly one attempt (skipped, or run once).
func TestOverlapReplicas(t *testing.T) {
	for _, p := range []ledger.Overlap{ledger.OverlapSkip, ledger.OverlapReplace} {
		t.Run(string(p), func(t *testing.T) {
			each(t, func(t *testing.T, e *env) {
				ctx := ctxT(t)
				occ := ledger.Every(overlapPeriod).Overlap(p)
				release := make(chan struct{})
				first, out := running(t, ctx, e.ledger(t, ledger.Options{TTL: 3 * time.Second}), "tick", occ, release)
				pastHalf(t, e, first)
				const replicas = 5
				var (
					wg      sync.WaitGroup
					mu      sync.Mutex
					ran     = map[string]int{}
					decided = map[string]ledger.State{}
				)
				for range replicas {
					l := e.ledger(t, ledger.Options{TTL: 3 * time.Second})
					wg.Go(func() {
						res, err := l.Run(ctx, "tick", occ, ok)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						defer mu.Unlock()
						if res.Ran {
							ran[res.Occurrence]++
						}
						if res.State != ledger.StateRunning {
							decided[res.Occurrence] = res.State
						}
					})
				}
				wg.Wait()
				close(release)
				o := <-out
				if p == ledger.OverlapSkip {
					if o.err != nil {
						t.Fatalf("the first occurrence: %+v, %v", o.res, o.err)
					}
					for _, st := range decided {
						if st != ledger.StateSkipped {
							t.Errorf("states: %v", decided)
						}
					}
				}
				for key, got := range attemptsOf(t, ctx, e.ledger(t, ledger.Options{}), "tick") {
					if key == first {
						continue
					}
					if len(got) != 1 || ran[key] > 1 || (p == ledger.OverlapSkip && ran[key] != 0) {
						t.Errorf("occurrence %s: attempts %+v, ran %d times", key, got, ran[key])
					}
				}
			})
		})
	}
}

// TestMigrationOverlapStates records a skipped and a replaced attempt,
// then reverts every migration (21's down deletes the skipped attempt and
// makes the replaced one abandoned before the state column's CHECK is
// narrowed again; on SQLite the table is rebuilt) and migrates up again.
func TestMigrationOverlapStates(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		opts := ledger.Options{TTL: 3 * time.Second}
		a, b := e.ledger(t, opts), e.ledger(t, opts)
		occ := ledger.Every(overlapPeriod).Overlap(ledger.OverlapReplace)
		first, out := running(t, ctx, a, "tick", occ, nil)
		pastHalf(t, e, first)
		if res, err := b.Run(ctx, "tick", occ, ok); err != nil || !res.Ran {
			t.Fatalf("the replacing run: %+v, %v", res, err)
		}
		<-out
		release := make(chan struct{})
		second, out := running(t, ctx, a, "skip", ledger.Every(overlapPeriod), release)
		pastHalf(t, e, second)
		if res, err := b.Run(ctx, "skip", ledger.Every(overlapPeriod), ok); err != nil || res.State != ledger.StateSkipped {
			t.Fatalf("the skipped run: %+v, %v", res, err)
		}
		close(release)
		<-out
		if err := sqllock.MigrateDown(ctx, e.d); err != nil {
			t.Fatalf("migrate down over skipped and replaced attempts: %v", err)
		}
		if err := sqllock.Migrate(ctx, e.d); err != nil {
			t.Fatalf("migrate up again: %v", err)
		}
		if res, err := e.ledger(t, ledger.Options{}).Run(ctx, "tick", ledger.Key("k"), ok); err != nil || !res.Ran {
			t.Fatalf("a run after the round trip: %+v, %v", res, err)
		}
	})
}
