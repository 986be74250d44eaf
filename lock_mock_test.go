package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/rowlock"
)

// prefixMatcher matches a statement by its first words, enough to tell the
// dialect's statements apart.
var prefixMatcher = sqlmock.QueryMatcherFunc(func(expected, actual string) error {
	if !strings.HasPrefix(strings.TrimSpace(actual), expected) {
		return errors.New("no match")
	}
	return nil
})

// Failures a real server cannot produce on demand: the connection breaking
// under renewals and under a release. The timers run on synctest's clock:
// the bounds are the library's own, not the machine's.
func TestRenewalFailuresAndUnknownOutcomes(t *testing.T) {
	t.Parallel()
	// 1. A renewal that keeps failing with a broken connection is retried
	// inside the trust window, then the lock is reported lost when it closes.
	synctest.Test(t, func(t *testing.T) {
		d, mock := newMock(t)
		const ttl, every = 60 * time.Millisecond, 10 * time.Millisecond
		l, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl, RenewInterval: every}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		mock.ExpectQuery("INSERT INTO").WillReturnRows(sqlmock.NewRows([]string{"token"}).AddRow(7))
		// Renewals go in batches: an UPDATE ... RETURNING the renewed leases.
		mock.ExpectQuery("UPDATE").WillReturnRows(sqlmock.NewRows([]string{"name", "owner", "token"}).AddRow("flaky", "o1", 7)) // works
		for range 40 {
			mock.ExpectQuery("UPDATE").WillReturnError(io.ErrUnexpectedEOF)
		}
		start := time.Now()
		k, err := l.TryAcquire(sqllock.WithOwner(ctx, "o1"), "flaky")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-k.Done():
		case <-ctx.Done():
			t.Fatal("lock never reported lost")
		}
		if cause := context.Cause(k.Context()); cause != sqllock.ErrLockLost {
			t.Fatalf("cause %v, want ErrLockLost", cause)
		}
		// Lost no earlier than the trust window closes, and not long after:
		// the retries, every RenewInterval/4, find it closed at once.
		if took := time.Since(start); took < ttl-ttl/10 || took > ttl+every {
			t.Fatalf("lost after %v with TTL %v, renewal every %v", took, ttl, every)
		}
	})

	// 2. A release whose connection breaks after sending is reported as an
	// unknown outcome. Renewal stops at once (no renewal is expected below:
	// sqlmock fails the test on an unexpected statement), the handle is
	// released, and the release is retried in the background until the
	// database answers.
	synctest.Test(t, func(t *testing.T) {
		d, mock := newMock(t)
		ctx := ctxT(t)
		logs := newLogRecorder()
		const every = 10 * time.Millisecond
		l2, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Millisecond, RenewInterval: every, Logger: logs.logger()}})
		if err != nil {
			t.Fatal(err)
		}
		mock.ExpectQuery("INSERT INTO").WillReturnRows(sqlmock.NewRows([]string{"token"}).AddRow(8))
		mock.ExpectQuery("WITH r AS").WillReturnError(io.ErrUnexpectedEOF)
		mock.ExpectQuery("WITH r AS").WillReturnError(&pgconn.PgError{Code: "25006", Message: "cannot execute UPDATE in a read-only transaction"})
		mock.ExpectQuery("WITH r AS").WillReturnRows(sqlmock.NewRows([]string{"count"}).AddRow(1))
		k2, err := l2.TryAcquire(ctx, "ambiguous")
		if err != nil {
			t.Fatal(err)
		}
		if err := k2.Release(ctx); !errors.Is(err, sqllock.ErrOutcomeUnknown) {
			t.Fatalf("release over a broken connection: %v, want ErrOutcomeUnknown", err)
		}
		if cause := context.Cause(k2.Context()); cause != sqllock.ErrNotHeld {
			t.Fatalf("lock context after a failed release: cause %v, want ErrNotHeld", cause)
		}
		if err := k2.Release(ctx); err != sqllock.ErrNotHeld {
			t.Fatalf("second release: %v, want ErrNotHeld", err)
		}
		logs.wait(t, ctx, "sqllock: released in the background after a failed release")
		// Several renewal periods without a renewal, on synctest's clock.
		time.Sleep(5 * every)
		synctest.Wait()
		if err := mock.ExpectationsWereMet(); err != nil {
			t.Fatal(err)
		}
	})
}

