package sqllock_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/tests/benchtest"
)

// pessimisticRaw returns the statements of an uncontended pessimistic
// acquisition issued raw: lock (and draw the token) on a pinned connection,
// then commit. lockOnly leaves the token out.
func pessimisticRaw(d dialect.Dialect, lockOnly bool) func(ctx context.Context, name string) error {
	var lock, token string
	switch d.Name() {
	case "postgres":
		ns := `"` + d.(interface{ Schema() string }).Schema() + `".`
		lock = `SELECT nextval('` + ns + `sqllock_rowlock_token_seq') FROM (SELECT 1 FROM ` + ns + `sqllock_rowlocks WHERE name = $1 FOR UPDATE NOWAIT) AS l`
		if lockOnly {
			lock = `SELECT 1 FROM ` + ns + `sqllock_rowlocks WHERE name = $1 FOR UPDATE NOWAIT`
		}
	case "mysql":
		ns := "`" + d.(interface{ Database() string }).Database() + "`."
		lock = `SELECT 1 FROM ` + ns + `sqllock_rowlocks WHERE name = ? FOR UPDATE NOWAIT`
		if !lockOnly {
			token = `INSERT INTO ` + ns + `sqllock_rowlock_tokens () VALUES ()`
		}
	}
	db := d.DB()
	return func(ctx context.Context, name string) error {
		conn, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		var v int64
		if err := tx.QueryRowContext(ctx, lock, name).Scan(&v); err != nil {
			return err
		}
		if token != "" {
			res, err := tx.ExecContext(ctx, token)
			if err != nil {
				return err
			}
			if v, err = res.LastInsertId(); err != nil {
				return err
			}
		}
		return tx.Commit()
	}
}

// BenchmarkPessimisticTryAcquireRelease is BenchmarkTryAcquireRelease for
// the pessimistic strategy: an uncontended TryAcquire+Release on distinct
// names next to the same statements issued raw (begin on a pinned
// connection, the locking read that draws the token — on MySQL a locking
// read and an AUTO_INCREMENT insert — and commit), interleaved in one run.
// ratio = raw time / sqllock time; ratio-lock-only compares with the
// locking read alone, without a fencing token. Run:
//
//	go test -run '^$' -bench PessimisticTryAcquireRelease -benchtime 3000x .
func BenchmarkPessimisticTryAcquireRelease(b *testing.B) {
	ds := benchDialects(b)
	for _, kind := range []string{"postgres", "mysql"} {
		d := ds[kind]
		ctx := context.Background()
		locker, err := sqllock.NewPessimistic(d, sqllock.PessimisticOptions{})
		if err != nil {
			b.Fatal(err)
		}
		rawFull, rawLock := pessimisticRaw(d, false), pessimisticRaw(d, true)
		raw := func(name string) error { return rawFull(ctx, "raw-"+name) }
		lockOnly := func(name string) error { return rawLock(ctx, "raw-"+name) }
		ours := func(name string) error {
			k, err := locker.TryAcquire(ctx, name)
			if err != nil {
				return err
			}
			return k.Release(ctx)
		}
		for c := range 8 { // the rows all sides use, created once
			for _, name := range []string{"bench-" + strconv.Itoa(c), "raw-bench-" + strconv.Itoa(c)} {
				if err := ours(name); err != nil {
					b.Fatal(err)
				}
			}
		}
		for _, clients := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/clients=%d", kind, clients), func(b *testing.B) {
				t := benchtest.Alternate(b, benchtest.Chunk, clients, raw, ours, lockOnly)
				benchtest.ReportRatio(b, t[0], t[1])
				b.ReportMetric(t[2].Seconds()/t[1].Seconds(), "ratio-lock-only")
			})
		}
	}
}

// BenchmarkPessimisticHandoff measures the pessimistic hand-off latency:
// from the moment the holder calls Release to the moment the next waiter's
// Acquire returns, with 1 and 10 waiters queued in the database on one name.
// Every waiter pins a connection, so 100 waiters (the table strategy's
// figure) would need more connections than PostgreSQL's default
// max_connections. Run:
//
//	go test -run '^$' -bench PessimisticHandoff -benchtime 300x .
func BenchmarkPessimisticHandoff(b *testing.B) {
	ds := benchDialects(b)
	for _, kind := range []string{"postgres", "mysql"} {
		for _, waiters := range []int{1, 10} {
			b.Run(fmt.Sprintf("%s/waiters=%d", kind, waiters), func(b *testing.B) {
				lat := pessimisticHandoffs(b, ds[kind], fmt.Sprintf("handoff-%d", waiters), waiters+1, b.N)
				slices.Sort(lat)
				b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
				b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
			})
		}
	}
}

// pessimisticHandoffs runs clients taking turns on name until n hand-offs
// happened, and returns their latencies. The holder releases once every
// other client waits in the database's lock queue.
func pessimisticHandoffs(b *testing.B, d dialect.Dialect, name string, clients, n int) []time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	locker, err := sqllock.NewPessimistic(d, sqllock.PessimisticOptions{})
	if err != nil {
		b.Fatal(err)
	}
	k, err := locker.TryAcquire(ctx, name) // creates the row
	if err != nil {
		b.Fatal(err)
	}
	if err := k.Release(ctx); err != nil {
		b.Fatal(err)
	}
	waitingQuery := `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%sqllock_rowlocks%'`
	if d.Name() == "mysql" {
		ns := d.(interface{ Database() string }).Database()
		waitingQuery = "SELECT count(*) FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND db IS NOT NULL AND info LIKE '%`" + ns + "`.sqllock_rowlocks%'"
	}
	watcher, err := d.DB().Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer watcher.Close()
	othersWait := func() {
		for ctx.Err() == nil {
			var w int
			if err := watcher.QueryRowContext(ctx, waitingQuery).Scan(&w); err != nil && ctx.Err() == nil {
				b.Error(err)
				return
			}
			if w >= clients-1 {
				return
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
	var (
		released atomic.Int64
		count    atomic.Int64
		mu       sync.Mutex
		lat      = make([]time.Duration, 0, n)
		wg       sync.WaitGroup
		turn     sync.Mutex // one holder at a time checks the queue
	)
	for range clients {
		wg.Go(func() {
			for {
				k, err := locker.Acquire(ctx, name)
				if err != nil {
					return
				}
				now := time.Now().UnixNano()
				if r := released.Load(); r != 0 {
					mu.Lock()
					lat = append(lat, time.Duration(now-r))
					mu.Unlock()
					if count.Add(1) >= int64(n) {
						cancel()
					}
				}
				turn.Lock()
				othersWait()
				turn.Unlock()
				released.Store(time.Now().UnixNano())
				if err := k.Release(context.Background()); err != nil {
					b.Error(err)
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	return lat[:min(len(lat), n)]
}
