package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// tidbReap are the TiDB reaper's statements. TiDB parses SKIP LOCKED but
// ignores it (it returns rows that others locked, and locks none), so the
// reaper reads candidates without locks, then locks each with NOWAIT,
// re-checking that it may go, and skips those that others hold.
type tidbReap struct {
	locks, versions tidbFloorReap
	rowLocks        rowLockReap
}

// tidbFloorReap reaps a table whose new rows start above a floor: lock the
// floor, read a batch of expired and released rows, lock each that is
// still expired (NOWAIT) and delete it, raise the floor to the largest
// token deleted.
type tidbFloorReap struct {
	lockFloor, candidates, lock, delete, raiseFloor string
}

// newTiDBFloorReap builds the statements on table, whose token column is
// token, and on its floor, whose column is floorCol.
func newTiDBFloorReap(table, token, floor, floorCol string) tidbFloorReap {
	return tidbFloorReap{
		lockFloor:  fmt.Sprintf(`SELECT %s FROM %s WHERE id = 1 FOR UPDATE`, floorCol, floor),
		candidates: fmt.Sprintf(`SELECT name FROM %s WHERE expires_at <= %s ORDER BY expires_at LIMIT ?`, table, now),
		lock:       fmt.Sprintf(`SELECT %s FROM %s WHERE name = ? AND expires_at <= %s FOR UPDATE NOWAIT`, token, table, now),
		delete:     deleteByName(table),
		raiseFloor: fmt.Sprintf(`UPDATE %[1]s SET %[2]s = GREATEST(%[2]s, ?) WHERE id = 1`, floor, floorCol),
	}
}

// rowLockReap reaps the row-lock table: read a batch of names, lock each
// that no transaction holds (NOWAIT) and delete it.
type rowLockReap struct {
	candidates, lock, delete string
}

// Reap is Dialect.Reap on TiDB: as the MySQL dialect's, with
// NOWAIT locks of each row instead of SKIP LOCKED (see tidbReap). A row
// that others hold stays until a later call: one whose batches are full of
// held rows deletes nothing else.
func (t *tidb) reapAll(ctx context.Context, p dialect.ReapParams) (int, error) {
	if err := t.d.check(ctx); err != nil {
		return 0, err
	}
	return t.d.reapEach(ctx, p.Limit, t.reapLocks, t.reapVersions, t.reapRowLocks, t.d.reapTokens)
}

func (t *tidb) reapLocks(ctx context.Context, conn *sql.Conn, limit int) (int, error) {
	return reapTiDBFloored(ctx, conn, &t.reap.locks, limit)
}

func (t *tidb) reapVersions(ctx context.Context, conn *sql.Conn, limit int) (int, error) {
	return reapTiDBFloored(ctx, conn, &t.reap.versions, limit)
}

func reapTiDBFloored(ctx context.Context, conn *sql.Conn, s *tidbFloorReap, limit int) (int, error) {
	return reapTx(ctx, conn, func(tx *sql.Tx) (int, error) {
		var floor int64
		if err := tx.QueryRowContext(ctx, s.lockFloor).Scan(&floor); err != nil {
			return 0, wrapTiDB(err)
		}
		names, err := names(ctx, tx, s.candidates, limit)
		if err != nil {
			return 0, err
		}
		n, top, err := deleteNoWait(ctx, tx, s.lock, s.delete, names)
		if err != nil {
			return 0, err
		}
		if top > floor {
			if _, err := tx.ExecContext(ctx, s.raiseFloor, top); err != nil {
				return 0, wrapTiDB(err)
			}
		}
		return n, nil
	})
}

func (t *tidb) reapRowLocks(ctx context.Context, conn *sql.Conn, limit int) (int, error) {
	s := &t.reap.rowLocks
	return reapTx(ctx, conn, func(tx *sql.Tx) (int, error) {
		names, err := names(ctx, tx, s.candidates, limit)
		if err != nil {
			return 0, err
		}
		n, _, err := deleteNoWait(ctx, tx, s.lock, s.delete, names)
		return n, err
	})
}

// deleteNoWait deletes with del each of names whose row lock locks
// without waiting (a row locked by another transaction is skipped), and
// returns how many it deleted and the largest value lock selected of them.
func deleteNoWait(ctx context.Context, tx *sql.Tx, lock, del string, names [][]byte) (n int, top int64, err error) {
	for _, name := range names {
		var v int64
		ok, err := lockNoWait(ctx, tx, lock, name, &v)
		if err != nil {
			return 0, 0, err
		}
		if !ok {
			continue
		}
		if _, err := tx.ExecContext(ctx, del, name); err != nil {
			return 0, 0, wrapTiDB(err)
		}
		n++
		top = max(top, v)
	}
	return n, top, nil
}

// names runs query, which selects names, with limit; the error is wrapped.
func names(ctx context.Context, tx *sql.Tx, query string, limit int) ([][]byte, error) {
	rows, err := tx.QueryContext(ctx, query, limit)
	if err != nil {
		return nil, wrapTiDB(err)
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var name []byte
		if err := rows.Scan(&name); err != nil {
			return nil, wrapTiDB(err)
		}
		out = append(out, name)
	}
	return out, wrapTiDB(rows.Err())
}

// lockNoWait runs query, a NOWAIT locking read of name's row, into dest. It
// reports false when the row is gone, no longer qualifies, or is locked by
// another transaction (the refusal rolls back that statement only); the
// error is wrapped.
func lockNoWait(ctx context.Context, tx *sql.Tx, query string, name []byte, dest any) (bool, error) {
	err := wrapTiDB(tx.QueryRowContext(ctx, query, name).Scan(dest))
	if errors.Is(err, sql.ErrNoRows) || errors.Is(err, dialect.ErrLocked) {
		return false, nil
	}
	return err == nil, err
}
