package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/tests/benchtest"
)

// The scale curves (issue 49): what a lock costs as the lock table grows,
// the reaper over a large backlog, the client's memory per held lock, and
// a churn soak. scripts/bench-scale.sh (make bench-scale) runs them all;
// SQLLOCK_SCALE_MAX bounds the table sizes for a quick run.

// scaleMax is the largest table the scale benchmarks build: 10^6, or
// SQLLOCK_SCALE_MAX.
func scaleMax(b *testing.B) int {
	return envInt(b, "SQLLOCK_SCALE_MAX", 1_000_000)
}

// envInt is the integer in the environment variable name, or def.
func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// scaleDB is a migrated dialect of kind on a schema, database or SQLite
// file of its own, with the pool and the namespace bulk statements need.
type scaleDB struct {
	kind string
	d    dialect.Dialect
	db   *sql.DB
	ns   string
}

// openScaleDB opens a fresh, migrated scaleDB of kind.
func openScaleDB(b *testing.B, kind string) scaleDB {
	b.Helper()
	var (
		s   = scaleDB{kind: kind}
		err error
	)
	switch kind {
	case "postgres":
		s.db, s.ns = dbtest.Postgres(b)
		s.d, err = postgres.New(s.db, postgres.WithSchema(s.ns))
	case "mysql":
		s.db, s.ns = dbtest.MySQL(b)
		s.d, err = mysql.New(s.db, mysql.WithDatabase(s.ns))
	case "sqlite":
		dbtest.SQLite(b)
		s.db, s.ns = openSQLite(b)
		s.d, err = sqlite.New(s.db)
	}
	if err != nil {
		b.Fatal(err)
	}
	closeAtEnd(b, s.d.(interface{ Close(context.Context) error }))
	if err := sqllock.Migrate(context.Background(), s.d); err != nil {
		b.Fatal(err)
	}
	return s
}

// fillLocks inserts, in one statement, the rows named prefix-from to
// prefix-to into the lock table: live leases of an hour that nobody renews
// (expired false), or leases that ended an hour ago (expired true). Then it
// refreshes the table's statistics, as the server's background analysis
// soon would.
func (s scaleDB) fillLocks(b *testing.B, prefix string, from, to int, expired bool) {
	b.Helper()
	if to < from {
		return
	}
	ctx := context.Background()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	sign := "+"
	if expired {
		sign = "-"
	}
	var q, analyze string
	switch s.kind {
	case "postgres":
		q = fmt.Sprintf(`INSERT INTO "%[1]s".sqllock_locks (name, owner, token, holds, acquired_at, expires_at)
SELECT '%[2]s-' || g, 'scale', nextval('"%[1]s".sqllock_token_seq'), 1, now(), now() %[5]s interval '1 hour'
FROM generate_series(%[3]d, %[4]d) g`, s.ns, prefix, from, to, sign)
		analyze = fmt.Sprintf(`ANALYZE "%s".sqllock_locks`, s.ns)
	case "mysql":
		// MariaDB and MySQL bound recursion under different names.
		_, _ = conn.ExecContext(ctx, "SET SESSION max_recursive_iterations = 2000000")
		_, _ = conn.ExecContext(ctx, "SET SESSION cte_max_recursion_depth = 2000000")
		q = fmt.Sprintf("INSERT INTO `%[1]s`.sqllock_locks (name, owner, token, holds, acquired_at, expires_at) "+
			"SELECT CONCAT('%[2]s-', n), 'scale', n, 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) %[5]s INTERVAL 1 HOUR "+
			"FROM (WITH RECURSIVE s(n) AS (SELECT %[3]d UNION ALL SELECT n + 1 FROM s WHERE n < %[4]d) SELECT n FROM s) x",
			s.ns, prefix, from, to, sign)
		analyze = fmt.Sprintf("ANALYZE TABLE `%s`.sqllock_locks", s.ns)
	case "sqlite":
		q = fmt.Sprintf(`WITH RECURSIVE s(n) AS (SELECT %[2]d UNION ALL SELECT n + 1 FROM s WHERE n < %[3]d)
INSERT INTO sqllock_locks (name, owner, token, holds, acquired_at, expires_at)
SELECT '%[1]s-' || n, 'scale', n, 1, CAST(unixepoch('subsec') * 1000000 AS INTEGER),
  CAST(unixepoch('subsec') * 1000000 AS INTEGER) %[4]s 3600000000 FROM s`, prefix, from, to, sign)
		analyze = "ANALYZE sqllock_locks"
	}
	if _, err := conn.ExecContext(ctx, q); err != nil {
		b.Fatalf("filling %s rows %d-%d: %v", s.kind, from, to, err)
	}
	if _, err := conn.ExecContext(ctx, analyze); err != nil {
		b.Fatal(err)
	}
}

