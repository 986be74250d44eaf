package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/sqlite"
)

// The console at scale, on SQLite: 100 jobs of 10 000 attempts each and
// 1 000 held locks. Each page's server time (from the latest read, as every
// viewer gets it) and /metrics's, with the p99 of the iterations as
// p99-ms; "read" is one read of the database (the hub's, once per
// --interval whatever the number of viewers).
//
//	go test -run '^$' -bench BenchmarkServe ./sqllock/
func BenchmarkServe(b *testing.B) {
	path := filepath.Join(b.TempDir(), "locks.db")
	db, err := sqlite.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	d, err := sqlite.New(db)
	if err != nil {
		b.Fatal(err)
	}
	tg := &target{db: db, d: d, dsn: "sqlite:" + path, embedded: true}
	defer tg.Close()
	ctx := context.Background()
	if err := sqllock.Migrate(ctx, d); err != nil {
		b.Fatal(err)
	}
	seedScale(b, tg, 100, 10000, 1000)
	c, err := newConsole(tg, "", serveOptions{interval: 1 << 62, attempts: 1000, perJob: 30})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("read", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			start := time.Now()
			c.hub.refresh(ctx)
			ds = append(ds, time.Since(start))
		}
		if s := c.hub.snapshot(); !s.ok() || len(s.Jobs) != 100 || len(s.Locks) != 1000 {
			b.Fatalf("read %d jobs, %d locks (%s)", len(s.Jobs), len(s.Locks), s.Err)
		}
		reportP99(b, ds)
	})
	h := c.handler()
	for _, p := range []string{"/", "/locks", "/elections", "/jobs", "/jobs/job-042", "/api/locks", "/api/runs", "/metrics"} {
		// The first viewer after a read renders the page; the others
		// get its bytes.
		b.Run("first"+p, func(b *testing.B) {
			var ds []time.Duration
			for b.Loop() {
				c.hub.mu.Lock()
				c.hub.pagesSeq = 0
				c.hub.mu.Unlock()
				rec := httptest.NewRecorder()
				start := time.Now()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
				ds = append(ds, time.Since(start))
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s: %d", p, rec.Code)
				}
			}
			reportP99(b, ds)
		})
		b.Run("others"+p, func(b *testing.B) {
			var ds []time.Duration
			for b.Loop() {
				rec := httptest.NewRecorder()
				start := time.Now()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
				ds = append(ds, time.Since(start))
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s: %d", p, rec.Code)
				}
			}
			reportP99(b, ds)
		})
	}
}

// reportP99 reports the 99th percentile of ds in milliseconds.
func reportP99(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, "p99-ms")
}

// seedScale records jobs × attempts finished attempts (one in 17 failed)
// straight in the run ledger's tables, in one statement (the ledger would
// take an hour), and takes locks leases of the lock table.
func seedScale(b *testing.B, tg *target, jobs, attempts, locks int) {
	ctx := context.Background()
	now := time.Now().UnixMicro()
	n := jobs * attempts
	if _, err := tg.db.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ? - 1)
INSERT INTO sqllock_runs (job, occurrence, attempt, state, owner, token, started_at, finished_at, error)
SELECT printf('job-%03d', i % ?), printf('occ-%07d', i / ?), 1,
	CASE WHEN i % 17 = 0 THEN 'failed' ELSE 'succeeded' END, 'bench/' || (i % 7), i + 1,
	? - (? - i) * 60000000, ? - (? - i) * 60000000 + 1500000,
	CASE WHEN i % 17 = 0 THEN 'exit status 1' END
FROM n`, n, jobs, jobs, now, n, now, n); err != nil {
		b.Fatal(err)
	}
	if _, err := tg.db.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ? - 1)
INSERT INTO sqllock_run_jobs (job, period_us, phase_us, grace_us, first_seen, last_seen)
SELECT printf('job-%03d', i), NULL, 0, 0, ?, ? FROM n`, jobs, now-int64(n)*60000000, now); err != nil {
		b.Fatal(err)
	}
	table, err := sqllock.NewTable(tg.d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	for i := range locks {
		l, err := table.TryAcquire(ctx, fmt.Sprintf("lock-%04d", i))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Release(context.Background()) })
	}
}
