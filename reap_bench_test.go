package sqllock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
)

// BenchmarkReaper deletes 1 000 000 released lock rows with one Reaper pass
// (batches of 1 000) while 4 clients keep acquiring and releasing other
// names, and compares the clients' p99 during the pass with their p99 just
// before it. Reports rows/s, p99-ms (during) and p99-before-ms. Run once:
//
//	go test -run '^$' -bench Reaper -benchtime 1x .
func BenchmarkReaper(b *testing.B) {
	const rows = 1_000_000
	ds := benchDialects(b)
	ctx := context.Background()
	for _, kind := range []string{"postgres", "mysql"} {
		b.Run(fmt.Sprintf("%s/rows=%d", kind, rows), func(b *testing.B) {
			d := ds[kind]
			conn, err := d.DB().Conn(ctx)
			if err != nil {
				b.Fatal(err)
			}
			var fill string
			switch kind {
			case "postgres":
				schema := d.(interface{ Schema() string }).Schema()
				fill = fmt.Sprintf(`INSERT INTO "%[1]s".sqllock_locks (name, owner, token, holds, acquired_at, expires_at)
SELECT 'reap-' || g, 'gone', nextval('"%[1]s".sqllock_token_seq'), 0, now(), '-infinity' FROM generate_series(1, %[2]d) g`, schema, rows)
			case "mysql":
				db := d.(interface{ Database() string }).Database()
				// MariaDB and MySQL bound recursion under different names.
				_, _ = conn.ExecContext(ctx, "SET SESSION max_recursive_iterations = 2000000")
				_, _ = conn.ExecContext(ctx, "SET SESSION cte_max_recursion_depth = 2000000")
				fill = fmt.Sprintf("INSERT INTO `%s`.sqllock_locks (name, owner, token, holds, acquired_at, expires_at) "+
					"SELECT CONCAT('reap-', n), 'gone', n, 0, UTC_TIMESTAMP(6), '1000-01-01' FROM "+
					"(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < %d) SELECT n FROM s) x", db, rows)
			}
			for range b.N {
				if _, err := conn.ExecContext(ctx, fill); err != nil {
					b.Fatal(err)
				}
			}
			conn.Close()
			l, err := sqllock.NewTable(d, sqllock.Options{})
			if err != nil {
				b.Fatal(err)
			}
			r, err := sqllock.NewReaper(d, sqllock.ReaperOptions{BatchSize: 1000})
			if err != nil {
				b.Fatal(err)
			}
			// measure runs 4 clients until stop closes and returns their
			// latencies.
			measure := func(stop <-chan struct{}) []time.Duration {
				var (
					mu  sync.Mutex
					lat []time.Duration
					wg  sync.WaitGroup
				)
				for c := range 4 {
					wg.Go(func() {
						name := fmt.Sprintf("client-%d", c)
						for {
							select {
							case <-stop:
								return
							default:
							}
							start := time.Now()
							k, err := l.TryAcquire(ctx, name)
							if err == nil {
								err = k.Release(ctx)
							}
							if err != nil {
								b.Error(err)
								return
							}
							mu.Lock()
							lat = append(lat, time.Since(start))
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				slices.Sort(lat)
				return lat
			}
			stop := make(chan struct{})
			time.AfterFunc(2*time.Second, func() { close(stop) }) // the baseline window
			before := measure(stop)
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
		})
	}
}
