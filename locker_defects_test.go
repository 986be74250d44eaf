package sqllock_test

// Regression tests for the defects found by independent acceptance testing:
// cancelled acquires that took the lock afterwards, pessimistic locks whose
// loss went unreported, session clocks that decided other sessions' leases,
// and errors that said a statement was sent when none was.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/testutil"
)

// lockRow begins a transaction on a connection of e's pool that holds the
// row of name in the strategy's lock table (FOR UPDATE; on SQLite, the
// database's write lock), as a guarded transaction of a paused holder
// would. The transaction rolls back when the test ends if it is still open.
func (e *env) lockRow(t *testing.T, name string) *sql.Tx {
	t.Helper()
	ctx := ctxT(t)
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	q := "SELECT 1 FROM {" + e.s.table + "} WHERE name = ? FOR UPDATE"
	if e.kind == "sqlite" {
		q = "UPDATE {" + e.s.table + "} SET holds = holds WHERE name = ?"
	}
	if _, err := tx.ExecContext(ctx, e.q(q), name); err != nil {
		t.Fatal(err)
	}
	return tx
}

// holderOf reads who holds name, after every transition queued on its row
// (a locking read waits for them; on SQLite there is no queue).
func (e *env) holderOf(t *testing.T, name string) (owner string, holds int) {
	t.Helper()
	ctx := ctxT(t)
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	q := "SELECT owner, holds FROM {" + e.s.table + "} WHERE name = ?"
	if e.kind != "sqlite" {
		q += " FOR UPDATE"
	}
	if err := tx.QueryRowContext(ctx, e.q(q), name).Scan(&owner, &holds); err != nil {
		t.Fatal(err)
	}
	return owner, holds
}

// An Acquire that returns an error leaves nothing behind: when its context
// ends while its statement waits on the server (here behind the row lock of
// a guarded transaction), no lease is granted afterwards for the owner of
// that call.
func TestCancelledAcquireGrantsNothing(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const name = "cancelled-acquire"
		a := e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Hour}})
		ka, err := a.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		defer ka.Release(ctx)
		// A's lease ends, while a transaction holds its row: the next
		// acquirer's statement waits on the server.
		e.expire(t, name)
		blocker := e.lockRow(t, name)

		b := e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Hour}})
		bctx, cancel := context.WithCancel(sqllock.WithOwner(ctx, "abandoned"))
		defer cancel()
		got := make(chan error, 1)
		go func() {
			k, err := b.Acquire(bctx, name)
			if k != nil {
				_ = k.Release(ctx)
			}
			got <- err
		}()
		waitForLockWait(t, e)
		cancel()
		err = <-got
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Acquire: %v, want context.Canceled", err)
		}
		if err := blocker.Commit(); err != nil {
			t.Fatal(err)
		}
		if owner, holds := e.holderOf(t, name); owner == "abandoned" && holds > 0 {
			t.Fatalf("the lock went to the owner of a cancelled Acquire (holds %d)", holds)
		}
		c := e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Hour}})
		kc, err := c.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("after the cancelled acquire: %v, want the lock free", err)
		}
		if err := kc.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A pessimistic lock whose session is terminated is lost, and says so:
