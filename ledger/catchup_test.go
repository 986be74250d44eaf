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

// catchUpPeriod is the period of the catch-up tests' jobs.
const catchUpPeriod = 50 * time.Millisecond

// downtime runs job's first occurrence of occ on l, then waits until at
// least n further occurrences have passed unclaimed; it returns the first
// occurrence's key.
func downtime(t *testing.T, e *env, l *ledger.Ledger, job string, occ ledger.Occurrence, n int) string {
	t.Helper()
	ctx := ctxT(t)
	res, err := l.Run(ctx, job, occ, ok)
	if err != nil || !res.Ran {
		t.Fatalf("the first run: %+v, %v", res, err)
	}
	// The job's history starts when its row was first written, which a
	// loaded machine may do periods after the first occurrence's time:
	// count the unclaimed occurrences from there.
	jobs, err := l.Jobs(ctx, job)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("Jobs: %+v, %v", jobs, err)
	}
	since := jobs[0].FirstSeen
	testutil.Eventually(ctx, t, "occurrences pass unclaimed", func() bool {
		return dbNow(t, e).Sub(since) > time.Duration(n+1)*catchUpPeriod
	})
	return res.Occurrence
}

// missedKeys returns the keys of job's missed occurrences.
func missedKeys(t *testing.T, l *ledger.Ledger, job string) map[string]bool {
	t.Helper()
	missed, err := l.Missed(ctxT(t), job, time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, m := range missed {
		keys[m.Occurrence] = true
	}
	return keys
}

func TestCatchUpAll(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		occ := ledger.Every(catchUpPeriod).CatchUp(ledger.CatchUpAll)
		first := downtime(t, e, l, "tick", occ, 5)
		var keys []string
		res, err := l.Run(ctx, "tick", occ, func(_ context.Context, r *ledger.Run) error {
			keys = append(keys, r.Occurrence)
			return nil
		})
		// At least 5 periods passed after the first occurrence's
		// time: at least 4 whole ones lie between it and the due one.
		if err != nil || len(res.CaughtUp) < 4 {
			t.Fatalf("%+v, %v: want at least 4 caught up", res, err)
		}
		for i, c := range res.CaughtUp {
			if !c.Ran || c.State != ledger.StateSucceeded || c.Occurrence <= first || (i > 0 && c.Occurrence <= res.CaughtUp[i-1].Occurrence) {
				t.Fatalf("caught up %d: %+v (after %s, oldest first)", i, c, first)
			}
			if c.Occurrence >= res.Occurrence {
				t.Fatalf("caught up %s, not before the due %s", c.Occurrence, res.Occurrence)
			}
		}
		if len(keys) != len(res.CaughtUp)+btoi(res.Ran) {
			t.Fatalf("fn ran for %v", keys)
		}
		missed := missedKeys(t, l, "tick")
		for _, c := range res.CaughtUp {
			if missed[c.Occurrence] {
				t.Fatalf("%s is caught up and missed", c.Occurrence)
			}
		}
		// Caught up once: another Run catches none of them up again.
		res2, err := l.Run(ctx, "tick", occ, ok)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range res2.CaughtUp {
			for _, d := range res.CaughtUp {
				if c.Ran && c.Occurrence == d.Occurrence {
					t.Fatalf("%s caught up twice", c.Occurrence)
				}
			}
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestCatchUpLatest(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		occ := ledger.Every(catchUpPeriod).CatchUp(ledger.CatchUpLatest)
		downtime(t, e, l, "tick", occ, 5)
		before := missedKeys(t, l, "tick")
		res, err := l.Run(ctx, "tick", occ, ok)
		if err != nil || len(res.CaughtUp) != 1 || !res.CaughtUp[0].Ran {
			t.Fatalf("%+v, %v: want the latest missed one caught up", res, err)
		}
		latest := res.CaughtUp[0].Occurrence
		after := missedKeys(t, l, "tick")
		if after[latest] {
			t.Fatalf("%s is caught up and missed", latest)
		}
		// The earlier missed ones stay missed.
		stay := 0
		for k := range before {
			if k < latest && after[k] {
				stay++
			}
		}
		if stay < 3 {
			t.Fatalf("missed before %v, after %v: the earlier ones should stay missed", before, after)
		}
		// Later Runs (a replica's of the same due occurrence, or of the
		// next ones) catch none of the earlier ones up. (A Run more than
		// a period after the last may catch up the one before its own due
		// occurrence, later than latest.)
		for range 4 {
			res, err := l.Run(ctx, "tick", occ, ok)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range res.CaughtUp {
				if c.Ran && c.Occurrence < latest {
					t.Fatalf("a later Run caught up %s too, before %s", c.Occurrence, latest)
				}
			}
		}
	})
}

func TestCatchUpSkip(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		occ := ledger.Every(catchUpPeriod) // CatchUpSkip by default
		downtime(t, e, l, "tick", occ, 3)
		res, err := l.Run(ctx, "tick", occ, ok)
		if err != nil || len(res.CaughtUp) != 0 {
			t.Fatalf("%+v, %v: want nothing caught up", res, err)
		}
		if len(missedKeys(t, l, "tick")) < 3 {
			t.Fatal("the missed occurrences are not reported missed")
		}
	})
}