// A release that keeps failing is retried a bounded number of times, and
// the lease is never renewed after the first failure.
func TestFailedReleaseGivesUp(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := ctxT(t)
		d, mock := newMock(t)
		logs := newLogRecorder()
		const every = 10 * time.Millisecond
		l, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Millisecond, RenewInterval: every, Logger: logs.logger()}})
		if err != nil {
			t.Fatal(err)
		}
		mock.ExpectQuery("INSERT INTO").WillReturnRows(sqlmock.NewRows([]string{"token"}).AddRow(9))
		refused := &pgconn.PgError{Code: "25006", Message: "cannot execute UPDATE in a read-only transaction"}
		for range 6 { // the release and five retries
			mock.ExpectQuery("WITH r AS").WillReturnError(refused)
		}
		k, err := l.TryAcquire(ctx, "stuck")
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Release(ctx); !errors.Is(err, sqllock.ErrReadOnly) {
			t.Fatalf("release on a read-only server: %v, want ErrReadOnly", err)
		}
		logs.wait(t, ctx, "sqllock: background release failed; giving up: the lease ends by its TTL")
		// Nothing more is sent: several renewal periods, on synctest's
		// clock, and every goroutine of the bubble idle.
		time.Sleep(5 * every)
		synctest.Wait()
		if err := mock.ExpectationsWereMet(); err != nil {
			t.Fatal(err)
		}
	})
}

// logRecorder is a slog handler that keeps the messages logged, for tests
// that wait for what the background work reports.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
	ch   chan struct{} // closed and replaced at every record
}

func newLogRecorder() *logRecorder { return &logRecorder{ch: make(chan struct{})} }

func (r *logRecorder) logger() *slog.Logger { return slog.New(r) }

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, rec.Message)
	close(r.ch)
	r.ch = make(chan struct{})
	r.mu.Unlock()
	return nil
}

// wait waits until msg has been logged.
func (r *logRecorder) wait(t *testing.T, ctx context.Context, msg string) {
	t.Helper()
	for {
		r.mu.Lock()
		found, ch := slices.Contains(r.msgs, msg), r.ch
		r.mu.Unlock()
		if found {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("%q never logged; logged: %q", msg, r.msgs)
		}
	}
}

// newMock returns a PostgreSQL dialect on a sqlmock pool that expects
// statements in order and matches them by prefix.
func newMock(t *testing.T) (*postgres.Dialect, sqlmock.Sqlmock) {
	t.Helper()
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(prefixMatcher))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := postgres.New(db)
	if err != nil {
		t.Fatal(err)
	}
	return d, mock
}

// A commit whose connection breaks has an unknown outcome: InTx reports it
// and does not run fn again. A serialization failure at commit is known to
// have rolled back, and is retried.
func TestInTxCommitOutcomes(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	d, mock := newMock(t)
	mock.ExpectBegin()
	mock.ExpectExec("SELECT set_config").WillReturnResult(sqlmock.NewResult(0, 0))
	mock.ExpectExec("UPDATE").WillReturnResult(sqlmock.NewResult(0, 1))
	mock.ExpectCommit().WillReturnError(io.ErrUnexpectedEOF)
	runs := 0
	err := rowlock.InTx(ctx, d, rowlock.TxOptions{}, func(ctx context.Context, tx *sql.Tx) error {
		runs++
		_, err := tx.ExecContext(ctx, "UPDATE items SET stock = stock - 1")
		return err
	})
	if !errors.Is(err, sqllock.ErrOutcomeUnknown) || runs != 1 {
		t.Fatalf("commit over a broken connection: %v after %d runs, want ErrOutcomeUnknown after 1", err, runs)
	}

	mock.ExpectBegin()
	mock.ExpectExec("SELECT set_config").WillReturnResult(sqlmock.NewResult(0, 0))
	mock.ExpectExec("UPDATE").WillReturnResult(sqlmock.NewResult(0, 1))
	mock.ExpectCommit().WillReturnError(&pgconn.PgError{Code: "40001", Message: "could not serialize access"})
	mock.ExpectBegin()
	mock.ExpectExec("SELECT set_config").WillReturnResult(sqlmock.NewResult(0, 0))
	mock.ExpectExec("UPDATE").WillReturnResult(sqlmock.NewResult(0, 1))
	mock.ExpectCommit()
	runs = 0
	err = rowlock.InTx(ctx, d, rowlock.TxOptions{Isolation: sql.LevelSerializable}, func(ctx context.Context, tx *sql.Tx) error {
		runs++
		_, err := tx.ExecContext(ctx, "UPDATE items SET stock = stock - 1")
		return err
	})
	if err != nil || runs != 2 {
		t.Fatalf("serialization failure at commit: %v after %d runs, want success after 2", err, runs)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}