// Guard on its transaction, Release, and the cause of its context all
// report ErrLockLost, even before a keep-alive ping noticed.
func TestPessimisticKilledSessionIsLost(t *testing.T) {
	eachPessimistic(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		// No keep-alive ping within the test: the loss must be found by the
		// calls themselves.
		l := e.pessimistic(t, sqllock.PessimisticOptions{KeepAlive: time.Hour})
		for _, via := range []string{"guard", "release"} {
			name := "killed-" + via
			k, err := l.TryAcquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			e.killBackend(t, e.backendID(t, k.Tx()))
			// Another owner takes the lock once the server has ended the
			// killed session's transaction.
			other, err := l.Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if via == "guard" {
				if err := k.Guard(ctx, k.Tx()); !errors.Is(err, sqllock.ErrLockLost) {
					t.Fatalf("Guard after the session was killed: %v, want ErrLockLost", err)
				}
			}
			if err := k.Release(ctx); !errors.Is(err, sqllock.ErrLockLost) {
				t.Fatalf("%s: Release after the session was killed: %v, want ErrLockLost", via, err)
			}
			if cause := context.Cause(k.Context()); cause != sqllock.ErrLockLost {
				t.Fatalf("%s: cause %v, want ErrLockLost", via, cause)
			}
			if err := other.Guard(ctx, other.Tx()); err != nil {
				t.Fatalf("the new holder's guard: %v", err)
			}
			if err := other.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// skewedSession returns e's dialect on a private pool whose sessions' clocks
// are moved by skew where the database lets a session do that (MySQL and
// MariaDB: SET timestamp), or whose session time zone is far off (PostgreSQL,
// where no session setting moves now()). ok is false for SQLite, whose clock
// is the host's and has no session setting at all.
func skewedSession(t *testing.T, e *env, skew time.Duration) (d dialect.Dialect, ok bool) {
	t.Helper()
	switch e.kind {
	case "mysql":
		c, err := gomysql.ParseDSN(dbtest.MySQLDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		if c.Params == nil {
			c.Params = map[string]string{}
		}
		// Every connection starts with SET timestamp = <now + skew>.
		c.Params["timestamp"] = strconv.FormatInt(time.Now().Add(skew).Unix(), 10)
		db := dbtest.OpenMySQL(t, c.FormatDSN())
		md, err := mysql.New(db, mysql.WithDatabase(e.ns))
		if err != nil {
			t.Fatal(err)
		}
		closeAtEnd(t, md)
		var y int
		if err := db.QueryRowContext(ctxT(t), "SELECT TIMESTAMPDIFF(SECOND, SYSDATE(), NOW())").Scan(&y); err != nil {
			t.Fatal(err)
		}
		if d := time.Duration(y) * time.Second; (skew > 0 && d < skew/2) || (skew < 0 && d > skew/2) {
			t.Fatalf("the session clock is off by %v, want about %v", d, skew)
		}
		return md, true
	case "postgres":
		zone := "Pacific/Kiritimati" // UTC+14
		if skew < 0 {
			zone = "Etc/GMT+12" // UTC-12
		}
		db := dbtest.OpenPostgres(t, withQuery(dbtest.PostgresURL(t), "timezone="+zone))
		pd, err := postgres.New(db, postgres.WithSchema(e.ns))
		if err != nil {
			t.Fatal(err)
		}
		closeAtEnd(t, pd)
		return pd, true
	}
	return nil, false
}

// One session's clock never decides another's lease: a contender whose
// session clock runs an hour ahead does not take over a live lease, and a
// holder whose session clock runs an hour behind is not taken over at once.
func TestSessionClockDoesNotMoveLeases(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		ahead, ok := skewedSession(t, e, time.Hour)
		if !ok {
			t.Skip("SQLite has no session clock: every connection reads the host's clock")
		}
		behind, _ := skewedSession(t, e, -time.Hour)
		honest := e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Second}})

		k, err := honest.TryAcquire(ctx, "ahead")
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release(ctx)
		thief, err := e.s.new(ahead, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		if k2, err := thief.TryAcquire(ctx, "ahead"); !errors.Is(err, sqllock.ErrLocked) {
			if k2 != nil {
				_ = k2.Release(ctx)
			}
			t.Fatalf("a session an hour ahead took a live lease: %v", err)
		}

		slow, err := e.s.new(behind, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		ks, err := slow.TryAcquire(ctx, "behind")
		if err != nil {
			t.Fatal(err)
		}
		defer ks.Release(ctx)
		if k2, err := honest.TryAcquire(ctx, "behind"); !errors.Is(err, sqllock.ErrLocked) {
			if k2 != nil {
				_ = k2.Release(ctx)
			}
			t.Fatalf("the lease of a session an hour behind was taken over at once: %v", err)
		}
		// Renewal and release on the skewed session work on the real clock too.
		if err := ks.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if k2, err := honest.TryAcquire(ctx, "behind"); err != nil {
			t.Fatalf("after the release: %v", err)
		} else {
			_ = k2.Release(ctx)
		}
	})
}

// sibling returns a dialect for e's namespace on a private pool of at most
// maxOpen connections.
func (e *env) sibling(t *testing.T, maxOpen int) (*sql.DB, dialect.Dialect) {
	t.Helper()
	var (
		db  *sql.DB
		d   dialect.Dialect
		err error
	)
	switch e.kind {
	case "postgres":
		db = dbtest.OpenPostgres(t, dbtest.PostgresURL(t))
		d, err = postgres.New(db, postgres.WithSchema(e.ns))
	case "mysql":
		db = dbtest.OpenMySQL(t, dbtest.MySQLDSN(t))
		d, err = mysql.New(db, mysql.WithDatabase(e.ns))
	case "sqlite":
		db, err = sqlite.Open(e.ns)
		if err == nil {
			t.Cleanup(func() { db.Close() })
			d, err = sqlite.New(db)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	// The dialect's background work (a listening connection, bells) ends
	// with the test, before the pool closes.
	if c, ok := d.(interface{ Close(context.Context) error }); ok {
		closeAtEnd(t, c)
	}
	db.SetMaxOpenConns(maxOpen)
	return db, d
}

// strategyOn returns a locker of the strategy under test on d.
func (e *env) strategyOn(t *testing.T, d dialect.Dialect) sqllock.Locker {
	t.Helper()
	var (
		l   sqllock.Locker
		err error
	)
	if e.pess {
		l, err = sqllock.NewPessimistic(d, sqllock.PessimisticOptions{})
	} else {
		l, err = e.s.new(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Hour}})
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// notSent checks that err is a failure that says no statement was sent,
// wrapping want.
func notSent(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
	if errors.Is(err, sqllock.ErrOutcomeUnknown) {
		t.Fatalf("%s: %v says a statement may have been applied, but none was sent", what, err)
	}
}

// With every connection of the pool in use, Acquire and TryAcquire fail by
// their deadline with ErrPoolExhausted, never with ErrOutcomeUnknown: no
// statement was sent.
func TestPoolExhaustedIsNotOutcomeUnknown(t *testing.T) {
	eachStrategy(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		db, d := e.sibling(t, 1)
		l := e.strategyOn(t, d)
		conn, err := db.Conn(ctx) // the pool's only connection
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for _, call := range []struct {
			name string
			fn   func(context.Context, string) (*sqllock.Lock, error)
		}{{"TryAcquire", l.TryAcquire}, {"Acquire", l.Acquire}} {
			cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			k, err := call.fn(cctx, "exhausted")
			cancel()
			if k != nil {
				t.Fatalf("%s got a lock without a connection", call.name)
			}
			notSent(t, call.name, err, sqllock.ErrPoolExhausted)
		}
	})
}

// The same through pgx's own pool, whose limit database/sql does not see.
func TestPgxPoolExhaustedIsNotOutcomeUnknown(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	cfg, err := pgxpool.ParseConfig(dbtest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, schema := dbtest.Postgres(t)
	d, err := postgres.NewFromPool(pool, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, d)
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	for _, s := range leaseStrategies {
		l, err := s.new(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		held, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err = l.TryAcquire(cctx, "exhausted")
		cancel()
		held.Release()
		notSent(t, s.name, err, sqllock.ErrPoolExhausted)
	}
}

// A server that refuses connections gives ErrUnavailable: nothing was sent.
func TestRefusedConnectionIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	port := closedPort(t)
	pg := dbtest.OpenPostgres(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?connect_timeout=5", port))
	my := dbtest.OpenMySQL(t, fmt.Sprintf("root@tcp(127.0.0.1:%d)/test?timeout=5s", port))
	pd, err := postgres.New(pg)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, pd)
	md, err := mysql.New(my)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, md)
	for _, d := range []dialect.Dialect{pd, md} {
		for _, s := range leaseStrategies {
			l, err := s.new(d, sqllock.TableOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = l.TryAcquire(ctx, "refused")
			notSent(t, d.Name()+"/"+s.name, err, sqllock.ErrUnavailable)
		}
		l, err := sqllock.NewPessimistic(d, sqllock.PessimisticOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.TryAcquire(ctx, "refused")
		notSent(t, d.Name()+"/pessimistic", err, sqllock.ErrUnavailable)
	}
}

// closedPort returns a loopback TCP port that nothing listens on: one the
// system just handed out and that was closed again.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// revive makes the lease on name live again on the database, for an hour,
// as a lease whose holder's client has already declared it lost can still
// be: the acquire took longer than the trust window (which starts when the
// acquire is sent, the lease when the database runs it), or renewals
// failed on the client's side only.
func (e *env) revive(t *testing.T, name string) {
	t.Helper()
	set := "expires_at = now() + INTERVAL '1' HOUR"
	switch e.kind {
	case "mysql":
		set = "expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR"
	case "sqlite": // microseconds since the epoch
		set = "expires_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER) + 3600000000"
	}
	res, err := e.db.ExecContext(ctxT(t), e.q("UPDATE {"+e.s.table+"} SET "+set+" WHERE name = ?"), name)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("revive %q: %d rows", name, n)
	}
}

// Once a lock has reported its loss, Guard refuses it at once, with
// ErrLockLost and without a statement, even while the database still
// holds the lease: a holder told "lost" must never see a guarded write
// commit (issue 28 item 7: 24 guarded writes committed after their
// holder had recorded the loss).
func TestGuardRefusesAfterReportedLoss(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Second}})
		k, err := l.TryAcquire(ctx, "lost")
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release(context.WithoutCancel(ctx))
		// The next renewal is refused, and the lock reports its loss.
		e.expire(t, "lost")
		select {
		case <-k.Done():
		case <-ctx.Done():
			t.Fatal("the lock did not report its loss")
		}
		if cause := context.Cause(k.Context()); !errors.Is(cause, sqllock.ErrLockLost) {
			t.Fatalf("the lock ended with %v, want ErrLockLost", cause)
		}
		e.revive(t, "lost")

		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := k.Guard(ctx, tx); !errors.Is(err, sqllock.ErrLockLost) {
			t.Fatalf("Guard after the reported loss: %v, want ErrLockLost", err)
		}
		// Refused locally: a statement on a transaction already ended
		// would fail with sql.ErrTxDone instead.
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := k.Guard(ctx, tx); !errors.Is(err, sqllock.ErrLockLost) || errors.Is(err, sql.ErrTxDone) {
			t.Fatalf("Guard on an ended transaction after the reported loss: %v, want ErrLockLost without a statement", err)
		}
	})
}

