package main

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/testutil"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Finish(m.Run())) }

// The example serves sqllock's metrics in the Prometheus text format, with
// the names the README lists, while its workers contend.
func TestServesMetrics(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e := startExample(ctx, t, config{workers: 4, locks: 1, hold: 20 * time.Millisecond})
	want := []string{
		"sqllock_acquire_calls_total",
		"sqllock_acquire_duration_seconds_bucket",
		"sqllock_lock_held_seconds_bucket",
		"sqllock_handoff_latency_seconds_bucket",
		"sqllock_locks_held",
		"sqllock_waiters",
		"sqllock_reaper_deleted_total",
		"sqllock_reaper_duration_seconds_bucket",
	}
	var body string
	testutil.Eventually(ctx, t, "every metric scraped", func() bool {
		resp, err := http.Get(e.url)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		body = string(b)
		for _, m := range want {
			if !strings.Contains(body, "\n"+m+"{") {
				return false
			}
		}
		return true
	})
	if !strings.Contains(body, `sqllock_strategy="table"`) || !strings.Contains(body, `sqllock_dialect="postgres"`) {
		t.Errorf("metrics lack the strategy and dialect labels:\n%s", body)
	}
	e.stop(t)
}

// example is a run of the example on a PostgreSQL schema of the test's own.
type example struct {
	db     *sql.DB // the test server's pool
	schema string
	url    string // of the metrics it serves
	d      *postgres.Dialect
	cancel context.CancelFunc
	done   chan error // run's result
}

// startExample runs the example with c, on a free port of the loopback,
// until ctx ends or stop is called; it fails t if the run ends before it
// serves its metrics.
func startExample(ctx context.Context, t *testing.T, c config) *example {
	t.Helper()
	db, schema := dbtest.Postgres(t)
	d, err := postgres.New(db, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	e := &example{db: db, schema: schema, d: d, cancel: cancel, done: make(chan error, 1)}
	addr := make(chan string, 1)
	c.addr = "127.0.0.1:0"
	c.ready = func(a string) { addr <- a }
	go func() { e.done <- run(ctx, c, d) }()
	select {
	case a := <-addr:
		e.url = "http://" + a + "/metrics"
	case err := <-e.done:
		cancel()
		t.Fatalf("run: %v", err)
	}
	return e
}

// stop ends the run and closes its dialect, failing t if either fails.
func (e *example) stop(t *testing.T) {
	t.Helper()
	e.cancel()
	if err := <-e.done; err != nil {
		t.Fatalf("run: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.d.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
