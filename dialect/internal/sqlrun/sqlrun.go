// Package sqlrun runs the one-statement shapes the dialects share, leaving
// them only their SQL text and their error mapping.
package sqlrun

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// Wrap maps a driver error onto the dialect's sentinels.
type Wrap func(error) error

// ExecOne runs q and reports whether it affected exactly one row.
func ExecOne(ctx context.Context, db *sql.DB, wrap Wrap, q string, args ...any) (bool, error) {
	res, err := db.ExecContext(ctx, q, args...)
	if err != nil {
		return false, wrap(err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Micros runs q, which selects one integer count of microseconds; ok is
// false when it selects no row.
func Micros(ctx context.Context, db *sql.DB, wrap Wrap, q string, args ...any) (d time.Duration, ok bool, err error) {
	var us int64
	err = db.QueryRowContext(ctx, q, args...).Scan(&us)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, wrap(err)
	}
	return time.Duration(us) * time.Microsecond, true, nil
}

// Exists runs q in tx and reports whether it selected a row.
func Exists(ctx context.Context, tx *sql.Tx, wrap Wrap, q string, args ...any) (bool, error) {
	var one int
	err := tx.QueryRowContext(ctx, q, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, wrap(err)
}
