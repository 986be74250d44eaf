package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/postgres"
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
// under renewals and under a release.
func TestRenewalFailuresAndUnknownOutcomes(t *testing.T) {
	t.Parallel()
	d, mock := newMock(t)
	const ttl = 60 * time.Millisecond
	l, err := sqllock.NewTable(d, sqllock.Options{TTL: ttl, RenewInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)

	// 1. A renewal that keeps failing with a broken connection is retried
	// inside the trust window, then the lock is reported lost when it closes.
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
	// Lost no earlier than the trust window closes, and not long after: the
	// retries, every RenewInterval/4, find it closed at once. The upper bound
	// leaves seconds for a busy machine's late timers.
	if took := time.Since(start); took < ttl-ttl/10 || took > ttl+5*time.Second {
		t.Fatalf("lost after %v with TTL %v", took, ttl)
	}

	// 2. A release whose connection breaks after sending is reported as an
	// unknown outcome; the handle stays releasable, and the retry settles it.
	d, mock = newMock(t)
	l2, err := sqllock.NewTable(d, sqllock.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	mock.ExpectQuery("INSERT INTO").WillReturnRows(sqlmock.NewRows([]string{"token"}).AddRow(8))
	mock.ExpectQuery("WITH r AS").WillReturnError(io.ErrUnexpectedEOF)
	mock.ExpectQuery("WITH r AS").WillReturnRows(sqlmock.NewRows([]string{"count"}).AddRow(0)) // applied the first time after all
	k2, err := l2.TryAcquire(ctx, "ambiguous")
	if err != nil {
		t.Fatal(err)
	}
	if err := k2.Release(ctx); !errors.Is(err, sqllock.ErrOutcomeUnknown) {
		t.Fatalf("release over a broken connection: %v, want ErrOutcomeUnknown", err)
	}
	if k2.Context().Err() != nil {
		t.Fatal("local state changed before the database answered")
	}
	if err := k2.Release(ctx); !errors.Is(err, sqllock.ErrLockLost) {
		t.Fatalf("retried release that finds nothing: %v, want ErrLockLost", err)
	}

	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
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
	err := sqllock.InTx(ctx, d, sqllock.TxOptions{}, func(ctx context.Context, tx *sql.Tx) error {
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
	err = sqllock.InTx(ctx, d, sqllock.TxOptions{Isolation: sql.LevelSerializable}, func(ctx context.Context, tx *sql.Tx) error {
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