// scaleSizes are the held-lock counts of BenchmarkScaleHeld, up to max.
func scaleSizes(max int) []int {
	var out []int
	for _, n := range []int{10, 1_000, 100_000, 1_000_000} {
		if n <= max {
			out = append(out, n)
		}
	}
	if len(out) == 0 || out[len(out)-1] < max {
		out = append(out, max)
	}
	return out
}

// BenchmarkScaleHeld measures an uncontended TryAcquire+Release of one more
// name while 10, 10^3, 10^5 and 10^6 leases are held in the lock table
// (inserted in bulk, live for an hour), next to the same on a table holding
// 10 leases, interleaved in one run (benchtest.Alternate), so that the
// machine's load weighs on both alike. Reports ns/op (the size's),
// base-ns/op (10 held) and ratio = ns/op ÷ base-ns/op; the target is a flat
// curve, every ratio within 1.2. Run (SQLLOCK_SCALE_MAX=1000 for a quick
// run):
//
//	go test -run '^$' -bench ScaleHeld -benchtime 1000x -timeout 1h .
func BenchmarkScaleHeld(b *testing.B) {
	sizes := scaleSizes(scaleMax(b))
	for _, kind := range benchtest.Kinds {
		base := openScaleDB(b, kind)
		base.fillLocks(b, "held", 1, sizes[0], false)
		baseLocker, err := sqllock.NewTable(base.d, sqllock.TableOptions{})
		if err != nil {
			b.Fatal(err)
		}
		big := openScaleDB(b, kind)
		held := 0
		for _, n := range sizes {
			big.fillLocks(b, "held", held+1, n, false)
			held = n
			locker, err := sqllock.NewTable(big.d, sqllock.TableOptions{})
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/held=%d", kind, n), func(b *testing.B) {
				ops := benchtest.Bind(context.Background(), benchtest.Table(baseLocker), benchtest.Table(locker))
				t := benchtest.Alternate(b, benchtest.Chunk, 1, ops...)
				ns := float64(t[1].Nanoseconds()) / float64(b.N)
				b.ReportMetric(ns, "ns/op")
				b.ReportMetric(float64(t[0].Nanoseconds())/float64(b.N), "base-ns/op")
				b.ReportMetric(t[1].Seconds()/t[0].Seconds(), "ratio")
			})
		}
	}
}

// BenchmarkScaleReaper fills the lock table with 10^6 leases that expired
// an hour ago (SQLLOCK_SCALE_MAX: fewer) and times one Reaper pass over
// them (batches of 1 000), while 4 clients acquire and release other names,
// and compares the clients' p99 during the pass with their p99 just before
// it. Reports pass-s, rows/s, p99-ms (during), p99-before-ms and
// p99-ratio. Run once:
//
//	go test -run '^$' -bench ScaleReaper -benchtime 1x -timeout 1h .
func BenchmarkScaleReaper(b *testing.B) {
	rows := scaleMax(b)
	for _, kind := range benchtest.Kinds {
		b.Run(fmt.Sprintf("%s/expired=%d", kind, rows), func(b *testing.B) {
			s := openScaleDB(b, kind)
			for i := range b.N {
				s.fillLocks(b, fmt.Sprintf("expired%d", i), 1, rows, true)
			}
			l, err := sqllock.NewTable(s.d, sqllock.TableOptions{})
			if err != nil {
				b.Fatal(err)
			}
			r, err := sqllock.NewReaper(s.d, sqllock.ReaperOptions{BatchSize: 1000})
			if err != nil {
				b.Fatal(err)
			}
			deleted, took, before, during, _ := reapBeside(b, l, r)
			if deleted < rows*b.N {
				b.Fatalf("reaped %d rows, want %d", deleted, rows*b.N)
			}
			b.ReportMetric(took.Seconds()/float64(b.N), "pass-s")
			b.ReportMetric(float64(deleted)/took.Seconds(), "rows/s")
			p99, p99before := during[len(during)*99/100], before[len(before)*99/100]
			b.ReportMetric(ms(p99), "p99-ms")
			b.ReportMetric(ms(p99before), "p99-before-ms")
			b.ReportMetric(p99.Seconds()/p99before.Seconds(), "p99-ratio")
		})
	}
}

