// Command nightly shows the lock-table strategy at work: five replicas,
// each with its own connection pool, start the nightly job at the same moment
// and exactly one runs it; then all five queue for it and run one after
// another, each with a larger fencing token, writing through guarded
// transactions.
//
//	go run ./examples/nightly                                      # PostgreSQL at 127.0.0.1:5432
//	go run ./examples/nightly -dsn 'mysql://root@127.0.0.1:3306/test'
//	go run ./examples/nightly -dsn 'root@tcp(127.0.0.1:3306)/test'   # go-sql-driver/mysql's form
//
// It reads $SQLLOCK_DSN or -dsn in the forms the sqllock command accepts
// (see "sqllock help").
//
// It keeps its tables in a schema (PostgreSQL) or database (MySQL) named
// sqllock_demo.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	sqllockdsn "github.com/sqllock/sqllock/dsn"
)

func main() {
	dsn := flag.String("dsn", envOr("SQLLOCK_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		"postgres://..., host=..., mysql://user:pass@host:port/db or user:pass@tcp(host:port)/db")
	replicas := flag.Int("replicas", 5, "number of competing replicas")
	flag.Parse()
	if err := run(*dsn, *replicas); err != nil {
		fmt.Fprintln(os.Stderr, "nightly:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// replica is one process of the service: its own pool and locker.
type replica struct {
	name   string
	db     *sql.DB
	d      dialect.Dialect
	locker *sqllock.Table
}

func open(dsn, name string) (*replica, error) {
	// The same DSN forms as the sqllock command: URLs and the drivers' own.
	cfg, err := sqllockdsn.Parse(dsn)
	if err != nil {
		return nil, err
	}
	if cfg.Driver == "sqlite" {
		return nil, fmt.Errorf("%s: the replicas of this example need a server (PostgreSQL or MySQL)", cfg)
	}
	r := &replica{name: name}
	if r.db, r.d, err = cfg.Open("sqllock_demo"); err != nil {
		return nil, err
	}
	r.locker, err = sqllock.NewTable(r.d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 5 * time.Second}})
	return r, err
}

// close stops what the replica's dialect runs in the background
// (PostgreSQL's listening connection) and closes its pool.
func (r *replica) close() {
	if c, ok := r.d.(interface{ Close(context.Context) error }); ok {
		_ = c.Close(context.Background())
	}
	r.db.Close()
}

func run(dsn string, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs := make([]*replica, n)
	for i := range rs {
		r, err := open(dsn, fmt.Sprintf("replica-%d", i+1))
		if err != nil {
			return err
		}
		defer r.close()
		rs[i] = r
	}
	if err := sqllock.Migrate(ctx, rs[0].d); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Printf("%d replicas, lock table on %s\n\n", n, rs[0].d.Name())

	fmt.Println("1. All replicas start the nightly job at once (TryAcquire):")
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Go(func() {
			lock, err := r.locker.TryAcquire(ctx, "job:nightly-report")
			switch {
			case errors.Is(err, sqllock.ErrLocked):
				fmt.Printf("   %s: skipped, another replica runs it\n", r.name)
			case err != nil:
				fmt.Printf("   %s: error: %v\n", r.name, err)
			default:
				fmt.Printf("   %s: runs the job (token %d)\n", r.name, lock.Token())
				time.Sleep(200 * time.Millisecond) // the job
				if err := lock.Release(ctx); err != nil {
					fmt.Printf("   %s: release: %v\n", r.name, err)
				}
			}
		})
	}
	wg.Wait()

	fmt.Println("\n2. Each replica waits its turn (Acquire) and works inside a guarded transaction:")
	start := time.Now()
	for _, r := range rs {
		wg.Go(func() {
			if err := compact(ctx, r, start); err != nil {
				fmt.Printf("   %s: %v\n", r.name, err)
			}
		})
	}
	wg.Wait()

	reaper, err := sqllock.NewReaper(rs[0].d, sqllock.ReaperOptions{})
	if err != nil {
		return err
	}
	deleted, err := reaper.Reap(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("\n3. The reaper removed %d released rows; tokens keep growing regardless.\n", deleted)
	return nil
}

// compact waits for the compaction lock and does its work in a transaction
// that commits only while the lock is held.
func compact(ctx context.Context, r *replica, start time.Time) error {
	lock, err := r.locker.Acquire(ctx, "job:compaction")
	if err != nil {
		return err
	}
	defer lock.Release(context.WithoutCancel(ctx))
	tx, err := r.db.BeginTx(lock.Context(), nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := lock.Guard(ctx, tx); err != nil {
		return err
	}
	fmt.Printf("   %6.1fms %s holds it, token %d\n", float64(time.Since(start).Microseconds())/1000, r.name, lock.Token())
	time.Sleep(50 * time.Millisecond) // the work, inside the guarded transaction
	return tx.Commit()
}
