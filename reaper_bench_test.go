package sqllock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

// reapBenchTable is a table the reaper cleans, with the statements that fill
// it with n rows nobody needs, and the strategy whose clients run beside
// the reaper.
type reapBenchTable struct {
	name string
	// fill returns the statement inserting n released rows named reap-1 to
	// reap-n into the table in schema (or database) ns.
	fill   map[string]func(ns string, n int) string
	locker func(d dialect.Dialect) (sqllock.Locker, error)
}

// mysqlSeries selects n rows numbered n from 1 on MySQL and MariaDB.
func mysqlSeries(n int) string {
	return fmt.Sprintf("(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < %d) SELECT n FROM s) x", n)
}

var reapBenchTables = []reapBenchTable{
	{
		name: "locks",
		fill: map[string]func(string, int) string{
			"postgres": func(ns string, n int) string {
				return fmt.Sprintf(`INSERT INTO "%[1]s".sqllock_locks (name, owner, token, holds, acquired_at, expires_at)
SELECT 'reap-' || g, 'gone', nextval('"%[1]s".sqllock_token_seq'), 0, now(), '-infinity' FROM generate_series(1, %[2]d) g`, ns, n)
			},
			"mysql": func(ns string, n int) string {
				return fmt.Sprintf("INSERT INTO `%s`.sqllock_locks (name, owner, token, holds, acquired_at, expires_at) "+
					"SELECT CONCAT('reap-', n), 'gone', n, 0, UTC_TIMESTAMP(6), '1000-01-01' FROM %s", ns, mysqlSeries(n))
			},
		},
		locker: func(d dialect.Dialect) (sqllock.Locker, error) { return sqllock.NewTable(d, sqllock.TableOptions{}) },
	},
	{
		name: "versions",
		fill: map[string]func(string, int) string{
			"postgres": func(ns string, n int) string {
				return fmt.Sprintf(`INSERT INTO "%s".sqllock_versions (name, owner, version, holds, acquired_at, expires_at)
SELECT 'reap-' || g, 'gone', g, 0, now(), '-infinity' FROM generate_series(1, %d) g`, ns, n)
			},
			"mysql": func(ns string, n int) string {
				return fmt.Sprintf("INSERT INTO `%s`.sqllock_versions (name, owner, version, holds, acquired_at, expires_at) "+
					"SELECT CONCAT('reap-', n), 'gone', n, 0, UTC_TIMESTAMP(6), '1000-01-01' FROM %s", ns, mysqlSeries(n))
			},
		},
		locker: func(d dialect.Dialect) (sqllock.Locker, error) {
			return sqllock.NewOptimistic(d, sqllock.OptimisticOptions{})
		},
	},
	{
		name: "rowlocks",
		fill: map[string]func(string, int) string{
			"postgres": func(ns string, n int) string {
				return fmt.Sprintf(`INSERT INTO "%s".sqllock_rowlocks (name) SELECT 'reap-' || g FROM generate_series(1, %d) g`, ns, n)
			},
			"mysql": func(ns string, n int) string {
				return fmt.Sprintf("INSERT INTO `%s`.sqllock_rowlocks (name) SELECT CONCAT('reap-', n) FROM %s", ns, mysqlSeries(n))
			},
		},
		locker: func(d dialect.Dialect) (sqllock.Locker, error) {
			return sqllock.NewPessimistic(d, sqllock.PessimisticOptions{})
		},
	},
}

// BenchmarkReaper deletes 1 000 000 rows nobody needs from each table the
// reaper cleans (released rows of the lock table and of the version table,
// unlocked rows of the row-lock table) with one Reaper pass (batches of
// 1 000), while 4 clients of the table's strategy keep acquiring and
// releasing other names, and compares the clients' p99 during the pass
// with their p99 just before it. Reports rows/s, p99-ms (during),
// p99-before-ms, and refused/op: the clients' TryAcquire calls refused
// during the pass per acquisition (a pessimistic TryAcquire meeting the
// reaper on its own idle row is refused). Run once:
//
//	go test -run '^$' -bench Reaper -benchtime 1x .
func BenchmarkReaper(b *testing.B) {
	const rows = 1_000_000
	ds := benchDialects(b)
	ctx := context.Background()
	for _, kind := range []string{"postgres", "mysql"} {
		for _, tb := range reapBenchTables {
			b.Run(fmt.Sprintf("%s/%s/rows=%d", kind, tb.name, rows), func(b *testing.B) {
				d := ds[kind]
				conn, err := d.DB().Conn(ctx)
				if err != nil {
					b.Fatal(err)
				}
				var ns string
				switch kind {
				case "postgres":
					ns = d.(interface{ Schema() string }).Schema()
				case "mysql":
					ns = d.(interface{ Database() string }).Database()
					// MariaDB and MySQL bound recursion under different names.
					_, _ = conn.ExecContext(ctx, "SET SESSION max_recursive_iterations = 2000000")
					_, _ = conn.ExecContext(ctx, "SET SESSION cte_max_recursion_depth = 2000000")
				}
				for range b.N {
					if _, err := conn.ExecContext(ctx, tb.fill[kind](ns, rows)); err != nil {
						b.Fatal(err)
					}
				}
				// Statistics as the server's background analysis soon has
				// them, so that the plans are those of a large table.
				analyze := fmt.Sprintf(`ANALYZE "%s".sqllock_%s`, ns, tb.name)
				if kind == "mysql" {
					analyze = fmt.Sprintf("ANALYZE TABLE `%s`.sqllock_%s", ns, tb.name)
				}
				if _, err := conn.ExecContext(ctx, analyze); err != nil {
					b.Fatal(err)
				}
				conn.Close()
				l, err := tb.locker(d)
				if err != nil {
					b.Fatal(err)
				}
				r, err := sqllock.NewReaper(d, sqllock.ReaperOptions{BatchSize: 1000})
				if err != nil {
					b.Fatal(err)
				}
				var refused atomic.Int64
				// measure runs 4 clients until stop closes and returns their
				// latencies.
				measure := func(stop <-chan struct{}) []time.Duration { return cycles(b, l, 4, stop, &refused) }
				stop := make(chan struct{})
				time.AfterFunc(2*time.Second, func() { close(stop) }) // the baseline window
				before := measure(stop)
				if n := refused.Swap(0); n != 0 {
					b.Fatalf("%d refusals without a reaper", n)
				}
				b.ResetTimer()
				stop = make(chan struct{})
				during := make(chan []time.Duration, 1)
				go func() { during <- measure(stop) }()
				start := time.Now()
				var deleted int
				for range b.N {
					n, err := r.Reap(ctx)
					if err != nil {
						b.Fatal(err)
					}
					deleted += n
				}
				took := time.Since(start)
				close(stop)
				lat := <-during
				if deleted < rows*b.N {
					b.Fatalf("reaped %d rows, want %d", deleted, rows*b.N)
				}
				b.ReportMetric(float64(deleted)/took.Seconds(), "rows/s")
				b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
				b.ReportMetric(ms(before[len(before)*99/100]), "p99-before-ms")
				b.ReportMetric(float64(refused.Load())/float64(len(lat)), "refused/op")
			})
		}
	}
}