// A client-side failure before anything was sent is not reported as
// ErrOutcomeUnknown (issue 28 item 4): on PostgreSQL, a semaphore limit
// that pgx cannot encode into the limit's int4 parameter (the dialect is
// given it directly: NewSemaphore refuses it), on MySQL a statement larger
// than the driver's maxAllowedPacket. Nothing was granted either.
func TestClientRefusalIsNotOutcomeUnknown(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		switch e.kind {
		case "postgres":
			sems := testutil.Tables(t, e.d).Semaphores
			over := math.MaxInt32
			over++
			_, err := sems.Acquire(ctx, dialect.SemaphoreParams{Name: "big", Owner: "o", TTL: time.Minute, Limit: over})
			if err == nil {
				t.Fatal("limit 2^31 granted")
			}
			if errors.Is(err, sqllock.ErrOutcomeUnknown) {
				t.Fatalf("limit 2^31: %v wraps ErrOutcomeUnknown, but pgx sent nothing", err)
			}
			list, err := e.semaphore(t, 1, sqllock.SemaphoreOptions{}).List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 0 {
				t.Fatalf("holders after a refused acquire: %+v", list)
			}
		case "mysql":
			c, err := gomysql.ParseDSN(dbtest.MySQLDSN(t))
			if err != nil {
				t.Fatal(err)
			}
			c.MaxAllowedPacket = 64 // the acquire statement is longer
			db := dbtest.OpenMySQL(t, c.FormatDSN())
			d, err := mysql.New(db, mysql.WithDatabase(e.ns))
			if err != nil {
				t.Fatal(err)
			}
			closeAtEnd(t, d)
			for _, s := range leaseStrategies {
				l, err := s.new(d, sqllock.TableOptions{})
				if err != nil {
					t.Fatal(err)
				}
				k, err := l.TryAcquire(ctx, "big")
				if err == nil {
					k.Release(ctx)
					t.Fatalf("%s: TryAcquire with a 64-byte maxAllowedPacket succeeded", s.name)
				}
				if errors.Is(err, sqllock.ErrOutcomeUnknown) {
					t.Fatalf("%s: %v wraps ErrOutcomeUnknown, but the driver sent nothing", s.name, err)
				}
			}
		default:
			t.Skip("SQLite's driver refuses nothing a dialect sends: see dialect/sqlite's TestWrapRefusedBeforeSending")
		}
	})
}
