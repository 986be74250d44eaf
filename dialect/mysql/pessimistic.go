package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// rowLocks is the catalogue's Pessimistic.
type rowLocks struct{ *Dialect }

var _ dialect.Pessimistic = rowLocks{}

type rowLockQueries struct {
	// The share clause differs between servers: MariaDB has no FOR SHARE;
	// MySQL 8 takes NOWAIT only after FOR SHARE.
	mysql, mariadb                        sqlrun.RowModes
	create, token                         string
	tokensMax, tokensSelect, tokensDelete string
}

func buildRowLockQueries(db string) rowLockQueries {
	rowlocks, tokens := "sqllock_rowlocks", "sqllock_rowlock_tokens"
	sqlrun.Qualify(db, quote, &rowlocks, &tokens)
	lock := func(mode string) string {
		return fmt.Sprintf(`SELECT 1 FROM %s WHERE name = ? %s`, rowlocks, mode)
	}
	return rowLockQueries{
		mysql:   sqlrun.NewRowModes(lock, "FOR SHARE"),
		mariadb: sqlrun.NewRowModes(lock, "LOCK IN SHARE MODE"),
		create:  fmt.Sprintf(`INSERT INTO %s (name) VALUES (?) ON DUPLICATE KEY UPDATE name = name`, rowlocks),
		token:   fmt.Sprintf(`INSERT INTO %s () VALUES ()`, tokens),
		// The newest committed row stays; rows of open transactions are
		// skipped. (A subquery of a locking read would lock too: the
		// newest id is read first, without locks.)
		tokensMax:    fmt.Sprintf(`SELECT COALESCE(MAX(id), 0) FROM %s`, tokens),
		tokensSelect: fmt.Sprintf(`SELECT id FROM %s WHERE id < ? ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED`, tokens),
		// One id per statement: a DELETE ... IN (list) may scan, and wait
		// for the row of an open transaction.
		tokensDelete: fmt.Sprintf(`DELETE FROM %s WHERE id = ?`, tokens),
	}
}

// server tells MariaDB from MySQL, once.
type server struct {
	mu      sync.Mutex
	known   bool
	mariadb bool
}

func (d *Dialect) isMariaDB(ctx context.Context, tx *sql.Tx) (bool, error) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if !d.srv.known {
		var v string
		if err := tx.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&v); err != nil {
			return false, err
		}
		d.srv.known, d.srv.mariadb = true, strings.Contains(strings.ToLower(v), "mariadb")
	}
	return d.srv.mariadb, nil
}

// LockRow implements dialect.Pessimistic. Once the row is locked, the token
// comes from an AUTO_INCREMENT insert in the same transaction (a second
// statement: MySQL has no sequence that a rollback leaves alone). A waiting
// lock is cancelled on the server with KILL QUERY from another connection
// of the pool (the driver's own reaction to a cancelled context is to close
// the connection, which leaves the server waiting until
// innodb_lock_wait_timeout, 50 s by default); if none is free within
// a couple of seconds, the connection is closed and the server's wait ends
// at innodb_lock_wait_timeout.
func (d rowLocks) LockRow(ctx context.Context, p dialect.RowLockParams) (*dialect.RowLock, error) {
	if err := d.check(ctx); err != nil {
		return nil, err
	}
	if err := d.checkPessimistic(ctx); err != nil {
		return nil, err
	}
	r := d.rowLocker()
	return r.LockRow(ctx, p)
}

// rowLocker runs LockRow's statements.
func (d *Dialect) rowLocker() sqlrun.RowLocker {
	return sqlrun.RowLocker{
		Run: d.run,
		Lock: func(ctx context.Context, tx *sql.Tx, p dialect.RowLockParams) (int64, bool, error) {
			modes := &d.rq.mysql
			if p.Shared {
				m, err := d.isMariaDB(ctx, tx)
				if err != nil {
					return 0, false, err
				}
				if m {
					modes = &d.rq.mariadb
				}
			}
			q := modes.For(p)
			var one int
			err := tx.QueryRowContext(ctx, q, p.Name).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, false, nil
			}
			if err != nil {
				return 0, false, err
			}
			res, err := tx.ExecContext(ctx, d.rq.token)
			if err != nil {
				return 0, false, err
			}
			token, err := res.LastInsertId()
			return token, err == nil, err
		},
		Create: func(ctx context.Context, conn *sql.Conn, name string) error {
			// Concurrent first uses of a name may deadlock on the
			// duplicate check; the insert is then simply repeated.
			var err error
			for range 3 {
				_, err = conn.ExecContext(ctx, d.rq.create, name)
				if !errors.Is(wrap(err), dialect.ErrTransient) {
					break
				}
			}
			return err
		},
		Canceller: d.killQuery,
	}
}

