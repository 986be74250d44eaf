package sqllockotel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/ledger"
	"github.com/sqllock/sqllock/sqllockotel"
)

// The run ledger's events, read back through the SDK: runs by job and
// state, calls that ran nothing, a takeover of an attempt whose lease was
// deleted behind its runner, and the gauge of missed occurrences, which
// falls back to 0 once the job has none.
func TestLedgerMetrics(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ledgerMetrics(t, openDB(t, kind))
		})
	}
}

func ledgerMetrics(t *testing.T, e *db) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := sqllockotel.New(sqllockotel.Options{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	m := &metrics{t: t, r: reader}
	l, err := ledger.New(e.d, ledger.Options{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}

	ok := func(context.Context, *ledger.Run) error { return nil }
	if _, err := l.Run(ctx, "report", ledger.Key("k1"), ok); err != nil {
		t.Fatal(err)
	}
	if res, err := l.Run(ctx, "report", ledger.Key("k1"), ok); err != nil || res.Ran {
		t.Fatalf("second run of a done occurrence: %+v, %v", res, err)
	}
	boom := errors.New("boom")
	if _, err := l.Run(ctx, "report", ledger.Key("k2"), func(context.Context, *ledger.Run) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("failing run: %v", err)
	}
	m.collect()
	reportJob := sqllockotel.KeyJob.String("report")
	for st, want := range map[ledger.State]int64{ledger.StateSucceeded: 1, ledger.StateFailed: 1} {
		if got := m.int("sqllock.runs", reportJob, sqllockotel.KeyState.String(string(st))); got != want {
			t.Errorf("sqllock.runs{%s} = %d, want %d", st, got, want)
		}
	}
	if got := m.int("sqllock.runs.skipped", reportJob, sqllockotel.KeyState.String(string(ledger.StateSucceeded))); got != 1 {
		t.Errorf("sqllock.runs.skipped{succeeded} = %d, want 1", got)
	}

	// A runner whose lease row is deleted behind it: the next run of the
	// occurrence takes it over.
	started, stop := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := l.Run(ctx, "nightly", ledger.Key("k"), func(ctx context.Context, _ *ledger.Run) error {
			close(started)
			<-stop
			return nil
		})
		first <- err
	}()
	<-started
	if _, err := e.sql.ExecContext(ctx, "DELETE FROM "+e.locks); err != nil {
		t.Fatal(err)
	}
	res, err := l.Run(ctx, "nightly", ledger.Key("k"), ok)
	close(stop)
	if err != nil || !res.Ran || res.Attempt != 2 {
		t.Fatalf("takeover: %+v, %v", res, err)
	}
	if err := <-first; !errors.Is(err, sqllock.ErrLockLost) {
		t.Errorf("the runner taken over: %v, want its outcome refused with ErrLockLost", err)
	}
	nightly := sqllockotel.KeyJob.String("nightly")
	m.collect()
	if got := m.int("sqllock.run.takeovers", nightly); got != 1 {
		t.Errorf("sqllock.run.takeovers = %d, want 1", got)
	}
	if got := m.int("sqllock.runs", nightly, sqllockotel.KeyState.String(string(ledger.StateAbandoned))); got != 1 {
		t.Errorf("sqllock.runs{abandoned} = %d, want 1", got)
	}

	// A job run every second once, then left alone: its later
	// occurrences are missed; checked with a tiny grace.
	tick := sqllockotel.KeyJob.String("tick")
	if _, err := l.Run(ctx, "tick", ledger.Every(time.Second), ok); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Missed(ctx, "tick", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, found := m.collect().find("sqllock.runs.missed"); !found || m.int("sqllock.runs.missed", tick) != 0 {
		t.Fatalf("sqllock.runs.missed after a check that found nothing missed: found %v, %d; want 0", found, m.int("sqllock.runs.missed", tick))
	}
	testutil.Eventually(ctx, t, "a missed occurrence", func() bool {
		if _, err := l.Missed(ctx, "tick", time.Microsecond); err != nil {
			t.Fatal(err)
		}
		return m.collect().int("sqllock.runs.missed", tick) > 0
	})
	if _, err := l.Missed(ctx, "tick", time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := m.collect().int("sqllock.runs.missed", tick); got != 0 {
		t.Errorf("sqllock.runs.missed = %d after a check that found none, want 0", got)
	}

	// Health: "report" failing after three failures in a row, the last
	// one timed out; recovered after a success.
	if _, err := l.Run(ctx, "report", ledger.Key("k3"), func(context.Context, *ledger.Run) error { return boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if _, err := l.Run(ctx, "report", ledger.Key("k4"), func(context.Context, *ledger.Run) error {
		return fmt.Errorf("%w: stopped", ledger.ErrTimedOut)
	}); !errors.Is(err, ledger.ErrTimedOut) {
		t.Fatal(err)
	}
	if _, _, err := l.Health(ctx, "report", ledger.HealthOptions{}); err != nil {
		t.Fatal(err)
	}
	m.collect()
	if streak, failing, late, timedOut := m.int("sqllock.runs.failing_streak", reportJob), m.int("sqllock.runs.failing", reportJob),
		m.int("sqllock.runs.late", reportJob), m.int("sqllock.runs.timed_out", reportJob); streak != 3 || failing != 1 || late != 0 || timedOut != 1 {
		t.Errorf("failing_streak %d, failing %d, late %d, timed_out %d; want 3, 1, 0, 1", streak, failing, late, timedOut)
	}
	if _, err := l.Run(ctx, "report", ledger.Key("k5"), ok); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Health(ctx, "report", ledger.HealthOptions{}); err != nil {
		t.Fatal(err)
	}
	if streak, failing := m.collect().int("sqllock.runs.failing_streak", reportJob), m.int("sqllock.runs.failing", reportJob); streak != 0 || failing != 0 {
		t.Errorf("after a success: failing_streak %d, failing %d; want 0, 0", streak, failing)
	}
}
