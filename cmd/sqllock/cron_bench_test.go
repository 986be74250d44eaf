package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/ledger"
)

// statementCounter counts the statements pgx sends (a pgx.QueryTracer).
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// BenchmarkCronIdle measures the load that idle `sqllock cron` replicas
// put on PostgreSQL: 5 replicas of a table of 100 entries, none due while
// measured (each job known to the ledger, so that every poll reads 100
// rows), with the default --poll: each poll reads the jobs and the
// database's time (2 statements), each 30th the time once more. It reports the statements per second of
// all five together (stmts/s) and per replica (stmts/s/replica), counted
// by a pgx tracer on each replica's pool.
func BenchmarkCronIdle(b *testing.B) {
	const (
		replicas = 5
		entries  = 100
		window   = 10 * time.Second
	)
	db, schema := dbtest.Postgres(b)
	plain, err := postgres.New(db, postgres.WithSchema(schema))
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	if err := sqllock.Migrate(ctx, plain); err != nil {
		b.Fatal(err)
	}
	// Every job known to the ledger, a daily schedule far from now (the
	// hour opposite the current one).
	l, err := ledger.New(plain, ledger.Options{})
	if err != nil {
		b.Fatal(err)
	}
	hour := (time.Now().UTC().Hour() + 12) % 24
	var file strings.Builder
	for i := range entries {
		job := fmt.Sprintf("job%03d", i)
		if _, err := l.Run(ctx, job, ledger.Key("seed"), func(context.Context, *ledger.Run) error { return nil }); err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(&file, "# sqllock: name=%s\n%d %d * * * /bin/true\n", job, i%60, hour)
	}
	table, err := parseCrontab("bench", strings.NewReader(file.String()))
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(dbtest.PostgresURL(b))
	if err != nil {
		b.Fatal(err)
	}
	var counter statementCounter
	cfg.ConnConfig.Tracer = &counter
	for b.Loop() {
		counter.n.Store(0)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, replicas)
		for range replicas {
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			d, err := postgres.NewFromPool(pool, postgres.WithSchema(schema))
			if err != nil {
				b.Fatal(err)
			}
			daemon := newCronDaemon("bench", "pause", 30*time.Second, 10*time.Second, 2*time.Second, false)
			go func() {
				err := daemon.serve(rctx, &target{d: d}, table, nil)
				_ = d.Close(context.Background())
				pool.Close()
				done <- err
			}()
		}
		// Measured after the replicas' start (one reading of the
		// database's clock each).
		time.Sleep(time.Second)
		start, from := counter.n.Load(), time.Now()
		time.Sleep(window)
		n, elapsed := counter.n.Load()-start, time.Since(from)
		cancel()
		for range replicas {
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
		rate := float64(n) / elapsed.Seconds()
		b.ReportMetric(rate, "stmts/s")
		b.ReportMetric(rate/replicas, "stmts/s/replica")
	}
}
