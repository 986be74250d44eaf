package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// rowLocks is the catalogue's Pessimistic.
type rowLocks struct{ *Dialect }

var _ dialect.Pessimistic = rowLocks{}

type rowLockQueries struct {
	modes  sqlrun.RowModes
	create string
}

func buildRowLockQueries(schema, durable string) rowLockQueries {
	rowlocks, seq := "sqllock_rowlocks", "sqllock_rowlock_token_seq"
	sqlrun.Qualify(schema, quote, &rowlocks, &seq)
	// The locking read sits in a subquery so that nextval runs above its
	// LockRows step: the token is drawn once the lock is granted, and so
	// exceeds the token of every earlier holder. Its high bits are the
	// timeline's (see epoch.go).
	lock := func(mode string) string {
		return fmt.Sprintf(`SELECT %s + nextval('%s') FROM (SELECT 1 FROM %s WHERE name = $1 %s) AS l WHERE %s`, timelineEpoch, seq, rowlocks, mode, durable)
	}
	return rowLockQueries{
		modes:  sqlrun.NewRowModes(lock, "FOR SHARE"),
		create: fmt.Sprintf(`INSERT INTO %s (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`, rowlocks),
	}
}

// LockRow implements dialect.Pessimistic. A waiting lock is cancelled on
// the server with a cancel request (pgx's own reaction to a cancelled
// context is to close the connection, which leaves the server waiting).
func (d rowLocks) LockRow(ctx context.Context, p dialect.RowLockParams) (*dialect.RowLock, error) {
	r := sqlrun.RowLocker{
		Run: d.run,
		Lock: func(ctx context.Context, tx *sql.Tx, p dialect.RowLockParams) (int64, bool, error) {
			q := d.rq.modes.For(p)
			var token int64
			err := tx.QueryRowContext(ctx, q, d.args(p.Name)...).Scan(&token)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, false, nil
			}
			return token, err == nil, err
		},
		Create: func(ctx context.Context, conn *sql.Conn, name string) error {
			_, err := conn.ExecContext(ctx, d.rq.create, d.args(name)...)
			return err
		},
		Canceller: canceller,
	}
	return r.LockRow(ctx, p)
}

// canceller returns a function sending a cancel request for conn's backend
// (on a connection of its own: it needs no connection of the pool).
func canceller(_ context.Context, conn *sql.Conn) (func(context.Context) error, error) {
	var cancel func(context.Context) error
	err := conn.Raw(func(dc any) error {
		// Another driver (a test double) gets no server-side cancel: its
		// statements end with the context.
		if c, ok := dc.(interface{ Conn() *pgx.Conn }); ok {
			cancel = c.Conn().PgConn().CancelRequest
		}
		return nil
	})
	return cancel, err
}

// BeginTx implements dialect.Pessimistic: lock_timeout is set for the
// transaction only (SET LOCAL), so nothing needs undoing.
func (d rowLocks) BeginTx(ctx context.Context, opts *sql.TxOptions, lockTimeout time.Duration) (*dialect.RowTx, error) {
	conn, err := d.run.Pin(ctx)
	if err != nil {
		return nil, err
	}
	tx, done, err := d.run.BeginBounded(ctx, conn, opts)
	if err != nil {
		if errors.Is(err, dialect.ErrNoAnswer) {
			_ = dialect.Discard(conn)
			return nil, err
		}
		conn.Close()
		return nil, wrap(err)
	}
	if lockTimeout > 0 {
		ms := strconv.FormatInt(max(lockTimeout.Milliseconds(), 1), 10) + "ms"
		bctx, stop := d.run.Bound(ctx)
		_, err = tx.ExecContext(bctx, `SELECT set_config('lock_timeout', $1, true)`, d.args(ms)...)
		err = sqlrun.Settle(bctx, wrap(err))
		stop()
		if err != nil {
			_ = tx.Rollback()
			done()
			_ = dialect.Discard(conn)
			return nil, err
		}
	}
	return &dialect.RowTx{Conn: conn, Tx: tx, Reset: func(context.Context) error { done(); return nil }}, nil
}

// Classify implements dialect.Pessimistic.
func (d rowLocks) Classify(err error) error { return wrap(err) }

// Keep-alive statements of pessimistic locks: comments, which the server
// runs as pgx's Ping does ("-- ping"), and which stay as the session's last
// statement in pg_stat_activity, naming the row-lock table and the lock's
// mode as the locking statement did.
const (
	pingShared    = "-- sqllock_rowlocks FOR SHARE"
	pingExclusive = "-- sqllock_rowlocks FOR UPDATE"
)

