package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/ledger"
)

var errBoom = errors.New("boom")

func TestRunOncePerOccurrence(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		occ := ledger.At(time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC))
		calls := 0
		fn := func(ctx context.Context, r *ledger.Run) error { calls++; return nil }
		res, err := l.Run(ctx, "nightly", occ, fn)
		if err != nil || !res.Ran || res.State != ledger.StateSucceeded || res.Attempt != 1 || res.Token <= 0 {
			t.Fatalf("first run: %+v, %v", res, err)
		}
		if res.Occurrence != "2026-11-26T02:00:00.000000Z" {
			t.Fatalf("occurrence key %q", res.Occurrence)
		}
		again, err := l.Run(ctx, "nightly", occ, fn)
		if err != nil || again.Ran || again.State != ledger.StateSucceeded || again.Attempt != 1 || again.Token != res.Token {
			t.Fatalf("second run: %+v, %v", again, err)
		}
		if calls != 1 {
			t.Fatalf("fn ran %d times", calls)
		}
		runs, err := l.Runs(ctx, "nightly", 10)
		if err != nil || len(runs) != 1 || runs[0].State != ledger.StateSucceeded || runs[0].FinishedAt.IsZero() {
			t.Fatalf("Runs: %+v, %v", runs, err)
		}
	})
}

func TestRunSkipsALiveAttempt(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		occ := ledger.Key("batch-17")
		started, finish := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := e.ledger(t, ledger.Options{}).Run(ctx, "import", occ, func(ctx context.Context, r *ledger.Run) error {
				close(started)
				<-finish
				return nil
			})
			done <- err
		}()
		<-started
		res, err := e.ledger(t, ledger.Options{}).Run(ctx, "import", occ, func(context.Context, *ledger.Run) error {
			t.Error("ran beside a live attempt")
			return nil
		})
		if err != nil || res.Ran || res.State != ledger.StateRunning {
			t.Fatalf("beside a live attempt: %+v, %v", res, err)
		}
		// With Wait, a second replica waits for the attempt, and finds it
		// succeeded.
		waited := make(chan ledger.Result, 1)
		go func() {
			res, err := e.ledger(t, ledger.Options{Wait: true}).Run(ctx, "import", occ, func(context.Context, *ledger.Run) error {
				t.Error("ran after a success")
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			waited <- res
		}()
		close(finish)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if res := <-waited; res.Ran || res.State != ledger.StateSucceeded || res.Attempt != 1 {
			t.Fatalf("after waiting: %+v", res)
		}
	})
}

func TestRunRetriesFailures(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{Retries: 2})
		calls := 0
		res, err := l.Run(ctx, "flaky", ledger.Key("k"), func(ctx context.Context, r *ledger.Run) error {
			calls++
			if r.Attempt != calls {
				t.Errorf("attempt %d on call %d", r.Attempt, calls)
			}
			if calls < 3 {
				return errBoom
			}
			return nil
		})
		if err != nil || !res.Ran || res.State != ledger.StateSucceeded || res.Attempt != 3 {
			t.Fatalf("%+v, %v", res, err)
		}
		runs, err := l.Runs(ctx, "flaky", 10)
		if err != nil || len(runs) != 3 {
			t.Fatalf("Runs: %+v, %v", runs, err)
		}
		for i, r := range runs { // the latest first
			want := ledger.StateFailed
			if i == 0 {
				want = ledger.StateSucceeded
			}
			if r.State != want || r.Attempt != 3-i || (want == ledger.StateFailed) != (r.Err != "") {
				t.Errorf("run %d: %+v", i, r)
			}
			if i > 0 && r.Token >= runs[i-1].Token {
				t.Errorf("attempt %d has token %d, not below the next one's %d", r.Attempt, r.Token, runs[i-1].Token)
			}
		}
	})
}

func TestRunFailsForGood(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		res, err := l.Run(ctx, "once", ledger.Key("k"), func(context.Context, *ledger.Run) error { return errBoom })
		if !errors.Is(err, errBoom) || !res.Ran || res.State != ledger.StateFailed || res.Attempt != 1 {
			t.Fatalf("%+v, %v", res, err)
		}
		res, err = l.Run(ctx, "once", ledger.Key("k"), func(context.Context, *ledger.Run) error {
			t.Error("ran with no retry left")
			return nil
		})
		if err != nil || res.Ran || res.State != ledger.StateFailed || res.Attempt != 1 {
			t.Fatalf("again: %+v, %v", res, err)
		}
		runs, err := l.Runs(ctx, "once", 10)
		if err != nil || len(runs) != 1 || runs[0].Err != "ledger: once k attempt 1: boom" {
			t.Fatalf("Runs: %+v, %v", runs, err)
		}
	})
}

func TestRetryBackoff(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		opts := ledger.Options{Retries: 1, RetryBackoff: time.Hour}
		// The runner whose attempt failed waits out the backoff before
		// its retry; it stops waiting when its ctx ends.
		rctx, cancel := context.WithCancel(ctx)
		res, err := e.ledger(t, opts).Run(rctx, "slow", ledger.Key("k"), func(context.Context, *ledger.Run) error {
			cancel()
			return errBoom
		})
		if !errors.Is(err, errBoom) || !errors.Is(err, context.Canceled) || res.State != ledger.StateFailed || res.Attempt != 1 {
			t.Fatalf("%+v, %v", res, err)
		}
		// Another replica finds the retry not due.
		res, err = e.ledger(t, opts).Run(ctx, "slow", ledger.Key("k"), func(context.Context, *ledger.Run) error {
			t.Error("retried within the backoff")
			return nil
		})
		if err != nil || res.Ran || res.State != ledger.StateFailed || res.Attempt != 1 {
			t.Fatalf("within the backoff: %+v, %v", res, err)
		}
		// A backoff of a microsecond passes on the database clock.
		short := e.ledger(t, ledger.Options{Retries: 1, RetryBackoff: time.Microsecond})
		testutil.Eventually(ctx, t, "a retry after the backoff", func() bool {
			res, err = short.Run(ctx, "slow", ledger.Key("k"), func(context.Context, *ledger.Run) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			return res.Ran
		})
		if res.State != ledger.StateSucceeded || res.Attempt != 2 {
			t.Fatalf("retry: %+v", res)
		}
	})
}
