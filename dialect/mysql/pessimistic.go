package mysql

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

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
	rt.Reset = func(rctx context.Context) error {
		// Once ctx ended, database/sql may be closing conn after its own
		// rollback: a statement on conn would race with the close.
		ended := ctx.Err()
		done()
		switch {
		case reset == nil:
			return nil
		case ended != nil:
			return fmt.Errorf("sqllock: innodb_lock_wait_timeout not set back, the connection is closed instead: %w", ended)
		}
		return reset(rctx)
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

// listRowLocks implements dialect.Catalogue.RowLocks: the row locks held
// on the row-lock table, from MariaDB's information_schema.INNODB_LOCKS,
// which shows a lock only while some transaction waits for it (so only
// contended locks are listed), or where the server has no such table
// (MySQL 8) from performance_schema.data_locks, which shows every granted
// lock.
func (d *Dialect) listRowLocks(ctx context.Context) ([]dialect.Holder, error) {
	ctx, stop := d.run.Bound(ctx)
	defer stop()
	return listRowLocks(ctx, d.db, d.database)
}

// listRowLocks lists the row locks held on the row-lock table of database
// ("": the connection's) on db (see Dialect.listRowLocks).
func listRowLocks(ctx context.Context, db *sql.DB, database string) ([]dialect.Holder, error) {
	table := "CONCAT('`', DATABASE(), '`.`sqllock_rowlocks`')"
	args := []any{}
	if database != "" {
		table = "?"
		args = append(args, "`"+database+"`.`sqllock_rowlocks`")
	}
	q := `SELECT l.lock_data, l.lock_mode, t.trx_mysql_thread_id, COALESCE(p.host, ''), TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6)),
	(SELECT COUNT(*) FROM information_schema.INNODB_TRX w
		JOIN information_schema.INNODB_LOCKS wl ON wl.lock_id = w.trx_requested_lock_id
		WHERE wl.lock_table = l.lock_table AND wl.lock_space = l.lock_space
			AND wl.lock_page = l.lock_page AND wl.lock_rec = l.lock_rec)
FROM information_schema.INNODB_LOCKS l
JOIN information_schema.INNODB_TRX t ON t.trx_id = l.lock_trx_id
LEFT JOIN information_schema.PROCESSLIST p ON p.id = t.trx_mysql_thread_id
WHERE l.lock_table = ` + table + ` AND l.lock_type = 'RECORD'
	AND l.lock_id NOT IN (SELECT trx_requested_lock_id FROM information_schema.INNODB_TRX WHERE trx_requested_lock_id IS NOT NULL)`
	rs, err := db.QueryContext(ctx, q, args...)
	switch errorNumber(err) {
	case 0:
	case 1109: // unknown table: MySQL 8
		return listDataLocks(ctx, db, database)
	case 1227: // access denied
		return nil, fmt.Errorf("%w: reading information_schema.INNODB_LOCKS needs the PROCESS privilege", dialect.ErrUnsupported)
	default:
		return nil, fmt.Errorf("listing row locks: %w", wrap(err))
	}
	return scanRowLocks(rs)
}

// listDataLocks lists the row locks held on the row-lock table of database
// from MySQL 8's performance_schema.data_locks.
func listDataLocks(ctx context.Context, db *sql.DB, database string) ([]dialect.Holder, error) {
	var name any // NULL: the connection's database
	if database != "" {
		name = database
	}
	const q = `SELECT l.LOCK_DATA, l.LOCK_MODE, t.trx_mysql_thread_id, COALESCE(p.HOST, ''), TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6)),
	(SELECT COUNT(*) FROM performance_schema.data_lock_waits w WHERE w.BLOCKING_ENGINE_LOCK_ID = l.ENGINE_LOCK_ID)
FROM performance_schema.data_locks l
JOIN information_schema.INNODB_TRX t ON t.trx_id = l.ENGINE_TRANSACTION_ID
LEFT JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
WHERE l.OBJECT_SCHEMA = COALESCE(?, DATABASE()) AND l.OBJECT_NAME = 'sqllock_rowlocks'
	AND l.LOCK_TYPE = 'RECORD' AND l.LOCK_STATUS = 'GRANTED'`
	rs, err := db.QueryContext(ctx, q, name)
	switch errorNumber(err) {
	case 0:
	case 1142, 1227: // SELECT denied, access denied
		return nil, fmt.Errorf("%w: reading performance_schema.data_locks needs SELECT on it, and information_schema.INNODB_TRX the PROCESS privilege", dialect.ErrUnsupported)
	default:
		return nil, fmt.Errorf("listing row locks: %w", wrap(err))
	}
	return scanRowLocks(rs)
}

// errorNumber is the server's error number of err, 0 for no error, -1 for
// an error the server did not number.
func errorNumber(err error) int {
	var me *gomysql.MySQLError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &me):
		return int(me.Number)
	}
	return -1
}

// scanRowLocks reads the rows of listRowLocks's and listDataLocks's
// queries: lock data, lock mode, the holder's connection, its host, how
// long its transaction has run (µs), and the number of waiters.
func scanRowLocks(rs *sql.Rows) ([]dialect.Holder, error) {
	defer rs.Close()
	var out []dialect.Holder
	for rs.Next() {
		var (
			h                dialect.Holder
			data, mode, host string
			thread, heldUS   int64
		)
		if err := rs.Scan(&data, &mode, &thread, &host, &heldUS, &h.Waiters); err != nil {
			return nil, wrap(err)
		}
		name, ok := lockDataName(data)
		if !ok {
			continue // the supremum pseudo-record, say
		}
		h.Name, h.Primitive, h.Holds, h.Mode = name, "pessimistic", 1, "exclusive"
		if strings.HasPrefix(mode, "S") {
			h.Mode = "shared"
		}
		h.Owner = fmt.Sprintf("connection %d", thread)
		if host != "" {
			h.Owner += " from " + host
		}
		h.HeldFor = time.Duration(heldUS) * time.Microsecond
		h.AcquiredAt = time.Now().Add(-h.HeldFor).Truncate(time.Millisecond).UTC()
		out = append(out, h)
	}
	return out, wrap(rs.Err())
}

// lockDataName decodes the lock data (INNODB_LOCKS.lock_data,
// data_locks.LOCK_DATA) of the row-lock table's VARBINARY key: 0x followed
// by hex digits, or a quoted string; not a pseudo-record.
func lockDataName(data string) (string, bool) {
	if h, ok := strings.CutPrefix(data, "0x"); ok {
		b, err := hex.DecodeString(h)
		return string(b), err == nil
	}
	if len(data) < 2 || data[0] != '\'' || data[len(data)-1] != '\'' {
		return "", false // the supremum pseudo-record, say
	}
	s, err := strconv.Unquote(`"` + data[1:len(data)-1] + `"`)
	return s, err == nil
}