// ping implements dialect.Catalogue.Ping: pgx's stdlib Ping with a
// statement that names the lock's mode. As that Ping, it closes a
// connection it finds failing and reports driver.ErrBadConn. Another driver
// (a test double) gets its own Ping.
func ping(ctx context.Context, driverConn any, shared bool) error {
	c, ok := driverConn.(interface {
		Conn() *pgx.Conn
		Close() error
	})
	if !ok {
		if p, ok := driverConn.(driver.Pinger); ok {
			return p.Ping(ctx)
		}
		return nil
	}
	pc := c.Conn().PgConn()
	if pc.IsClosed() {
		return driver.ErrBadConn
	}
	q := pingExclusive
	if shared {
		q = pingShared
	}
	if err := pc.Exec(ctx, q).Close(); err != nil {
		_ = c.Close()
		return driver.ErrBadConn
	}
	return nil
}

// busy reports whether driverConn, a pgx connection, is in the middle of a
// statement: its results not all read (see dialect.Catalogue.Busy).
func busy(driverConn any) bool {
	c, ok := driverConn.(interface{ Conn() *pgx.Conn })
	return ok && c.Conn().PgConn().IsBusy()
}

// listRowLocks implements dialect.Catalogue.RowLocks. PostgreSQL marks a
// locked row with the locking transaction's ID (xmax), which pg_locks and
// pg_stat_activity resolve to the session holding it while that
// transaction runs; several shared holders share a MultiXact ID that only
// the pgrowlocks extension resolves, so those rows are not shown. The mode
// is read from the session's last statement (rowLockMode).
func (d *Dialect) listRowLocks(ctx context.Context) ([]dialect.Holder, error) {
	rowlocks := "sqllock_rowlocks"
	sqlrun.Qualify(d.schema, quote, &rowlocks)
	q := `SELECT r.name, a.pid, COALESCE(host(a.client_addr), 'local'), COALESCE(a.application_name, ''),
	COALESCE(a.xact_start, now()), now(), COALESCE(a.query, ''),
	(SELECT count(DISTINCT w.pid) FROM pg_locks w WHERE NOT w.granted AND (
		(w.locktype = 'transactionid' AND w.transactionid = r.xmax) OR
		(w.locktype = 'tuple' AND w.relation = $1::regclass
			AND w.page = (r.ctid::text::point)[0] AND w.tuple = (r.ctid::text::point)[1])))
FROM ` + rowlocks + ` r
JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = r.xmax AND l.granted AND l.mode = 'ExclusiveLock'
JOIN pg_stat_activity a ON a.pid = l.pid`
	ctx, stop := d.run.Bound(ctx)
	defer stop()
	rs, err := d.db.QueryContext(ctx, q, d.args(rowlocks)...)
	if err != nil {
		return nil, fmt.Errorf("listing row locks: %w", wrap(err))
	}
	defer rs.Close()
	var out []dialect.Holder
	for rs.Next() {
		var (
			h          dialect.Holder
			pid        int
			addr, app  string
			start, now time.Time
			query      string
		)
		if err := rs.Scan(&h.Name, &pid, &addr, &app, &start, &now, &query, &h.Waiters); err != nil {
			return nil, wrap(err)
		}
		h.Primitive, h.Mode, h.Holds = "pessimistic", rowLockMode(query), 1
		h.Owner = fmt.Sprintf("backend %d from %s", pid, addr)
		if app != "" {
			h.Owner += " (" + app + ")"
		}
		h.AcquiredAt, h.HeldFor = start.UTC(), now.Sub(start)
		out = append(out, h)
	}
	return out, wrap(rs.Err())
}

// rowLockMode tells the mode of the row lock a session holds from its last
// statement, the only trace PostgreSQL keeps without the pgrowlocks
// extension: the locking read or the keep-alive (ping), which both name the
// row-lock table and say FOR SHARE for a shared lock. "unknown" once the
// session ran another statement (the holder's own, on the lock's
// transaction).
func rowLockMode(query string) string {
	switch {
	case !strings.Contains(query, "sqllock_rowlocks"):
		return "unknown"
	case strings.Contains(query, "FOR SHARE"):
		return "shared"
	}
	return "exclusive"
}