// TestCatchUpReplicas has five replicas catch up at once: each missed
// occurrence runs exactly once across them.
func TestCatchUpReplicas(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		occ := ledger.Every(catchUpPeriod).CatchUp(ledger.CatchUpAll).Overlap(ledger.OverlapAllow)
		first := downtime(t, e, e.ledger(t, ledger.Options{}), "tick", occ, 10)
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			ran = map[string]int{}
		)
		for range 5 {
			l := e.ledger(t, ledger.Options{})
			wg.Go(func() {
				_, err := l.Run(ctx, "tick", occ, func(_ context.Context, r *ledger.Run) error {
					mu.Lock()
					ran[r.Occurrence]++
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for k, n := range ran {
			if n != 1 {
				t.Errorf("%s ran %d times", k, n)
			}
		}
		for k, got := range attemptsOf(t, ctx, e.ledger(t, ledger.Options{}), "tick") {
			if len(got) != 1 {
				t.Errorf("%s: attempts %+v", k, got)
			}
		}
		if len(ran) < 9 {
			t.Errorf("ran %d occurrences after %s, want the 9 missed at least: %v", len(ran), first, ran)
		}
	})
}

func TestCatchUpInvalid(t *testing.T) {
	t.Parallel()
	for _, occ := range []ledger.Occurrence{
		ledger.Every(time.Second).CatchUp("sometimes"),
		ledger.Every(time.Second).CatchUpWindow(time.Hour),
		ledger.Every(time.Second).CatchUp(ledger.CatchUpAll).CatchUpWindow(-time.Second),
		ledger.Key("k").CatchUp(ledger.CatchUpAll),
	} {
		if err := occ.Validate(); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Errorf("%v: %v", occ, err)
		}
	}
}

// TestBackfill backfills a range of a job's past occurrences from five
// replicas at once: each runs exactly once; a second backfill runs none.
func TestBackfill(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		occ := ledger.Every(time.Second)
		to := dbNow(t, e).Add(-time.Second)
		from := to.Add(-20 * time.Second)
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			ran = map[string]int{}
		)
		for range 5 {
			l := e.ledger(t, ledger.Options{})
			wg.Go(func() {
				results, err := l.Backfill(ctx, "fill", occ, from, to, func(_ context.Context, r *ledger.Run) error {
					mu.Lock()
					ran[r.Occurrence]++
					mu.Unlock()
					return nil
				})
				if err != nil || len(results) < 20 {
					t.Errorf("%d results, %v", len(results), err)
				}
			})
		}
		wg.Wait()
		if len(ran) < 20 {
			t.Fatalf("ran %d occurrences, want 20 or 21", len(ran))
		}
		for k, n := range ran {
			if n != 1 {
				t.Errorf("%s ran %d times", k, n)
			}
		}
		l := e.ledger(t, ledger.Options{})
		results, err := l.Backfill(ctx, "fill", occ, from, to, ok)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range results {
			if r.Ran || r.State != ledger.StateSucceeded {
				t.Fatalf("a second backfill: %+v", r)
			}
		}
		for _, bad := range []struct{ from, to time.Time }{
			{to, from},                         // reversed
			{from, dbNow(t, e).Add(time.Hour)}, // in the future
			{to.Add(-2 * time.Hour), to},       // more than MaxBackfill
		} {
			if _, err := l.Backfill(ctx, "fill", occ, bad.from, bad.to, ok); !errors.Is(err, sqllock.ErrInvalidOptions) {
				t.Errorf("Backfill(%v, %v): %v", bad.from, bad.to, err)
			}
		}
		if _, err := l.Backfill(ctx, "fill", ledger.Key("k"), from, to, ok); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Errorf("Backfill of a Key: %v", err)
		}
	})
}
