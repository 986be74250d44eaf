package sqllock_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// benchDialects opens each dialect on a migrated, private schema.
func benchDialects(b *testing.B) map[string]dialect.Dialect {
	b.Helper()
	db, schema := dbtest.Postgres(b)
	pg, err := postgres.New(db, postgres.WithSchema(schema))
	if err != nil {
		b.Fatal(err)
	}
	closeAtEnd(b, pg)
	mdb, database := dbtest.MySQL(b)
	my, err := mysql.New(mdb, mysql.WithDatabase(database))
	if err != nil {
		b.Fatal(err)
	}
	closeAtEnd(b, my)
	out := map[string]dialect.Dialect{"postgres": pg, "mysql": my}
	for _, d := range out {
		if err := sqllock.Migrate(context.Background(), d); err != nil {
			b.Fatal(err)
		}
		d.DB().SetMaxIdleConns(dbtest.MaxOpenConns)
	}
	return out
}

// handoffDialects is benchDialects with MySQL on a pool that counts every
// statement sent on it (see countedMySQL), into the returned counter.
func handoffDialects(b *testing.B) (map[string]dialect.Dialect, *atomic.Int64) {
	b.Helper()
	ds := benchDialects(b)
	_, database := dbtest.MySQL(b)
	all := new(atomic.Int64)
	my, err := mysql.New(countedMySQL(b, all), mysql.WithDatabase(database))
	if err != nil {
		b.Fatal(err)
	}
	closeAtEnd(b, my)
	if err := sqllock.Migrate(context.Background(), my); err != nil {
		b.Fatal(err)
	}
	ds["mysql"] = my
	return ds, all
}

