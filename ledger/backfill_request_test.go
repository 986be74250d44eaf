package ledger_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/ledger"
)

// A backfill asked of a job's replicas (a console's, a script's) is seen
// by their scheduled Runs and in Jobs, runs each occurrence of the range
// once across the replicas that run it, and ends; one is pending at a
// time, and bad ranges are refused.
func TestRequestBackfillRunsOnceAcrossReplicas(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		obs := &changes{}
		l := e.ledger(t, ledger.Options{Observer: obs})
		t0 := dbNow(t, e)
		// Every minute, on the database's present: due now, whatever the
		// time.
		minutely := ledger.Every(time.Minute).Phase(time.Duration(t0.UnixMicro()%time.Minute.Microseconds()) * time.Microsecond)
		from, to := t0.Add(-10*time.Minute), t0.Add(-time.Minute)
		if _, err := l.RequestBackfill(ctx, "fill", from, to); !errors.Is(err, ledger.ErrUnknownJob) {
			t.Fatalf("RequestBackfill of an unknown job: %v", err)
		}
		if _, err := l.Run(ctx, "ad-hoc", ledger.Key("k"), ok); err != nil {
			t.Fatal(err)
		}
		if _, err := l.RequestBackfill(ctx, "ad-hoc", from, to); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Fatalf("RequestBackfill of a job without a schedule: %v", err)
		}
		if res, err := l.Run(ctx, "fill", minutely, ok); err != nil || !res.Ran || !res.Backfill.IsZero() {
			t.Fatalf("Run: %+v, %v", res, err)
		}
		for _, bad := range []struct {
			what     string
			from, to time.Time
		}{
			{"a range that ends before it starts", to, from},
			{"a range that ends after the database's time", from, t0.Add(time.Hour)},
			{"a range without an occurrence", t0.Add(-90 * time.Second), t0.Add(-70 * time.Second)},
			{"a range of more than MaxBackfill occurrences", t0.Add(-(ledger.MaxBackfill + 1) * time.Minute), to},
		} {
			if _, err := l.RequestBackfill(ctx, "fill", bad.from, bad.to); !errors.Is(err, sqllock.ErrInvalidOptions) {
				t.Fatalf("RequestBackfill of %s: %v", bad.what, err)
			}
		}
		n, err := l.RequestBackfill(ctx, "fill", from.Add(-time.Second), to) // from rounds up to an occurrence
		if err != nil || n != 10 {
			t.Fatalf("RequestBackfill: %d, %v; want 10 occurrences", n, err)
		}
		want := ledger.Range{From: from.UTC(), To: to.UTC()}
		if _, err := l.RequestBackfill(ctx, "fill", from, to); !errors.Is(err, ledger.ErrBackfillPending) {
			t.Fatalf("a second RequestBackfill: %v", err)
		}
		if jobs, err := l.Jobs(ctx, "fill"); err != nil || !jobs[0].Backfill.From.Equal(want.From) || !jobs[0].Backfill.To.Equal(want.To) {
			t.Fatalf("Jobs: %+v, %v; want the backfill %v", jobs, err, want)
		}
		if res, err := l.Run(ctx, "fill", minutely, ok); err != nil || res.Ran || !res.Backfill.From.Equal(want.From) || !res.Backfill.To.Equal(want.To) {
			t.Fatalf("a scheduled Run sees %+v, %v; want the backfill %v", res, err, want)
		}
		var (
			mu  sync.Mutex
			ran = map[string]int{}
			wg  sync.WaitGroup
		)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, _, err := e.ledger(t, ledger.Options{Wait: true}).RunBackfill(ctx, "fill", minutely, func(_ context.Context, run *ledger.Run) error {
					mu.Lock()
					defer mu.Unlock()
					ran[run.Occurrence]++
					return nil
				})
				if err != nil || (!r.IsZero() && (!r.From.Equal(want.From) || !r.To.Equal(want.To))) {
					t.Errorf("RunBackfill: %v, %v", r, err)
				}
			}()
		}
		wg.Wait()
		if len(ran) != 10 {
			t.Fatalf("the backfill ran %d occurrences, want 10: %v", len(ran), ran)
		}
		for occ, k := range ran {
			if k != 1 {
				t.Fatalf("occurrence %s ran %d times", occ, k)
			}
			at, err := time.Parse(ledger.TimeFormat, occ)
			if err != nil || at.Before(want.From) || at.After(want.To) {
				t.Fatalf("occurrence %s outside %v (%v)", occ, want, err)
			}
		}
		if jobs, err := l.Jobs(ctx, "fill"); err != nil || !jobs[0].Backfill.IsZero() {
			t.Fatalf("Jobs after the backfill: %+v, %v", jobs, err)
		}
		if r, results, err := l.RunBackfill(ctx, "fill", minutely, ok); err != nil || !r.IsZero() || results != nil {
			t.Fatalf("RunBackfill with none asked for: %v, %+v, %v", r, results, err)
		}
		obs.mu.Lock()
		defer obs.mu.Unlock()
		if len(obs.seen) != 1 || obs.seen[0].Change != ledger.ChangeBackfillRequested || !obs.seen[0].Backfill.From.Equal(want.From) {
			t.Fatalf("observed %+v, want one backfill request", obs.seen)
		}
	})
}

