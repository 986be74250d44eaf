package sqllock_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/rowlock"
	"github.com/sqllock/sqllock/sqllocktest/shop"
	"github.com/sqllock/sqllock/tests/benchtest"
)

// syncBuffer is a bytes.Buffer for a logger written from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// pgBouncerDialect returns a PostgreSQL dialect through the test PgBouncer
// in mode, on a migrated schema of the test's own.
func pgBouncerDialect(t *testing.T, mode dbtest.PoolMode, opts ...postgres.Option) *postgres.Dialect {
	t.Helper()
	_, schema := dbtest.Postgres(t)
	db := dbtest.OpenPostgres(t, dbtest.PgBouncerURL(t, mode))
	d, err := postgres.New(db, append([]postgres.Option{postgres.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, d)
	if err := sqllock.Migrate(ctxT(t), d); err != nil {
		t.Fatal(err)
	}
	return d
}

// Behind a transaction pooler without a direct listening connection, no
// notification can arrive: the waiter knows it (it says so once, at warn
// level) and polls, so that it gets a released lock within about
// MaxBackoff, not when the holder's lease would have ended (a minute
// here).
func TestWaiterBehindTransactionPoolerPolls(t *testing.T) {
	t.Parallel()
	d := pgBouncerDialect(t, dbtest.Transaction, postgres.WithPooler())
	ctx := ctxT(t)
	var logs syncBuffer
	opts := sqllock.TableOptions{
		LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute, MaxBackoff: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))},
	}
	holder, err := sqllock.NewTable(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := sqllock.NewTable(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 3
	var worst time.Duration
	for i := range rounds {
		k, err := holder.TryAcquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		got := acquireAsync(ctx, waiter, "x")
		waitRoom(t, waiter, "x", "a waiter on x", func(_ bool, waiting int) bool { return waiting == 1 })
		if i == 0 {
			// The probe gives up after a few seconds: the warning.
			testutil.Eventually(ctx, t, "the warning", func() bool { return strings.Contains(logs.String(), "do not arrive") })
		}
		released := time.Now()
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
		k2 := <-got
		if k2 == nil {
			t.Fatal("the waiter failed")
		}
		worst = max(worst, time.Since(released))
		if up, _ := sqllock.RoomState(waiter, "x"); up {
			t.Fatal("the waiting room claims to listen behind a transaction pooler")
		}
		if err := k2.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("slowest of %d hand-offs: %v (MaxBackoff %v, TTL %v)", rounds, worst, opts.MaxBackoff, opts.TTL)
	// A bound far above MaxBackoff (a loaded machine) and far below the
	// TTL (what a waiter that believed it listened would wait).
	if worst > opts.TTL/4 {
		t.Fatalf("a hand-off took %v: the waiter slept on a lease it believed would be announced", worst)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d warnings, want one:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "WithListenDSN") {
		t.Fatalf("the warning does not name the fix:\n%s", logs.String())
	}
}

// BenchmarkHandoffThroughPgBouncer is BenchmarkHandoff (table strategy, one
// waiter, default MaxBackoff of 500ms) directly on the server, for
// comparison in the same run, and through the test PgBouncers: in
// transaction pooling with WithPooler, with and without a direct listening
// connection (WithListenDSN), and in session pooling, where a connection
// of the pool listens. Run:
//
//	go test -run '^$' -bench 'HandoffThroughPgBouncer/.*/.*/hold=0s' -benchtime 100x .
//	go test -run '^$' -bench 'HandoffThroughPgBouncer/.*/.*/hold=1s' -benchtime 20x .
func BenchmarkHandoffThroughPgBouncer(b *testing.B) {
	type target struct {
		name string
		mode dbtest.PoolMode
		opts []postgres.Option
	}
	direct := dbtest.PostgresURL(b)
	targets := []target{
		{"direct/pool-listener", "", nil},
		{"transaction/no-listener", dbtest.Transaction, []postgres.Option{postgres.WithPooler()}},
		{"transaction/WithListenDSN", dbtest.Transaction, []postgres.Option{postgres.WithPooler(), postgres.WithListenDSN(direct)}},
		{"session/pool-listener", dbtest.Session, nil},
	}
	for _, tg := range targets {
		for _, hold := range []time.Duration{0, time.Second} {
			b.Run(fmt.Sprintf("%s/hold=%v", tg.name, hold), func(b *testing.B) {
				_, schema := dbtest.Postgres(b)
				url := direct
				if tg.mode != "" {
					url = dbtest.PgBouncerURL(b, tg.mode)
				}
				db := dbtest.OpenPostgres(b, url)
				db.SetMaxIdleConns(dbtest.MaxOpenConns)
				d, err := postgres.New(db, append([]postgres.Option{postgres.WithSchema(schema)}, tg.opts...)...)
				if err != nil {
					b.Fatal(err)
				}
				closeAtEnd(b, d)
				if err := sqllock.Migrate(context.Background(), d); err != nil {
					b.Fatal(err)
				}
				lat := handoffs(b, d, "handoff", 2, b.N, hold)
				slices.Sort(lat)
				b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
				b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
			})
		}
	}
}

// BenchmarkTryAcquireReleaseThroughPgBouncer measures uncontended
// TryAcquire + Release of the table strategy on distinct names, side by
// side in one run (chunks of 200 operations in turn, so that drift on a
// shared machine hits every side alike): directly with pgx's default
// statement cache, directly with WithPooler (what the option costs), and
// through the test PgBouncer in transaction pooling (WithPooler) and in
// session pooling (statement cache). Reports µs per operation of each side
// and each side's time relative to the first. Run:
//
//	go test -run '^$' -bench TryAcquireReleaseThroughPgBouncer -benchtime 2000x .
func BenchmarkTryAcquireReleaseThroughPgBouncer(b *testing.B) {
	type side struct {
		name   string
		url    string
		opts   []postgres.Option
		locker *sqllock.Table
		took   time.Duration
	}
	direct := dbtest.PostgresURL(b)
	sides := []*side{
		{name: "direct", url: direct},
		{name: "direct-WithPooler", url: direct, opts: []postgres.Option{postgres.WithPooler()}},
		{name: "transaction-WithPooler", url: dbtest.PgBouncerURL(b, dbtest.Transaction), opts: []postgres.Option{postgres.WithPooler()}},
		{name: "session", url: dbtest.PgBouncerURL(b, dbtest.Session)},
	}
	for _, clients := range []int{1, 8} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			_, schema := dbtest.Postgres(b)
			for _, s := range sides {
				db := dbtest.OpenPostgres(b, s.url)
				db.SetMaxOpenConns(clients)
				db.SetMaxIdleConns(clients)
				d, err := postgres.New(db, append([]postgres.Option{postgres.WithSchema(schema)}, s.opts...)...)
				if err != nil {
					b.Fatal(err)
				}
				closeAtEnd(b, d)
				if err := sqllock.Migrate(context.Background(), d); err != nil {
					b.Fatal(err)
				}
				if s.locker, err = sqllock.NewTable(d, sqllock.TableOptions{}); err != nil {
					b.Fatal(err)
				}
				s.took = 0
			}
			ctx := context.Background()
			b.ResetTimer()
			for done := 0; done < b.N; done += benchtest.Chunk {
				n := min(benchtest.Chunk, b.N-done)
				for i, s := range sides {
					s.took += benchtest.RunClients(b, n, clients, func(name string) error {
						k, err := s.locker.TryAcquire(ctx, fmt.Sprintf("%s-%d", name, i))
						if err != nil {
							return err
						}
						return k.Release(ctx)
					})
				}
			}
			b.StopTimer()
			for _, s := range sides {
				b.ReportMetric(float64(s.took.Microseconds())/float64(b.N), s.name+"-µs/op")
				b.ReportMetric(float64(s.took)/float64(sides[0].took), s.name+"/direct")
			}
		})
	}
}

