package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

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