// A backfill that a replica could not finish (its ctx ended) stays asked
// for, and the next replica runs what is left; a failed occurrence ends
// the request all the same.
func TestRequestBackfillSurvivesAStoppedReplica(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		t0 := dbNow(t, e)
		minutely := ledger.Every(time.Minute).Phase(time.Duration(t0.UnixMicro()%time.Minute.Microseconds()) * time.Microsecond)
		if _, err := l.Run(ctx, "resumed", minutely, ok); err != nil {
			t.Fatal(err)
		}
		if n, err := l.RequestBackfill(ctx, "resumed", t0.Add(-5*time.Minute), t0.Add(-time.Minute)); err != nil || n != 5 {
			t.Fatalf("RequestBackfill: %d, %v", n, err)
		}
		stopped, stop := context.WithCancel(ctx)
		seen := map[string]int{}
		_, _, err := l.RunBackfill(stopped, "resumed", minutely, func(_ context.Context, run *ledger.Run) error {
			seen[run.Occurrence]++
			stop() // the replica goes away after its first occurrence
			return nil
		})
		if !errors.Is(err, context.Canceled) || len(seen) != 1 {
			t.Fatalf("RunBackfill stopped: %v, ran %v", err, seen)
		}
		if jobs, err := l.Jobs(ctx, "resumed"); err != nil || jobs[0].Backfill.IsZero() {
			t.Fatalf("the request ended with the stopped replica: %+v, %v", jobs, err)
		}
		_, results, err := l.RunBackfill(ctx, "resumed", minutely, func(_ context.Context, run *ledger.Run) error {
			seen[run.Occurrence]++
			return errors.New("the disk is full")
		})
		if err == nil || len(results) != 5 || len(seen) != 5 {
			t.Fatalf("RunBackfill after: %+v, %v, ran %v", results, err, seen)
		}
		for occ, k := range seen {
			if k != 1 {
				t.Fatalf("occurrence %s ran %d times", occ, k)
			}
		}
		if jobs, err := l.Jobs(ctx, "resumed"); err != nil || !jobs[0].Backfill.IsZero() {
			t.Fatalf("the failed occurrences left the request: %+v, %v", jobs, err)
		}
	})
}

// A job's row whose backfill range the ledger cannot read (written by
// hand, say) makes Jobs and Health fail with the job named, rather than
// show no backfill.
func TestJobsRefuseAnUnreadableBackfill(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		if _, err := l.Run(ctx, "fill", ledger.Every(time.Hour), ok); err != nil {
			t.Fatal(err)
		}
		table := "sqllock_run_jobs"
		switch d := e.d.(type) {
		case interface{ Schema() string }:
			table = d.Schema() + "." + table
		case interface{ Database() string }:
			table = d.Database() + "." + table
		}
		if _, err := e.d.DB().ExecContext(ctx, "UPDATE "+table+" SET backfill_from = 'yesterday', backfill_to = 'today' WHERE job = 'fill'"); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Jobs(ctx, ""); err == nil || !strings.Contains(err.Error(), "fill") {
			t.Fatalf("Jobs: %v; want an error naming the job", err)
		}
		if _, _, err := l.Health(ctx, "fill", ledger.HealthOptions{}); err == nil || !strings.Contains(err.Error(), "fill") {
			t.Fatalf("Health: %v; want an error naming the job", err)
		}
	})
}