// InTx runs the shop (2 items, 5 buyers at once, row locks) through
// PgBouncer in both pool modes: in transaction pooling, the user's own
// statements need a DSN exec mode that prepares nothing, as the README
// says (default_query_exec_mode=exec).
func TestInTxThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode  dbtest.PoolMode
		param string
		opts  []postgres.Option
	}{
		{dbtest.Transaction, "?default_query_exec_mode=exec", []postgres.Option{postgres.WithPooler()}},
		{dbtest.Session, "", nil},
	} {
		t.Run(string(c.mode), func(t *testing.T) {
			t.Parallel()
			_, schema := dbtest.Postgres(t)
			url := dbtest.PgBouncerURL(t, c.mode)
			if c.param != "" {
				url = strings.Replace(url, "?", c.param+"&", 1)
			}
			db := dbtest.OpenPostgres(t, url)
			d, err := postgres.New(db, append([]postgres.Option{postgres.WithSchema(schema)}, c.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			closeAtEnd(t, d)
			ctx := ctxT(t)
			s := shop.New(db, `"`+schema+`".`, true)
			if err := s.Create(ctx); err != nil {
				t.Fatal(err)
			}
			res, err := s.Run(ctx, 2, 5, func(ctx context.Context, buyer int) (int, error) {
				err := rowlock.InTx(ctx, d, rowlock.TxOptions{}, func(ctx context.Context, tx *sql.Tx) error {
					var stock int
					if err := tx.QueryRowContext(ctx, s.Q("SELECT stock FROM {products} WHERE id = 1 FOR UPDATE")).Scan(&stock); err != nil {
						return err
					}
					if stock < 1 {
						return shop.ErrSoldOut
					}
					if _, err := tx.ExecContext(ctx, s.Q("UPDATE {products} SET stock = stock - 1 WHERE id = 1")); err != nil {
						return err
					}
					return s.Order(ctx, tx, buyer, 1)
				})
				if err != nil {
					return 0, err
				}
				return 1, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := res.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
