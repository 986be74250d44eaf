package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/faultproxy"
	"github.com/sqllock/sqllock/rowlock"
)

// Every call is bounded: against a server that says nothing, a call with a
// context that never ends returns, within the dialect's statement timeout,
// an error wrapping ErrNoAnswer and saying whether anything was sent.

// boundedTimeout is the statement timeout of these tests: small, so that
// they end soon; the deadline of each call's wait is generous.
const boundedTimeout = time.Second

// returnsWithin runs call and fails t unless it returns within a generous
// deadline (a hang is the failure under test); it returns call's error.
func returnsWithin(t *testing.T, what string, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("%s with context.Background() did not return within 60 s (statement timeout %v)", what, boundedTimeout)
		return nil
	}
}

// silentServer listens on loopback, accepts connections and never writes a
// byte; it closes them when the test ends.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// boundedDialect returns a dialect with the tests' statement timeout on a
// private pool that reaches the test server of kind at addr instead, with
// ns as its schema or database.
func boundedDialect(t *testing.T, kind, addr, ns string) (*sql.DB, dialect.Dialect) {
	t.Helper()
	var (
		db  *sql.DB
		d   dialect.Dialect
		err error
	)
	switch kind {
	case "postgres":
		u, perr := url.Parse(dbtest.PostgresURL(t))
		if perr != nil {
			t.Fatal(perr)
		}
		u.Host = addr
		db = dbtest.OpenPostgres(t, u.String())
		opts := []postgres.Option{postgres.WithStatementTimeout(boundedTimeout)}
		if ns != "" {
			opts = append(opts, postgres.WithSchema(ns))
		}
		d, err = postgres.New(db, opts...)
	case "mysql":
		cfg, perr := gomysql.ParseDSN(dbtest.MySQLDSN(t))
		if perr != nil {
			t.Fatal(perr)
		}
		cfg.Net, cfg.Addr = "tcp", addr
		db = dbtest.OpenMySQL(t, cfg.FormatDSN())
		opts := []mysql.Option{mysql.WithStatementTimeout(boundedTimeout)}
		if ns != "" {
			opts = append(opts, mysql.WithDatabase(ns))
		}
		d, err = mysql.New(db, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := d.(interface{ Close(context.Context) error }); ok {
		closeAtEnd(t, c)
	}
	return db, d
}

// Whether a call that met a silent server had sent its statement.
const (
	wasNotSent = iota // the error wraps ErrUnavailable
	wasSent           // the error wraps ErrOutcomeUnknown
	wasEither         // one of the two: pgx checks a connection idle for 1 s before its reuse
)

// wantNoAnswer fails t unless err wraps ErrNoAnswer and, as want says,
// ErrOutcomeUnknown (something was sent) or ErrUnavailable (nothing was),
// never both.
func wantNoAnswer(t *testing.T, what string, err error, want int) {
	t.Helper()
	if !errors.Is(err, sqllock.ErrNoAnswer) {
		t.Errorf("%s: %v, want an error wrapping ErrNoAnswer", what, err)
	}
	unknown, unavailable := errors.Is(err, sqllock.ErrOutcomeUnknown), errors.Is(err, sqllock.ErrUnavailable)
	switch {
	case unknown == unavailable:
		t.Errorf("%s: %v, want an error wrapping one of ErrOutcomeUnknown and ErrUnavailable", what, err)
	case want == wasSent && !unknown:
		t.Errorf("%s: %v, want an error wrapping ErrOutcomeUnknown", what, err)
	case want == wasNotSent && !unavailable:
		t.Errorf("%s: %v, want an error wrapping ErrUnavailable", what, err)
	}
}

// A server that accepts TCP connections and never answers the driver's
// handshake (PostgreSQL's startup, MySQL's greeting): nothing is sent.
func TestSilentServerBounded(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			_, d := boundedDialect(t, kind, silentServer(t), "")
			l, err := sqllock.NewTable(d, sqllock.TableOptions{})
			if err != nil {
				t.Fatal(err)
			}
			bg := context.Background()
			err = returnsWithin(t, "TryAcquire", func() error {
				_, err := l.TryAcquire(bg, "silent")
				return err
			})
			wantNoAnswer(t, "TryAcquire", err, wasNotSent)
			err = returnsWithin(t, "Acquire", func() error {
				_, err := l.Acquire(bg, "silent")
				return err
			})
			wantNoAnswer(t, "Acquire", err, wasNotSent)
			err = returnsWithin(t, "Migrate", func() error { return sqllock.Migrate(bg, d) })
			wantNoAnswer(t, "Migrate", err, wasNotSent)
		})
	}
}