// BeginTx implements dialect.Pessimistic. innodb_lock_wait_timeout has whole
// seconds (lockTimeout is rounded up) and is a session setting: the
// returned RowTx's Close sets it back to the server's default.
func (d rowLocks) BeginTx(ctx context.Context, opts *sql.TxOptions, lockTimeout time.Duration) (*dialect.RowTx, error) {
	conn, err := d.run.Pin(ctx)
	if err != nil {
		return nil, err
	}
	rt := &dialect.RowTx{Conn: conn}
	if lockTimeout > 0 {
		secs := (lockTimeout + time.Second - 1) / time.Second
		if err := d.setSession(ctx, conn, `SET SESSION innodb_lock_wait_timeout = `+strconv.FormatInt(int64(secs), 10)); err != nil {
			_ = dialect.Discard(conn)
			return nil, err
		}
		rt.Reset = func(ctx context.Context) error {
			return d.setSession(ctx, conn, `SET SESSION innodb_lock_wait_timeout = DEFAULT`)
		}
	}
	tx, done, err := d.run.BeginBounded(ctx, conn, opts)
	if err != nil {
		if errors.Is(err, dialect.ErrNoAnswer) {
			_ = dialect.Discard(conn)
			return nil, err
		}
		_ = rt.Close(context.WithoutCancel(ctx))
		return nil, wrap(err)
	}
	rt.Tx = tx
	reset := rt.Reset
	rt.Reset = func(ctx context.Context) error {
		done()
		if reset == nil {
			return nil
		}
		return reset(ctx)
	}
	return rt, nil
}

// setSession runs a session setting on conn, bounded by the statement
// timeout.
func (d rowLocks) setSession(ctx context.Context, conn *sql.Conn, stmt string) error {
	bctx, stop := d.run.Bound(ctx)
	defer stop()
	_, err := conn.ExecContext(bctx, stmt)
	return sqlrun.Settle(bctx, wrap(err))
}

// Classify implements dialect.Pessimistic.
func (d rowLocks) Classify(err error) error { return wrap(err) }

// reapRowLocks deletes a batch of rows of the row-lock table that no
// transaction holds or waits for: a held row is locked by its holder, and
// a waiter is queued behind a holder, so SKIP LOCKED passes over both. A
// waiter granted a row the reaper deleted meanwhile finds no row, and
// LockRow creates it again. Tokens are not in these rows: deleting them
// changes none.
func (d *Dialect) reapRowLocks(ctx context.Context, conn *sql.Conn, limit int) (int, error) {
	return reapTx(ctx, conn, func(tx *sql.Tx) (int, error) {
		var names []any
		err := sqlrun.EachOn(ctx, tx, wrap, &d.reap.rowLocks, &sqlrun.Params{Limit: limit}, func(rows *sql.Rows) error {
			var name []byte
			if err := rows.Scan(&name); err != nil {
				return err
			}
			names = append(names, name)
			return nil
		})
		if err != nil {
			return 0, err
		}
		n, err := deleteEach(ctx, tx, d.reap.deleteRowLock, names)
		return n, wrap(err)
	})
}

// reapTokens deletes up to limit committed rows of the token table but the
// newest. Open transactions' rows are skipped, not waited for.
func (d *Dialect) reapTokens(ctx context.Context, conn *sql.Conn, limit int) (int, error) {
	return reapTx(ctx, conn, func(tx *sql.Tx) (int, error) {
		var newest int64
		if err := tx.QueryRowContext(ctx, d.rq.tokensMax).Scan(&newest); err != nil {
			return 0, wrap(err)
		}
		rows, err := tx.QueryContext(ctx, d.rq.tokensSelect, newest, limit)
		if err != nil {
			return 0, wrap(err)
		}
		var ids []any
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return 0, wrap(err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, wrap(err)
		}
		n, err := deleteEach(ctx, tx, d.rq.tokensDelete, ids)
		return n, wrap(err)
	})
}
