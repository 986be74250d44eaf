package rowlock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/observe"
)

// TxOptions configure InTx. The zero value of each field selects its
// default.
type TxOptions struct {
	// Isolation is the transaction's isolation level. Default: the
	// server's (READ COMMITTED on PostgreSQL, REPEATABLE READ on MySQL).
	Isolation sql.IsolationLevel
	// ReadOnly starts a read-only transaction.
	ReadOnly bool
	// LockTimeout bounds each lock wait of the transaction's statements
	// (lock_timeout on PostgreSQL; innodb_lock_wait_timeout, in whole
	// seconds rounded up, on MySQL). A wait that exceeds it makes InTx
	// return an error wrapping sqllock.ErrLocked, without retrying. Default 5s; a
	// negative value keeps the server's setting.
	LockTimeout time.Duration
	// Retry bounds the runs of fn after deadlocks and serialization
	// failures: 10 runs in all by default.
	Retry RetryOptions
}

const defaultLockTimeout = 5 * time.Second

// InTx runs fn in a transaction on d's pool and commits it if fn returns
// nil; if fn returns an error, the transaction is rolled back and InTx
// returns that error. It is the helper for users' own pessimistic work,
// such as
//
//	SELECT stock FROM items WHERE id = ? FOR UPDATE  -- then check, then UPDATE
//
// When the database rolls the transaction back because of a deadlock
// (PostgreSQL 40P01, MySQL 1213) or a serialization failure (40001) — in a
// statement of fn or in the commit — InTx runs fn again in a new
// transaction, after a fully jittered, doubling backoff, up to
// opts.Retry.Attempts runs in all. fn must therefore do all its work
// through tx and have no other effects, or only effects that are safe to
// repeat. Any other error of fn ends InTx at once; a lock wait longer than
// opts.LockTimeout ends it with an error wrapping sqllock.ErrLocked.
//
// If the connection fails while the commit is under way, the commit's
// outcome is unknown: InTx does not retry then (the first run may have
// committed) and returns an error wrapping sqllock.ErrOutcomeUnknown. Settle it
// from the data, for instance with an idempotency key written by fn.
//
// It returns an error wrapping sqllock.ErrUnsupported if d has no row
// locks (dialect.Catalogue.Pessimistic).
func InTx(ctx context.Context, d dialect.Dialect, opts TxOptions, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if isNil(d) || d.DB() == nil {
		return sqllock.ErrNilDB
	}
	cat := d.Catalogue()
	pd := cat.Pessimistic
	if pd == nil {
		return cat.Unsupported(d.Name(), "Pessimistic")
	}
	if _, err := opts.Retry.withDefaults(defaultTxAttempts); err != nil {
		return err
	}
	timeout := opts.LockTimeout
	switch {
	case timeout == 0:
		timeout = defaultLockTimeout
	case timeout < 0:
		timeout = 0
	}
	txo := &sql.TxOptions{Isolation: opts.Isolation, ReadOnly: opts.ReadOnly}
	return retry(ctx, opts.Retry, observe.OpInTx, defaultTxAttempts, sqllock.ErrTransient, func(ctx context.Context) error {
		return runTx(ctx, pd, txo, timeout, fn)
	})
}

// runTx is one run of InTx's transaction.
func runTx(ctx context.Context, d dialect.Pessimistic, txo *sql.TxOptions, timeout time.Duration,
	fn func(ctx context.Context, tx *sql.Tx) error) error {
	rt, err := d.BeginTx(ctx, txo, timeout)
	if err != nil {
		return fmt.Errorf("sqllock: begin: %w", err)
	}
	defer func() { _ = rt.Close(context.WithoutCancel(ctx)) }()
	if err := fn(ctx, rt.Tx); err != nil {
		_ = rt.Tx.Rollback()
		if cerr := d.Classify(err); errors.Is(cerr, sqllock.ErrTransient) || errors.Is(cerr, sqllock.ErrLocked) {
			// Keep fn's own wrapping, and add the classification.
			return fmt.Errorf("%w: %w", sentinelOf(cerr), err)
		}
		return err
	}
	if err := rt.Tx.Commit(); err != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			// database/sql refused to send the commit and rolls back.
			return fmt.Errorf("sqllock: commit: %w", err)
		}
		return fmt.Errorf("sqllock: commit: %w", d.Classify(err))
	}
	return nil
}

// sentinelOf returns the retry-relevant sentinel err wraps.
func sentinelOf(err error) error {
	if errors.Is(err, sqllock.ErrTransient) {
		return sqllock.ErrTransient
	}
	return sqllock.ErrLocked
}