// BenchmarkHandoff measures the hand-off latency of the table strategy: from
// the moment the holder calls Release to the moment the next waiter's
// Acquire returns, with 1, 10 and 100 waiters on one name, each waiter with
// a locker of its own (as if in its own process; they share the pool and,
// on PostgreSQL, the listening connection). The holder releases as soon as
// every waiter queued (hold=0s: pollers are still at their shortest
// backoff) or after holding 1 s (pollers at their steady pace). Reports
// p50-ms, p99-ms and stmts/handoff (acquire attempts and remaining-time
// reads by all clients, per hand-off); on MySQL also all-stmts/handoff,
// every statement of the pool (releases, the wake-ups' statements,
// renewals too). Run:
//
//	go test -run '^$' -bench 'Handoff/.*/hold=0s' -benchtime 200x .
//	go test -run '^$' -bench 'Handoff/.*/hold=1s' -benchtime 30x .
func BenchmarkHandoff(b *testing.B) {
	ds, all := handoffDialects(b)
	for _, kind := range []string{"postgres", "mysql"} {
		for _, hold := range []time.Duration{0, time.Second} {
			for _, waiters := range []int{1, 10, 100} {
				b.Run(fmt.Sprintf("%s/hold=%v/waiters=%d", kind, hold, waiters), func(b *testing.B) {
					name := fmt.Sprintf("handoff-%d-%v", waiters, hold)
					var stmts atomic.Int64
					d := counting{ds[kind], &stmts}
					before := all.Load()
					lat := handoffs(b, d, name, waiters+1, b.N, hold)
					b.ReportMetric(float64(stmts.Load())/float64(len(lat)), "stmts/handoff")
					if kind == "mysql" {
						b.ReportMetric(float64(all.Load()-before)/float64(len(lat)), "all-stmts/handoff")
					}
					slices.Sort(lat)
					b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
					b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
				})
			}
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkHandoffProcesses is BenchmarkHandoff's hold=0s across
// processes: each client's locker (a lock table, or a semaphore of one
// permit) is on a dialect of its own, with a pool and a listening
// connection (on MySQL, a bell) of its own, as a separate process has.
// With wake=tickets, waiters take tickets (dialect.Catalogue.Waking,
// WakingSemaphores; MySQL: the lock table's) and a release wakes the
// oldest ticket's process alone; with wake=names (the tickets hidden, as
// before they existed), a release announces the name to every waiting
// process, whose first waiter tries. stmts/handoff counts the statements
// of every client's waiters (acquire attempts, remaining-time reads,
// tickets; a semaphore's releases too); on MySQL, all-stmts/handoff
// counts every statement of every process (the bells' too). Run:
//
//	go test -run '^$' -bench HandoffProcesses -benchtime 300x .
func BenchmarkHandoffProcesses(b *testing.B) {
	_, schema := dbtest.Postgres(b)
	_, database := dbtest.MySQL(b)
	// open opens a process's dialect, and returns it with what closes it.
	// Each run closes its processes' (the benchmark framework runs a
	// sub-benchmark twice), so that they fit in max_connections.
	open := func(tb testing.TB, kind string, all *atomic.Int64) (dialect.Dialect, func()) {
		var (
			db *sql.DB
			d  interface {
				dialect.Dialect
				Close(context.Context) error
			}
			err error
		)
		switch kind {
		case "postgres":
			if db, err = sql.Open("pgx", dbtest.PostgresURL(tb)); err == nil {
				db.SetMaxOpenConns(3) // the listener's, and two for the locker: 60 for 20 processes
				d, err = postgres.New(db, postgres.WithSchema(schema))
			}
		case "mysql":
			var (
				cfg *gomysql.Config
				c   driver.Connector
			)
			if cfg, err = gomysql.ParseDSN(dbtest.MySQLDSN(tb)); err == nil {
				c, err = gomysql.NewConnector(cfg)
			}
			if err == nil {
				db = sql.OpenDB(countingConnector{c, all})
				db.SetMaxOpenConns(4) // the bell's two, and two for the locker
				d, err = mysql.New(db, mysql.WithDatabase(database))
			}
		}
		if err != nil {
			tb.Fatal(err)
		}
		return d, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := d.Close(ctx); err != nil {
				tb.Error(err)
			}
			db.Close()
		}
	}
	for _, kind := range []string{"postgres", "mysql"} {
		d, done := open(b, kind, new(atomic.Int64))
		err := sqllock.Migrate(context.Background(), d)
		done()
		if err != nil {
			b.Fatal(err)
		}
	}
	newLocker := map[string]func(d dialect.Dialect) (sqllock.Locker, error){
		"table": func(d dialect.Dialect) (sqllock.Locker, error) { return sqllock.NewTable(d, sqllock.TableOptions{}) },
		"semaphore": func(d dialect.Dialect) (sqllock.Locker, error) {
			return sqllock.NewSemaphore(d, 1, sqllock.SemaphoreOptions{})
		},
	}
	for _, kind := range []string{"postgres", "mysql"} {
		for _, lock := range []string{"table", "semaphore"} {
			for _, processes := range []int{10, 20} {
				for _, wake := range []string{"names", "tickets"} {
					b.Run(fmt.Sprintf("%s/%s/processes=%d/wake=%s", kind, lock, processes, wake), func(b *testing.B) {
						var (
							stmts, all atomic.Int64
							closes     []func()
						)
						defer func() {
							for _, c := range closes {
								c()
							}
						}()
						name := fmt.Sprintf("processes-%s-%d-%s", lock, processes, wake)
						lat := handoffsOf(b, func() (sqllock.Locker, error) {
							pd, done := open(b, kind, &all)
							closes = append(closes, done)
							var d dialect.Dialect = counting{pd, &stmts}
							if wake == "names" {
								d = noWaking{d}
							}
							return newLocker[lock](d)
						}, name, processes, b.N, 0)
						b.ReportMetric(float64(stmts.Load())/float64(len(lat)), "stmts/handoff")
						if kind == "mysql" {
							b.ReportMetric(float64(all.Load())/float64(len(lat)), "all-stmts/handoff")
						}
						slices.Sort(lat)
						b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
						b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
					})
				}
			}
		}
	}
}

// noWaking is a dialect without tickets for the waiters of an unfair lock
// or semaphore (dialect.Catalogue.Waking, WakingSemaphores): a release
// announces the name to every waiting process.
type noWaking struct{ dialect.Dialect }

func (d noWaking) Catalogue() dialect.Catalogue {
	cat := d.Dialect.Catalogue()
	cat.Waking, cat.WakingSemaphores = nil, nil
	return cat
}

// handoffs runs clients lockers taking turns on name until n hand-offs have
// happened, and returns their latencies. The holder releases once every
// other client waits; a client that released waits until another holds the
// lock before it queues again.
func handoffs(b *testing.B, d dialect.Dialect, name string, clients, n int, hold time.Duration) []time.Duration {
	return handoffsWith(b, d, sqllock.TableOptions{}, name, clients, n, hold)
}

// handoffsWith is handoffs with lockers made with opts.
func handoffsWith(b *testing.B, d dialect.Dialect, opts sqllock.TableOptions, name string, clients, n int, hold time.Duration) []time.Duration {
	return handoffsOf(b, func() (sqllock.Locker, error) { return sqllock.NewTable(d, opts) }, name, clients, n, hold)
}

// handoffsOf is handoffsWith for lockers made by newLocker: lock tables
// or semaphores.
func handoffsOf(b *testing.B, newLocker func() (sqllock.Locker, error), name string, clients, n int, hold time.Duration) []time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		released atomic.Int64 // when the holder called Release, Unix ns; 0 before the first
		count    atomic.Int64
		mu       sync.Mutex
		lat      = make([]time.Duration, 0, n)
		wg       sync.WaitGroup
		// acquired is closed (and replaced) at every acquisition, so that a
		// releaser can step back until another client holds the lock:
		// every measured hand-off goes to a different client.
		acquired = make(chan struct{})
	)
	lockers := make([]sqllock.Locker, clients)
	for i := range lockers {
		l, err := newLocker()
		if err != nil {
			b.Fatal(err)
		}
		lockers[i] = l
	}
	// othersWait holds until every other client waits in its locker's
	// queue, after its first attempt: a hand-off then measures a wake-up,
	// not a client that happened to ask just after the release.
	othersWait := func(me int) {
		for j, l := range lockers {
			for j != me && ctx.Err() == nil {
				if _, waiting := sqllock.RoomState(l, name); waiting == 1 {
					break
				}
				time.Sleep(20 * time.Microsecond)
			}
		}
	}
	for i, l := range lockers {
		wg.Go(func() {
			for {
				k, err := l.Acquire(ctx, name)
				if err != nil {
					if ctx.Err() == nil {
						b.Error(err)
						cancel()
					}
					return // the run is over
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
				mu.Lock()
				close(acquired)
				acquired = make(chan struct{})
				next := acquired
				mu.Unlock()
				othersWait(i)
				if hold > 0 {
					select {
					case <-time.After(hold): // the critical section
					case <-ctx.Done():
					}
				}
				released.Store(time.Now().UnixNano())
				if err := k.Release(context.Background()); err != nil {
					b.Error(err)
					cancel()
					return
				}
				select {
				case <-next:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	return lat[:min(len(lat), n)]
}

// counting counts the statements waiters issue: acquire attempts and
// remaining-time reads of locks and semaphores (and semaphore releases),
// and where waiters take tickets (dialect.Catalogue.Waking,
// WakingSemaphores), the tickets' statements.
type counting struct {
	dialect.Dialect
	n *atomic.Int64
}

func (c counting) Tables() (*sqlrun.Tables, error) {
	tb, err := sqlrun.Open(c.Dialect)
	if err != nil {
		return nil, err
	}
	tb.Locks = countingLocks{tb.Locks, c.n}
	if tb.Waking != nil {
		tb.Waking = countingQueue{tb.Waking, c.n}
	}
	if s := tb.Semaphores; s != nil {
		tb.Semaphores = countingSemaphores{s, c.n}
	}
	if w := tb.WakingSemaphores; w != nil {
		tb.WakingSemaphores = countingSemQueue{countingSemaphores{w, c.n}, w, c.n}
	}
	return tb, nil
}

type countingLocks struct {
	sqlrun.LockTable
	n *atomic.Int64
}

func (c countingLocks) Acquire(ctx context.Context, p dialect.AcquireParams) (int64, error) {
	c.n.Add(1)
	return c.LockTable.Acquire(ctx, p)
}

func (c countingLocks) Remaining(ctx context.Context, name string) (time.Duration, bool, error) {
	c.n.Add(1)
	return c.LockTable.Remaining(ctx, name)
}

// BenchmarkIdleWaiters counts the statements per second that 100 waiters,
// each with a locker of its own, issue while a lock stays held: the
// thundering-herd figure. Each b.N is a 1 s window after the waiters have
// settled. On MySQL, all-stmts/s counts every statement of the pool (the
// bell's, the holder's renewals). conns is the pool's connections in use
// at the end of the window (the listening or bell connection). Run:
//
//	go test -run '^$' -bench IdleWaiters -benchtime 5x .
func BenchmarkIdleWaiters(b *testing.B) {
	ds, all := handoffDialects(b)
	for _, kind := range []string{"postgres", "mysql"} {
		b.Run(kind+"/waiters=100", func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			holder, err := sqllock.NewTable(ds[kind], sqllock.TableOptions{})
			if err != nil {
				b.Fatal(err)
			}
			k, err := holder.TryAcquire(ctx, "idle")
			if err != nil {
				b.Fatal(err)
			}
			defer k.Release(context.Background())
			var n atomic.Int64
			d := counting{ds[kind], &n}
			var wg sync.WaitGroup
			for range 100 {
				l, err := sqllock.NewTable(d, sqllock.TableOptions{})
				if err != nil {
					b.Fatal(err)
				}
				wg.Go(func() { _, _ = l.Acquire(ctx, "idle") })
			}
			measureIdle(b, ds[kind], kind, &n, all)
			cancel()
			wg.Wait()
		})
	}
}

// measureIdle lets idle waiters settle, then reports over b.N one-second
// windows the statements counted in n (per second), on MySQL also every
// statement of the pool (all), and the connections of d's pool in use at
// the end.
func measureIdle(b *testing.B, d interface{ DB() *sql.DB }, kind string, n, all *atomic.Int64) {
	time.Sleep(2 * time.Second) // let the waiters settle: this is a measurement window, not synchronisation
	b.ResetTimer()
	start, before, allBefore := time.Now(), n.Load(), all.Load()
	time.Sleep(time.Duration(b.N) * time.Second)
	b.ReportMetric(float64(n.Load()-before)/time.Since(start).Seconds(), "stmts/s")
	if kind == "mysql" {
		b.ReportMetric(float64(all.Load()-allBefore)/time.Since(start).Seconds(), "all-stmts/s")
	}
	b.ReportMetric(float64(d.DB().Stats().InUse), "conns")
}
