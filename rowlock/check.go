package rowlock

import (
	"context"
	"database/sql"
	"errors"
)

// CheckUpdate turns the result of a version-checked write into an error:
// ErrConflict when it affected no row, err itself when err is not nil, nil
// otherwise. It takes ExecContext's results directly:
//
//	err := rowlock.CheckUpdate(tx.ExecContext(ctx,
//		`UPDATE items SET stock = ?, version = version + 1 WHERE id = ? AND version = ?`,
//		stock, id, version))
//
// The write must change the version column, as optimistic writes do anyway.
// That makes the affected-row count equal the matched-row count on MySQL and
// MariaDB whatever the DSN's clientFoundRows says: a matching row always
// changes.
func CheckUpdate(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrConflict
	}
	return nil
}

// Querier runs a query that returns at most one row. *sql.DB, *sql.Tx and
// *sql.Conn implement it.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ConflictOrMissing tells a moved version from a missing row after
// CheckUpdate reported ErrConflict. It runs query, which must select a row
// exactly when the target row exists (for example SELECT 1 FROM items WHERE
// id = ?), and returns ErrNotFound if it selects none, ErrConflict if it
// selects one, or the query's error. ErrNotFound does not wrap
// ErrConflict, so RetryOnConflict does not retry it.
func ConflictOrMissing(ctx context.Context, q Querier, query string, args ...any) error {
	var one any
	err := q.QueryRowContext(ctx, query, args...).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ErrNotFound
	case err != nil:
		return err
	}
	return ErrConflict
}
