package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/rowlock"
	"github.com/sqllock/sqllock/tests/benchtest"
)

// BenchmarkOptimisticUpdate measures RetryOnConflict with a read and a
// version-checked UPDATE of users' rows:
//
//   - hot-row/writers=N: N writers increment one row. Reports
//     conflicts/update (failed version checks per successful update) and
//     updates/s.
//   - distinct-rows/writers=N: each writer has its own row, so nothing
//     conflicts; the same read and UPDATE issued raw run interleaved in the
//     same run. Reports helper-ns/op, raw-ns/op and ratio = raw time /
//     helper time.
//
// Run:
//
//	go test -run '^$' -bench OptimisticUpdate -benchtime 2000x .
func BenchmarkOptimisticUpdate(b *testing.B) {
	for _, kind := range []string{"postgres", "mysql", "sqlite"} {
		var (
			db    *sql.DB
			table string
			ph    func(i int) string
		)
		switch kind {
		case "postgres":
			var schema string
			db, schema = dbtest.Postgres(b)
			table = `"` + schema + `".counters`
			ph = func(i int) string { return "$" + strconv.Itoa(i) }
		case "mysql":
			var database string
			db, database = dbtest.MySQL(b)
			table = "`" + database + "`.counters"
			ph = func(int) string { return "?" }
		case "sqlite":
			db, _ = openSQLite(b)
			table = "counters"
			ph = func(int) string { return "?" }
		}
		ctx := context.Background()
		if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (id INT PRIMARY KEY, n BIGINT NOT NULL, version BIGINT NOT NULL)"); err != nil {
			b.Fatal(err)
		}
		for id := range 33 {
			if _, err := db.ExecContext(ctx, "INSERT INTO "+table+" VALUES ("+strconv.Itoa(id)+", 0, 1)"); err != nil {
				b.Fatal(err)
			}
		}
		read := "SELECT n, version FROM " + table + " WHERE id = " + ph(1)
		write := "UPDATE " + table + " SET n = " + ph(1) + ", version = version + 1 WHERE id = " + ph(2) + " AND version = " + ph(3)
		var calls atomic.Int64
		attempt := func(ctx context.Context, id int) error {
			calls.Add(1)
			var n, version int64
			if err := db.QueryRowContext(ctx, read, id).Scan(&n, &version); err != nil {
				return err
			}
			return rowlock.CheckUpdate(db.ExecContext(ctx, write, n+1, id, version))
		}
		helper := func(id int) error {
			return rowlock.RetryOnConflict(ctx, rowlock.RetryOptions{Attempts: 10000}, func(ctx context.Context) error {
				return attempt(ctx, id)
			})
		}
		raw := func(id int) error {
			var n, version int64
			if err := db.QueryRowContext(ctx, read, id).Scan(&n, &version); err != nil {
				return err
			}
			res, err := db.ExecContext(ctx, write, n+1, id, version)
			if err != nil {
				return err
			}
			if k, err := res.RowsAffected(); err != nil || k != 1 {
				return fmt.Errorf("raw update on a private row: %d rows, %v", k, err)
			}
			return nil
		}
		for _, writers := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("%s/hot-row/writers=%d", kind, writers), func(b *testing.B) {
				db.SetMaxIdleConns(writers + 2)
				calls.Store(0)
				took := runWriters(b, b.N, writers, func(int) error { return helper(0) })
				b.ReportMetric(float64(calls.Load()-int64(b.N))/float64(b.N), "conflicts/update")
				b.ReportMetric(float64(b.N)/took.Seconds(), "updates/s")
			})
		}
		for _, writers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/distinct-rows/writers=%d", kind, writers), func(b *testing.B) {
				db.SetMaxIdleConns(writers + 2)
				calls.Store(0)
				var tHelper, tRaw time.Duration
				for left := b.N; left > 0; left -= benchtest.Chunk {
					c := min(left, benchtest.Chunk)
					tRaw += runWriters(b, c, writers, func(w int) error { return raw(w + 1) })
					tHelper += runWriters(b, c, writers, func(w int) error { return helper(w + 1) })
				}
				if calls.Load() != int64(b.N) {
					b.Fatalf("%d attempts for %d updates of private rows", calls.Load(), b.N)
				}
				b.ReportMetric(float64(tHelper.Nanoseconds())/float64(b.N), "helper-ns/op")
				b.ReportMetric(float64(tRaw.Nanoseconds())/float64(b.N), "raw-ns/op")
				b.ReportMetric(tRaw.Seconds()/tHelper.Seconds(), "ratio")
			})
		}
		var total int64
		if err := db.QueryRowContext(ctx, "SELECT sum(n) FROM "+table).Scan(&total); err != nil {
			b.Fatal(err)
		}
		if want := successes.Swap(0); total != want {
			b.Fatalf("%s: counters sum to %d after %d successful updates: lost or doubled", kind, total, want)
		}
	}
}

// successes counts the updates runWriters saw succeed, to check against the
// rows afterwards.
var successes atomic.Int64

// runWriters runs op n times in total across writers goroutines (op gets the
// writer's index) and returns the elapsed time.
func runWriters(b *testing.B, n, writers int, op func(w int) error) time.Duration {
	var (
		next atomic.Int64
		errs = make(chan error, writers)
	)
	start := time.Now()
	done := make(chan struct{})
	for w := range writers {
		go func() {
			defer func() { done <- struct{}{} }()
			for next.Add(1) <= int64(n) {
				if err := op(w); err != nil {
					errs <- err
					return
				}
				successes.Add(1)
			}
		}()
	}
	for range writers {
		<-done
	}
	took := time.Since(start)
	close(errs)
	for err := range errs {
		if errors.Is(err, rowlock.ErrConflict) {
			b.Fatalf("gave up: %v", err)
		}
		b.Fatal(err)
	}
	return took
}
