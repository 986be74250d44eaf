// Package sqlrun runs the one-statement shapes the dialects share, leaving
// them only their SQL text and their error mapping.
package sqlrun

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// Wrap maps a driver error onto the dialect's sentinels.
type Wrap func(error) error

// Execer runs a statement: a *sql.DB or a *sql.Conn.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// ExecOne runs q and reports whether it affected exactly one row.
func ExecOne(ctx context.Context, db Execer, wrap Wrap, q string, args ...any) (bool, error) {
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

// ListMicros runs q, which selects name, owner, token, holds, and the
// acquisition time, the expiry time (both in microseconds since the Unix
// epoch) and the time left until expiry (in microseconds), and returns the
// rows as LockInfo.
func ListMicros(ctx context.Context, db *sql.DB, wrap Wrap, q string) ([]dialect.LockInfo, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, wrap(err)
	}
	defer rows.Close()
	var out []dialect.LockInfo
	for rows.Next() {
		var (
			li                           dialect.LockInfo
			acquired, expires, expiresIn int64
		)
		if err := rows.Scan(&li.Name, &li.Owner, &li.Token, &li.Holds, &acquired, &expires, &expiresIn); err != nil {
			return nil, wrap(err)
		}
		li.AcquiredAt = time.UnixMicro(acquired).UTC()
		li.ExpiresAt = time.UnixMicro(expires).UTC()
		li.ExpiresIn = time.Duration(expiresIn) * time.Microsecond
		out = append(out, li)
	}
	return out, wrap(rows.Err())
}

// Renewed reads (name, owner, token) rows of renewed leases and reports,
// for each of ls, whether it is among them. It closes rows.
func Renewed(rows *sql.Rows, ls []dialect.Lease, wrap Wrap) ([]bool, error) {
	defer rows.Close()
	got := make(map[dialect.Lease]bool, len(ls))
	for rows.Next() {
		var (
			l           dialect.Lease
			name, owner []byte
		)
		if err := rows.Scan(&name, &owner, &l.Token); err != nil {
			return nil, wrap(err)
		}
		l.Name, l.Owner = string(name), string(owner)
		got[l] = true
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err)
	}
	out := make([]bool, len(ls))
	for i, l := range ls {
		out[i] = got[l]
	}
	return out, nil
}
