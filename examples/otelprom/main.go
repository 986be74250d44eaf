// Command otelprom exposes sqllock's metrics to Prometheus through the
// OpenTelemetry Prometheus exporter, while a few workers contend for a
// handful of locks, a reaper cleans up behind them, and two replicas run a
// job once per second through the run ledger, checking its health (missed
// and late occurrences, failing streak).
//
//	go run ./examples/otelprom                                   # PostgreSQL at 127.0.0.1:5432
//	go run ./examples/otelprom -dsn 'mysql://root@tcp(127.0.0.1:3306)/test'
//	curl -s http://127.0.0.1:9464/metrics | grep '^sqllock_'
//
// It keeps its tables in a schema (PostgreSQL) or database (MySQL) named
// sqllock_demo, and runs until interrupted (or for -for).
// docs/observability.md lists the metrics and what an alert on each means.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/ledger"
	"github.com/sqllock/sqllock/sqllockotel"
)

// config is what one run needs.
type config struct {
	dsn     string        // for main
	addr    string        // where /metrics is served
	workers int           // goroutines contending for the locks
	locks   int           // distinct lock names
	hold    time.Duration // the longest a worker holds a lock
	ready   func(addr string)
	// breaker, if set, is given the workers' locker once it is made, for a
	// test to break its locks as an operator would.
	breaker func(*sqllock.Table)
}

func main() {
	var c config
	flag.StringVar(&c.dsn, "dsn", envOr("SQLLOCK_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		"postgres://... or mysql://user:pass@tcp(host:port)/db")
	flag.StringVar(&c.addr, "addr", "127.0.0.1:9464", "address to serve /metrics on")
	flag.IntVar(&c.workers, "workers", 8, "goroutines contending for the locks")
	flag.IntVar(&c.locks, "locks", 3, "distinct lock names")
	flag.DurationVar(&c.hold, "hold", 200*time.Millisecond, "the longest a worker holds a lock")
	runFor := flag.Duration("for", 0, "stop after this long (0: until interrupted)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	c.ready = func(addr string) { fmt.Printf("metrics on http://%s/metrics\n", addr) }
	if err := openAndRun(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "otelprom:", err)
		os.Exit(1)
	}
}

func openAndRun(ctx context.Context, c config) error {
	db, d, err := open(c.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if cl, ok := d.(interface{ Close(context.Context) error }); ok {
		defer cl.Close(context.WithoutCancel(ctx))
	}
	return run(ctx, c, d)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// run serves the metrics and runs the workers on d until ctx ends.
func run(ctx context.Context, c config, d dialect.Dialect) error {
	// The exporter is a reader of the SDK's meter provider, registered
	// with a Prometheus registry that the HTTP handler serves.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.WithoutCancel(ctx))
	obs, err := sqllockotel.New(sqllockotel.Options{MeterProvider: mp})
	if err != nil {
		return err
	}

	if err := sqllock.Migrate(ctx, d); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	locker, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 3 * time.Second, Observer: obs, Logger: logger}})
	if err != nil {
		return err
	}
	if c.breaker != nil {
		c.breaker(locker)
	}
	reaper, err := sqllock.NewReaper(d, sqllock.ReaperOptions{Interval: 2 * time.Second, Observer: obs, Logger: logger})
	if err != nil {
		return err
	}

	runs, err := ledger.New(d, ledger.Options{TTL: 3 * time.Second, MaxRuntime: 250 * time.Millisecond, Observer: obs, Logger: logger})
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if c.ready != nil {
		c.ready(ln.Addr().String())
	}

	var wg sync.WaitGroup
	wg.Go(func() { _ = reaper.Run(ctx) })
	for range 2 {
		wg.Go(func() { runJob(ctx, runs) })
	}
	wg.Go(func() { checkHealth(ctx, runs) })
	for i := range c.workers {
		wg.Go(func() { work(ctx, locker, i, c) })
	}
	wg.Wait()
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// work acquires a random lock, holds it a random while, releases it, and
// again, until ctx ends. Every fourth call only tries, and gives up when the
// lock is busy.
func work(ctx context.Context, locker *sqllock.Table, i int, c config) {
	for n := 0; ctx.Err() == nil; n++ {
		name := fmt.Sprintf("demo:%d", rand.N(c.locks))
		var (
			lock *sqllock.Lock
			err  error
		)
		if n%4 == 0 {
			lock, err = locker.TryAcquire(ctx, name)
		} else {
			lock, err = locker.Acquire(ctx, name)
		}
		if err != nil {
			if !errors.Is(err, sqllock.ErrLocked) && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "worker %d: %v\n", i, err)
			}
			continue
		}
		select {
		case <-time.After(rand.N(c.hold + 1)): // the work
		case <-lock.Done():
		case <-ctx.Done():
		}
		_ = lock.Release(context.WithoutCancel(ctx))
	}
}

// errJobFailed is the error of the runs of runJob's job that fail.
var errJobFailed = errors.New("the job failed")

// runJob is a replica of a job that runs once per second, whoever runs
// it: it asks the ledger to run the current occurrence every 200 ms, so
// that every occurrence is run once, by one of the replicas, and the other
// calls skip it. One run in four fails; one in six runs past the ledger's
// MaxRuntime, 250 ms, and is recorded timed out.
func runJob(ctx context.Context, runs *ledger.Ledger) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := runs.Run(ctx, "demo:every-second", ledger.Every(time.Second), func(ctx context.Context, r *ledger.Run) error {
			select {
			case <-time.After(rand.N(300 * time.Millisecond)): // the work
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			if rand.N(4) == 0 {
				return errJobFailed
			}
			return nil
		})
		if err != nil && ctx.Err() == nil && !errors.Is(err, errJobFailed) && !errors.Is(err, ledger.ErrTimedOut) {
			fmt.Fprintf(os.Stderr, "demo:every-second: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// checkHealth checks the health of the ledger's jobs every second: each
// check sets the sqllock.runs.missed, .failing_streak, .failing and .late
// gauges of each job.
func checkHealth(ctx context.Context, runs *ledger.Ledger) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if _, _, err := runs.Health(ctx, "", ledger.HealthOptions{}); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "health of the jobs: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// open opens a pool and its dialect, on the sqllock_demo schema or
// database.
func open(dsn string) (*sql.DB, dialect.Dialect, error) {
	var (
		db  *sql.DB
		d   dialect.Dialect
		err error
	)
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		if db, err = sql.Open("pgx", dsn); err == nil {
			d, err = postgres.New(db, postgres.WithSchema("sqllock_demo"))
		}
	case strings.HasPrefix(dsn, "mysql://"):
		if db, err = sql.Open("mysql", strings.TrimPrefix(dsn, "mysql://")); err == nil {
			d, err = mysql.New(db, mysql.WithDatabase("sqllock_demo"))
		}
	default:
		return nil, nil, fmt.Errorf("unsupported DSN %q (want postgres:// or mysql://)", dsn)
	}
	if err != nil {
		if db != nil {
			db.Close()
		}
		return nil, nil, err
	}
	return db, d, nil
}