// A server that answers until the network goes silent, with a lock held:
// a release, a new acquisition and the renewal all end within their
// bounds, and say that their statements may have been applied.
func TestStalledServerBounded(t *testing.T) {
	t.Parallel()
	for _, m := range envs {
		if m.kind == "sqlite" {
			continue
		}
		t.Run(m.kind, func(t *testing.T) {
			t.Parallel()
			e := m.make(t)
			target := "127.0.0.1:5432"
			switch m.kind {
			case "postgres":
				u, err := url.Parse(dbtest.PostgresURL(t))
				if err != nil {
					t.Fatal(err)
				}
				target = u.Host
			case "mysql":
				cfg, err := gomysql.ParseDSN(dbtest.MySQLDSN(t))
				if err != nil {
					t.Fatal(err)
				}
				target = cfg.Addr
			}
			proxy, err := faultproxy.New(target)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { proxy.Close() })
			// One connection, idle, and no renewal due while the test
			// runs: the release meets the connection that went silent
			// (pgx's stdlib pings it first if it was idle for a second:
			// then nothing of the release is sent).
			db, d := boundedDialect(t, m.kind, proxy.Addr(), e.ns)
			db.SetMaxOpenConns(1)
			l, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 10 * time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			// Another pool, whose lease renews every second.
			_, rd := boundedDialect(t, m.kind, proxy.Addr(), e.ns)
			rl, err := sqllock.NewTable(rd, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 3 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t)
			held, err := l.TryAcquire(ctx, "held")
			if err != nil {
				t.Fatal(err)
			}
			renewed, err := rl.TryAcquire(ctx, "renewed")
			if err != nil {
				t.Fatal(err)
			}
			// A pessimistic locker whose one connection is warm: its next
			// lock begins a transaction on it.
			pdb, pd := boundedDialect(t, m.kind, proxy.Addr(), e.ns)
			pdb.SetMaxOpenConns(1)
			pl, err := sqllock.NewPessimistic(pd, sqllock.PessimisticOptions{})
			if err != nil {
				t.Fatal(err)
			}
			warm, err := pl.TryAcquire(ctx, "row")
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// rowlock.InTx on a pool of its own, warm too.
			tdb, td := boundedDialect(t, m.kind, proxy.Addr(), e.ns)
			tdb.SetMaxOpenConns(1)
			noop := func(context.Context, *sql.Tx) error { return nil }
			if err := rowlock.InTx(ctx, td, rowlock.TxOptions{}, noop); err != nil {
				t.Fatal(err)
			}
			proxy.Stall(time.Hour) // until the test's end closes the proxy
			bg := context.Background()

			// Its transaction's BEGIN is bounded too, though the
			// transaction outlives the call's context.
			err = returnsWithin(t, "pessimistic TryAcquire", func() error {
				_, err := pl.TryAcquire(bg, "row")
				return err
			})
			wantNoAnswer(t, "pessimistic TryAcquire", err, wasEither)
			// So is the setting of the lock wait and the BEGIN of
			// rowlock.InTx, whose transaction ends with its context.
			err = returnsWithin(t, "rowlock.InTx", func() error { return rowlock.InTx(bg, td, rowlock.TxOptions{}, noop) })
			wantNoAnswer(t, "rowlock.InTx", err, wasEither)

			err = returnsWithin(t, "Release", func() error { return held.Release(bg) })
			if m.kind == "postgres" {
				wantNoAnswer(t, "Release", err, wasEither)
			} else {
				wantNoAnswer(t, "Release", err, wasSent)
			}
			// That connection was discarded: the next call connects.
			err = returnsWithin(t, "TryAcquire", func() error {
				_, err := l.TryAcquire(bg, "another")
				return err
			})
			wantNoAnswer(t, "TryAcquire", err, wasNotSent)
			err = returnsWithin(t, "Acquire", func() error {
				_, err := l.Acquire(bg, "another")
				return err
			})
			wantNoAnswer(t, "Acquire", err, wasNotSent)

			// The renewal gives up within the lease's trust window: the
			// holder learns that it lost the lock.
			err = returnsWithin(t, "renewal", func() error {
				<-renewed.Context().Done()
				return context.Cause(renewed.Context())
			})
			if !errors.Is(err, sqllock.ErrLockLost) {
				t.Errorf("the renewed lock's context ended with %v, want ErrLockLost", err)
			}
		})
	}
}
