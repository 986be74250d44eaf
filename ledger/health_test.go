package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/ledger"
)

func TestStreakOf(t *testing.T) {
	t.Parallel()
	// outcomes is a job's attempts, the latest first: S succeeded, F
	// failed, A abandoned, R running.
	attempts := func(outcomes string) []ledger.RunInfo {
		states := map[rune]ledger.State{'S': ledger.StateSucceeded, 'F': ledger.StateFailed,
			'A': ledger.StateAbandoned, 'R': ledger.StateRunning}
		var as []ledger.RunInfo
		for _, c := range outcomes {
			as = append(as, ledger.RunInfo{State: states[c]})
		}
		return as
	}
	for _, c := range []struct {
		outcomes             string
		failAfter, recoverAf int
		want                 ledger.Streak
	}{
		{"", 3, 1, ledger.Streak{}},
		{"R", 3, 1, ledger.Streak{}},
		{"SSF", 3, 1, ledger.Streak{Succeeded: 2}},
		{"FF", 3, 1, ledger.Streak{Failed: 2}},
		{"FFF", 3, 1, ledger.Streak{Failed: 3, Failing: true}},
		{"RFAF", 3, 1, ledger.Streak{Failed: 3, Failing: true}},
		{"FFFFS", 3, 1, ledger.Streak{Failed: 4, Failing: true}},
		// Recovered after one success, not after one of two.
		{"SFFF", 3, 1, ledger.Streak{Succeeded: 1}},
		{"SFFF", 3, 2, ledger.Streak{Succeeded: 1, Failing: true}},
		{"SSFFF", 3, 2, ledger.Streak{Succeeded: 2}},
		// A short run of failures after a short run of successes: still
		// failing since the older streak, until recovered.
		{"FSFFF", 3, 2, ledger.Streak{Failed: 1, Failing: true}},
		{"FSSFFF", 3, 2, ledger.Streak{Failed: 1}},
		{"F", 1, 1, ledger.Streak{Failed: 1, Failing: true}},
	} {
		if got := ledger.StreakOf(attempts(c.outcomes), c.failAfter, c.recoverAf); got != c.want {
			t.Errorf("StreakOf(%s, %d, %d) = %+v, want %+v", c.outcomes, c.failAfter, c.recoverAf, got, c.want)
		}
	}
}

func TestMaxRuntimeTimesOut(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{MaxRuntime: 20 * time.Millisecond})
		// The function's ctx ends with ErrTimedOut; the attempt is
		// recorded failed, timed out.
		var cause error
		res, err := l.Run(ctx, "slow", ledger.Key("k1"), func(ctx context.Context, _ *ledger.Run) error {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return ctx.Err()
		})
		if !errors.Is(err, ledger.ErrTimedOut) || !errors.Is(cause, ledger.ErrTimedOut) || res.State != ledger.StateFailed {
			t.Fatalf("timed out Run: %+v, %v (cause %v)", res, err, cause)
		}
		// Timed out even if the function returns nil past its runtime.
		if _, err := l.Run(ctx, "slow", ledger.Key("k2"), func(ctx context.Context, _ *ledger.Run) error {
			<-ctx.Done()
			return nil
		}); !errors.Is(err, ledger.ErrTimedOut) {
			t.Fatalf("a function returning nil past its max runtime: %v", err)
		}
		// A supervisor's own limit: its error wraps ErrTimedOut.
		plain := e.ledger(t, ledger.Options{})
		if _, err := plain.Run(ctx, "slow", ledger.Key("k3"), func(context.Context, *ledger.Run) error {
			return fmt.Errorf("%w: stopped after --max-time 1s", ledger.ErrTimedOut)
		}); !errors.Is(err, ledger.ErrTimedOut) {
			t.Fatalf("a function's own timeout: %v", err)
		}
		if _, err := plain.Run(ctx, "slow", ledger.Key("k4"), func(context.Context, *ledger.Run) error {
			return errors.New("exit status 1")
		}); err == nil || errors.Is(err, ledger.ErrTimedOut) {
			t.Fatalf("a plain failure: %v", err)
		}
		runs, err := l.Runs(ctx, "slow", 10)
		if err != nil || len(runs) != 4 {
			t.Fatalf("Runs: %+v, %v", runs, err)
		}
		for _, r := range runs {
			want := r.Occurrence != "k4"
			if r.State != ledger.StateFailed || r.TimedOut != want || strings.Contains(r.Err, ledger.ErrTimedOut.Error()) != want {
				t.Errorf("%s: %+v, want timed out %v", r.Occurrence, r, want)
			}
		}
		if _, err := ledger.New(e.d, ledger.Options{MaxRuntime: -time.Second}); err == nil {
			t.Fatal("a negative MaxRuntime was accepted")
		}
	})
}