// reapBeside runs b.N passes of r while 4 clients of l acquire and release
// names of their own, after a baseline of 2 s without the reaper. It
// returns the rows deleted, the passes' time, the clients' sorted cycle
// latencies before and during the passes, and their TryAcquire calls
// refused during the passes. The timer is reset before the passes.
func reapBeside(b *testing.B, l sqllock.Locker, r *sqllock.Reaper) (deleted int, took time.Duration, before, during []time.Duration, refused int64) {
	ctx := context.Background()
	var refusals atomic.Int64
	stop := make(chan struct{})
	time.AfterFunc(2*time.Second, func() { close(stop) }) // the baseline window
	before = cycles(b, l, 4, stop, &refusals)
	if n := refusals.Swap(0); n != 0 {
		b.Fatalf("%d refusals without a reaper", n)
	}
	b.ResetTimer()
	stop = make(chan struct{})
	lat := make(chan []time.Duration, 1)
	go func() { lat <- cycles(b, l, 4, stop, &refusals) }()
	start := time.Now()
	for range b.N {
		n, err := r.Reap(ctx)
		if err != nil {
			b.Fatal(err)
		}
		deleted += n
	}
	took = time.Since(start)
	close(stop)
	return deleted, took, before, <-lat, refusals.Load()
}

// cycles runs clients goroutines, each acquiring and releasing a name of
// its own with l, until stop closes, and returns their cycles' latencies,
// sorted. A refused TryAcquire is counted in refused and tried again after
// a client's backoff of 1 ms.
func cycles(b *testing.B, l sqllock.Locker, clients int, stop <-chan struct{}, refused *atomic.Int64) []time.Duration {
	ctx := context.Background()
	var (
		mu  sync.Mutex
		lat []time.Duration
		wg  sync.WaitGroup
	)
	for c := range clients {
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
				if errors.Is(err, sqllock.ErrLocked) {
					refused.Add(1)
					time.Sleep(time.Millisecond)
					continue
				}
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

// liveHeap is the heap in use after two collections.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkScaleClientMemory holds 10^4 locks (SQLLOCK_SCALE_LOCKS) in
// one Table, acquired by 8 goroutines, and reports the client's live heap
// per held lock (bytes/lock): the heap after two collections with the
// locks held, less the heap before (the Table made, one lock taken and
// released by each of the 8, so that the pool holds their connections). The target is at most 2 048. Run once:
//
//	go test -run '^$' -bench ScaleClientMemory -benchtime 1x .
func BenchmarkScaleClientMemory(b *testing.B) {
	n := envInt(b, "SQLLOCK_SCALE_LOCKS", 10_000)
	for _, kind := range benchtest.Kinds {
		b.Run(fmt.Sprintf("%s/locks=%d", kind, n), func(b *testing.B) {
			ctx := context.Background()
			s := openScaleDB(b, kind)
			l, err := sqllock.NewTable(s.d, sqllock.TableOptions{})
			if err != nil {
				b.Fatal(err)
			}
			// The pool's connections, as many as the acquirers use.
			benchtest.RunClients(b, 64, 8, func(name string) error { return benchtest.Table(l)(ctx, name) })
			var perLock float64
			for i := range b.N {
				locks := make([]*sqllock.Lock, n)
				heap := liveHeap()
				var (
					next atomic.Int64
					wg   sync.WaitGroup
				)
				for range 8 {
					wg.Go(func() {
						for j := next.Add(1) - 1; j < int64(n); j = next.Add(1) - 1 {
							k, err := l.TryAcquire(ctx, fmt.Sprintf("mem-%d-%d", i, j))
							if err != nil {
								b.Error(err)
								return
							}
							locks[j] = k
						}
					})
				}
				wg.Wait()
				if b.Failed() {
					return
				}
				perLock = (float64(liveHeap()) - float64(heap)) / float64(n)
				b.StopTimer()
				for _, k := range locks {
					if err := k.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
			b.ReportMetric(perLock, "bytes/lock")
		})
	}
}

// BenchmarkScaleChurn is the churn soak: for SQLLOCK_SCALE_SOAK (a
// duration, default 1m; 1h for the soak) 4 clients acquire and
// release names drawn at random from 1 000, a Reaper runs every 5 s
// beside them, and the live heap is sampled every 5 s. Reports ops/s,
// heap-first-KB (the first sample, after 5 s), heap-last-KB, heap-max-KB,
// growth-% (last against first) and goroutines-growth. Run once:
//
//	SQLLOCK_SCALE_SOAK=1h go test -run '^$' -bench ScaleChurn -benchtime 1x -timeout 3h .
func BenchmarkScaleChurn(b *testing.B) {
	soak := time.Minute
	if v := os.Getenv("SQLLOCK_SCALE_SOAK"); v != "" {
		var err error
		if soak, err = time.ParseDuration(v); err != nil || soak <= 0 {
			b.Fatalf("SQLLOCK_SCALE_SOAK=%q: want a positive duration", v)
		}
	}
	const sample = 5 * time.Second
	for _, kind := range []string{"postgres", "mysql"} {
		b.Run(fmt.Sprintf("%s/soak=%v", kind, soak), func(b *testing.B) {
			s := openScaleDB(b, kind)
			l, err := sqllock.NewTable(s.d, sqllock.TableOptions{})
			if err != nil {
				b.Fatal(err)
			}
			r, err := sqllock.NewReaper(s.d, sqllock.ReaperOptions{Interval: sample})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), soak)
			defer cancel()
			var (
				ops atomic.Int64
				wg  sync.WaitGroup
			)
			wg.Go(func() { _ = r.Run(ctx) })
			for range 4 {
				wg.Go(func() {
					for ctx.Err() == nil {
						k, err := l.TryAcquire(ctx, "churn-"+strconv.Itoa(rand.IntN(1000)))
						if errors.Is(err, sqllock.ErrLocked) {
							continue
						}
						if err == nil {
							err = k.Release(context.WithoutCancel(ctx))
						}
						if err != nil && ctx.Err() == nil {
							b.Error(err)
							return
						}
						ops.Add(1)
					}
				})
			}
			goroutines := runtime.NumGoroutine()
			var heaps []uint64
			tick := time.NewTicker(sample)
			for done := false; !done; {
				select {
				case <-ctx.Done():
					done = true
				case <-tick.C:
					heaps = append(heaps, liveHeap())
					if len(heaps) == 1 {
						goroutines = runtime.NumGoroutine()
					}
				}
			}
			tick.Stop()
			grew := runtime.NumGoroutine() - goroutines
			wg.Wait()
			if len(heaps) < 2 {
				b.Fatalf("%d heap samples in %v: a longer SQLLOCK_SCALE_SOAK", len(heaps), soak)
			}
			kb := func(v uint64) float64 { return float64(v) / 1024 }
			first, last := heaps[0], heaps[len(heaps)-1]
			samples := make([]float64, len(heaps))
			for i, h := range heaps {
				samples[i] = kb(h)
			}
			b.Logf("%s: live heap KB every %v: %.0f", kind, sample, samples)
			b.ReportMetric(float64(ops.Load())/soak.Seconds(), "ops/s")
			b.ReportMetric(kb(first), "heap-first-KB")
			b.ReportMetric(kb(last), "heap-last-KB")
			b.ReportMetric(kb(slices.Max(heaps)), "heap-max-KB")
			b.ReportMetric(100*(float64(last)-float64(first))/float64(first), "growth-%")
			b.ReportMetric(float64(grew), "goroutines-growth")
		})
	}
}
