package main

import (
	"context"
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
	db, schema := dbtest.Postgres(t)
	d, err := postgres.New(db, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	addr := make(chan string, 1)
	c := config{addr: "127.0.0.1:0", workers: 4, locks: 1, hold: 20 * time.Millisecond,
		ready: func(a string) { addr <- a }}
	done := make(chan error, 1)
	go func() { done <- run(ctx, c, d) }()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a + "/metrics"
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
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
		resp, err := http.Get(url)
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
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	if err := d.Close(cctx); err != nil {
		t.Fatal(err)
	}
}