func TestHealth(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		fail := func(context.Context, *ledger.Run) error { return errors.New("boom") }
		health := func(job string, opts ledger.HealthOptions) ledger.JobHealth {
			t.Helper()
			hs, _, err := l.Health(ctx, job, opts)
			if err != nil || len(hs) != 1 || hs[0].Job != job {
				t.Fatalf("Health(%s): %+v, %v", job, hs, err)
			}
			return hs[0]
		}
		// Keyed occurrences: failing after three failures in a row,
		// recovered after one success (or two, if asked).
		for i, fn := range []func(context.Context, *ledger.Run) error{ok, fail, fail} {
			if _, err := l.Run(ctx, "batch", ledger.Key(fmt.Sprint("k", i)), fn); err != nil && i == 0 {
				t.Fatal(err)
			}
		}
		if h := health("batch", ledger.HealthOptions{}); h.Health != ledger.HealthUp || h.Failed != 2 || h.Failing {
			t.Fatalf("two failures: %+v", h)
		}
		_, _ = l.Run(ctx, "batch", ledger.Key("k3"), fail)
		if h := health("batch", ledger.HealthOptions{}); h.Health != ledger.HealthFailing || h.Failed != 3 || !h.Failing {
			t.Fatalf("three failures: %+v", h)
		}
		if h := health("batch", ledger.HealthOptions{FailAfter: 4}); h.Health != ledger.HealthUp {
			t.Fatalf("three failures, FailAfter 4: %+v", h)
		}
		if _, err := l.Run(ctx, "batch", ledger.Key("k4"), ok); err != nil {
			t.Fatal(err)
		}
		if h := health("batch", ledger.HealthOptions{}); h.Health != ledger.HealthUp || h.Succeeded != 1 {
			t.Fatalf("recovered: %+v", h)
		}
		if h := health("batch", ledger.HealthOptions{RecoverAfter: 2}); h.Health != ledger.HealthFailing || h.Succeeded != 1 {
			t.Fatalf("not recovered with RecoverAfter 2: %+v", h)
		}
		if _, _, err := l.Health(ctx, "", ledger.HealthOptions{FailAfter: -1}); err == nil {
			t.Fatal("a negative FailAfter was accepted")
		}

		// A schedule with a long grace: its next occurrence, unclaimed, is
		// late, not missed.
		const period = time.Second
		res, err := l.Run(ctx, "tick", ledger.Every(period).Grace(time.Hour), ok)
		if err != nil || !res.Ran {
			t.Fatalf("%+v, %v", res, err)
		}
		claimed, err := time.Parse(ledger.TimeFormat, res.Occurrence)
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(ctx, t, "the next occurrence's time", func() bool { return dbNow(t, e).Sub(claimed) > period })
		h := health("tick", ledger.HealthOptions{})
		if h.Health != ledger.HealthLate || h.Late == nil || !h.Late.At.After(claimed) || h.Missed != 0 {
			t.Fatalf("late: %+v (claimed %v)", h, claimed)
		}
		late, err := l.Late(ctx, "tick", 0)
		if err != nil || len(late) != 1 || late[0].Occurrence != h.Late.Occurrence {
			t.Fatalf("Late: %+v, %v", late, err)
		}
		// With a grace shorter than a period, the same occurrences are
		// missed once it passed, and none is late then.
		testutil.Eventually(ctx, t, "missed past a 1ms grace", func() bool {
			h = health("tick", ledger.HealthOptions{Grace: time.Millisecond})
			return h.Health == ledger.HealthMissed
		})
		if h.Missed == 0 || h.LastMissed.IsZero() {
			t.Fatalf("missed: %+v", h)
		}
		// An occurrence run since (once the missed one is due no more):
		// missed occurrences before it are history, not the job's state.
		lastMissed := h.LastMissed
		testutil.Eventually(ctx, t, "the missed occurrence past due", func() bool { return dbNow(t, e).Sub(lastMissed) > 2*period })
		testutil.Eventually(ctx, t, "up after a run", func() bool {
			if _, err := l.Run(ctx, "tick", ledger.Every(period).Grace(time.Hour), ok); err != nil {
				t.Fatal(err)
			}
			h = health("tick", ledger.HealthOptions{Grace: time.Millisecond})
			return h.Health == ledger.HealthUp && h.Missed > 0
		})
		// Paused: neither late nor missed counts.
		if _, err := l.Pause(ctx, "tick"); err != nil {
			t.Fatal(err)
		}
		if h := health("tick", ledger.HealthOptions{}); h.Health != ledger.HealthPaused {
			t.Fatalf("paused: %+v", h)
		}

		// A job with no finished attempt is new. Its occurrences are 40
		// minutes ago (past half-way to the next: not due any more) and in
		// 20 minutes (not within Early).
		phase := time.Duration(dbNow(t, e).UnixMicro()%time.Hour.Microseconds())*time.Microsecond + 20*time.Minute
		if res, err := l.Run(ctx, "later", ledger.Every(time.Hour).Phase(phase%time.Hour), ok); err != nil || res.Ran {
			t.Fatalf("Run with nothing due: %+v, %v", res, err)
		}
		if h := health("later", ledger.HealthOptions{}); h.Health != ledger.HealthNew {
			t.Fatalf("new: %+v", h)
		}
	})
}

// healthSeen records the healths told to a HealthObserver.
type healthSeen struct{ seen chan ledger.JobHealth }

func (o healthSeen) JobHealth(_ context.Context, h ledger.JobHealth) { o.seen <- h }

func TestHealthObserver(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		obs := healthSeen{make(chan ledger.JobHealth, 1)}
		l := e.ledger(t, ledger.Options{Observer: obs})
		if _, err := l.Run(ctx, "once", ledger.Key("k"), ok); err != nil {
			t.Fatal(err)
		}
		if _, _, err := l.Health(ctx, "", ledger.HealthOptions{}); err != nil {
			t.Fatal(err)
		}
		if h := <-obs.seen; h.Job != "once" || h.Health != ledger.HealthUp || h.Succeeded != 1 {
			t.Fatalf("observed %+v", h)
		}
	})
}
