// Package mysql is sqllock's MySQL and MariaDB dialect, on
// github.com/go-sql-driver/mysql.
//
// It works whatever the DSN says about parseTime, clientFoundRows, loc or the
// session time zone: times travel as integers computed on the server in UTC,
// and every state change is detected in a way that does not depend on
// whether the server counts matched or changed rows. It needs MySQL 8.0.1+ or
// MariaDB 10.6+ (for SKIP LOCKED in the reaper).
package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4/database"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/internal/sqlmigrate"
	"github.com/sqllock/sqllock/dialect/internal/sqlrun"
	"github.com/sqllock/sqllock/migrations"
)

// Dialect is the MySQL/MariaDB dialect. Create it with New.
type Dialect struct {
	db       *sql.DB
	database string // validated; "" means the connection's default database
	q        queries
	rq       rowLockQueries
	srv      server
	run      *sqlrun.Runner
	marks    marker // tags grant statements, so that they can be found and cancelled
	clock    clockCheck
}

// Option configures a Dialect.
type Option func(*Dialect) error

// WithDatabase keeps sqllock's tables in the named database (schema) instead
// of the connection's default one. Migrate creates it if it does not exist.
// The name must be a plain identifier (see dialect.ValidateIdentifier).
func WithDatabase(name string) Option {
	return func(d *Dialect) error {
		if err := dialect.ValidateIdentifier(name); err != nil {
			return err
		}
		d.database = name
		return nil
	}
}

// New returns the dialect for db, a pool opened with the "mysql" driver.
func New(db *sql.DB, opts ...Option) (*Dialect, error) {
	if db == nil {
		return nil, dialect.ErrNilDB
	}
	d := &Dialect{db: db}
	for _, o := range opts {
		if err := o(d); err != nil {
			return nil, err
		}
	}
	d.q = buildQueries(d.database)
	d.rq = buildRowLockQueries(d.database)
	d.run = &sqlrun.Runner{DB: db, Wrap: wrap}
	d.marks = newMarker()
	return d, nil
}

// Name returns "mysql".
func (d *Dialect) Name() string { return "mysql" }

// DB returns the pool lock statements run on.
func (d *Dialect) DB() *sql.DB { return d.db }

// Database returns the configured database, or "" for the DSN's default.
func (d *Dialect) Database() string { return d.database }

// Migrations returns the MySQL migration files.
func (d *Dialect) Migrations() fs.FS { return migrations.MySQL() }

// quote backquotes a validated identifier.
func quote(ident string) string { return "`" + ident + "`" }

type queries struct {
	acquire, remaining                               string
	lease                                            leaseQueries // on sqllock_locks
	reapLockFloor, reapSelect, reapDelete, reapFloor string
	versions                                         versionQueries
}

// leaseQueries are the statements on a lease, for a table with the columns
// of sqllock_locks whose token column is named token.
type leaseQueries struct {
	renew, release, guard, list string
	// renewMany and renewed take a batch: {names} becomes a list of name
	// placeholders, {leases} a list of (name, owner, token) tuples.
	renewMany, renewed string
}

// now is the current time in UTC, on a clock that no session setting moves,
// whatever the session time zone.
//
// UTC_TIMESTAMP(6) and NOW(6) are the statement's start on the session's
// clock, which a session can set (SET timestamp = ..., as replication
// appliers, fixtures and some drivers' init statements do); SYSDATE(6) is
// the server's real clock, in the session time zone. Their difference is
// how far the session's clock is off (plus the time the statement has run),
// so adding it to UTC_TIMESTAMP(6) gives the real time in UTC. SYSDATE(6)
// is read at each use; every use within a statement agrees within the
// statement's run time, and the statements below are written so that only
// the order of such reads matters, never their equality. A server started
// with --sysdate-is-now makes SYSDATE() follow the session clock too: the
// dialect detects it once and refuses to grant leases (see checkServer).
const now = "(UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND)"

func buildLeaseQueries(table, token string) leaseQueries {
	return leaseQueries{
		// GREATEST(... + 1 µs) makes every renewal change the row, so the
		// affected-row count is 1 whether the DSN counts found or changed
		// rows.
		renew: fmt.Sprintf(`UPDATE %[1]s SET expires_at = GREATEST(expires_at + INTERVAL 1 MICROSECOND, %[3]s + INTERVAL ? MICROSECOND)
WHERE name = ? AND owner = ? AND %[2]s = ? AND holds > 0 AND expires_at > %[3]s`, table, token, now),
		renewMany: fmt.Sprintf(`UPDATE %[1]s SET expires_at = GREATEST(expires_at + INTERVAL 1 MICROSECOND, %[3]s + INTERVAL ? MICROSECOND)
WHERE name IN ({names}) AND (name, owner, %[2]s) IN ({leases}) AND holds > 0 AND expires_at > %[3]s`, table, token, now),
		// No RETURNING: a lease of the batch is live afterwards exactly
		// when the update renewed it (nothing else makes the same
		// (name, owner, token) live again).
		renewed: fmt.Sprintf(`SELECT name, owner, %[2]s FROM %[1]s
WHERE name IN ({names}) AND (name, owner, %[2]s) IN ({leases}) AND holds > 0 AND expires_at > %[3]s`, table, token, now),
		release: fmt.Sprintf(`UPDATE %[1]s SET holds = holds - 1, expires_at = IF(holds = 0, %[3]s, expires_at)
WHERE name = ? AND owner = ? AND %[2]s = ? AND holds > 0`, table, token, released),
		guard: fmt.Sprintf(`SELECT 1 FROM %[1]s
WHERE name = ? AND owner = ? AND %[2]s = ? AND holds > 0 AND expires_at > %[3]s
LOCK IN SHARE MODE`, table, token, now),
		list: fmt.Sprintf(`SELECT name, owner, %[2]s, holds,
  TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', acquired_at),
  TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at),
  TIMESTAMPDIFF(MICROSECOND, %[3]s, expires_at)
FROM %[1]s WHERE holds > 0 ORDER BY name`, table, token, now),
	}
}

// released is the expiry a released row gets: before any real time.
const released = "'1000-01-01 00:00:00'"

func buildQueries(db string) queries {
	locks, floor, versions := "sqllock_locks", "sqllock_token_floor", "sqllock_versions"
	if db != "" {
		locks = quote(db) + "." + locks
		floor = quote(db) + "." + floor
		versions = quote(db) + "." + versions
	}
	return queries{
		// One statement, no RETURNING: the token travels back as the
		// statement's insert id via LAST_INSERT_ID(expr), and a refusal sets
		// it to 0. MySQL applies ON DUPLICATE KEY UPDATE assignments left to
		// right, each seeing the previous ones, so every condition below
		// reads only columns not yet assigned. A new row starts above the
		// token floor, read under a shared lock that the reaper must wait for.
		// The time is read once, in the SELECT, and the update reads it back
		// with VALUES(): every condition sees the same instant.
		acquire: fmt.Sprintf(`INSERT INTO %[1]s (name, owner, token, holds, acquired_at, expires_at)
SELECT ?, ?, LAST_INSERT_ID(f.token + 1), 1, n.t, n.t + INTERVAL ? MICROSECOND
FROM %[2]s f, (SELECT %[3]s AS t) n WHERE f.id = 1 LOCK IN SHARE MODE
ON DUPLICATE KEY UPDATE
  token       = IF(%[1]s.expires_at <= VALUES(acquired_at), LAST_INSERT_ID(%[1]s.token + 1),
                  IF(%[1]s.owner = ?, LAST_INSERT_ID(%[1]s.token), %[1]s.token + LAST_INSERT_ID(0))),
  holds       = IF(%[1]s.expires_at <= VALUES(acquired_at), 1, IF(%[1]s.owner = ?, %[1]s.holds + 1, %[1]s.holds)),
  owner       = IF(%[1]s.expires_at <= VALUES(acquired_at), ?, %[1]s.owner),
  acquired_at = IF(%[1]s.expires_at <= VALUES(acquired_at), VALUES(acquired_at), %[1]s.acquired_at),
  expires_at  = IF(%[1]s.owner = ?, VALUES(expires_at), %[1]s.expires_at)`, locks, floor, now),
		remaining:     fmt.Sprintf(`SELECT GREATEST(TIMESTAMPDIFF(MICROSECOND, %s, expires_at), 0) FROM %s WHERE name = ?`, now, locks),
		lease:         buildLeaseQueries(locks, "token"),
		reapLockFloor: fmt.Sprintf(`SELECT token FROM %s WHERE id = 1 FOR UPDATE`, floor),
		reapSelect: fmt.Sprintf(`SELECT name, token FROM %s WHERE expires_at <= %s
ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED`, locks, now),
		reapDelete: fmt.Sprintf(`DELETE FROM %s WHERE name IN (%%s)`, locks),
		reapFloor:  fmt.Sprintf(`UPDATE %s SET token = GREATEST(token, ?) WHERE id = 1`, floor),
		versions:   buildVersionQueries(versions),
	}
}

// Acquire implements dialect.Dialect. When ctx ends while the statement
// waits (behind a guarded transaction's row lock, say), KILL QUERY ends the
// wait on the server before Acquire returns (see grant).
func (d *Dialect) Acquire(ctx context.Context, p dialect.AcquireParams) (int64, error) {
	var token int64
	err := d.grant(ctx, func(ctx context.Context, conn *sql.Conn, mark string) error {
		res, err := conn.ExecContext(ctx, mark+d.q.acquire,
			p.Name, p.Owner, p.TTL.Microseconds(), // insert
			p.Owner, p.Owner, p.Owner, p.Owner) // update
		if err != nil {
			return err
		}
		token, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return 0, err
	}
	return token, nil
}

// Remaining implements dialect.Dialect.
func (d *Dialect) Remaining(ctx context.Context, name string) (time.Duration, bool, error) {
	return d.run.Micros(ctx, d.q.remaining, name)
}

// Renew implements dialect.Dialect.
func (d *Dialect) Renew(ctx context.Context, l dialect.Lease, ttl time.Duration) (bool, error) {
	return d.run.ExecOne(ctx, d.q.lease.renew, ttl.Microseconds(), l.Name, l.Owner, l.Token)
}

// RenewMany implements dialect.BatchRenewer, in two statements: the update,
// and a read of which leases it left live.
func (d *Dialect) RenewMany(ctx context.Context, ls []dialect.Lease, ttl time.Duration) ([]bool, error) {
	return d.renewMany(ctx, d.q.lease, ls, ttl)
}

func (d *Dialect) renewMany(ctx context.Context, q leaseQueries, ls []dialect.Lease, ttl time.Duration) ([]bool, error) {
	names := make([]any, 0, 4*len(ls))
	for _, l := range ls {
		names = append(names, l.Name)
	}
	args := names
	for _, l := range ls {
		args = append(args, l.Name, l.Owner, l.Token)
	}
	r := strings.NewReplacer(
		"{names}", strings.TrimSuffix(strings.Repeat("?,", len(ls)), ","),
		"{leases}", strings.TrimSuffix(strings.Repeat("(?,?,?),", len(ls)), ","))
	var out []bool
	err := d.run.Conn(ctx, func(conn *sql.Conn) error {
		if _, err := conn.ExecContext(ctx, r.Replace(q.renewMany), append([]any{ttl.Microseconds()}, args...)...); err != nil {
			return wrap(err)
		}
		rows, err := conn.QueryContext(ctx, r.Replace(q.renewed), args...)
		if err != nil {
			return wrap(err)
		}
		out, err = sqlrun.Renewed(rows, ls, wrap)
		return err
	})
	return out, err
}

// Release implements dialect.Dialect.
func (d *Dialect) Release(ctx context.Context, l dialect.Lease) (bool, error) {
	return d.run.ExecOne(ctx, d.q.lease.release, l.Name, l.Owner, l.Token)
}

// Guard implements dialect.Dialect.
func (d *Dialect) Guard(ctx context.Context, tx *sql.Tx, l dialect.Lease) (bool, error) {
	return sqlrun.Exists(ctx, tx, wrap, d.q.lease.guard, l.Name, l.Owner, l.Token)
}

// List implements dialect.Dialect.
func (d *Dialect) List(ctx context.Context) ([]dialect.LockInfo, error) {
	return d.run.ListMicros(ctx, d.q.lease.list)
}

// Reap implements dialect.Dialect. In one READ COMMITTED transaction it
// locks the token floor (so no new row can start from it meanwhile), locks a
// batch of expired rows (skipping rows an acquirer is touching), deletes
// them, and raises the floor to the largest deleted token.
func (d *Dialect) Reap(ctx context.Context, p dialect.ReapParams) (n int, err error) {
	err = d.run.Conn(ctx, func(conn *sql.Conn) error {
		n, err = d.reapLocks(ctx, conn, p.Limit)
		return err
	})
	if err != nil {
		return 0, err
	}
	// The pessimistic strategy's spent token rows go too.
	return n, d.reapTokens(ctx, p.Limit)
}

func (d *Dialect) reapLocks(ctx context.Context, conn *sql.Conn, limit int) (n int, err error) {
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, wrap(err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var floor int64
	if err := tx.QueryRowContext(ctx, d.q.reapLockFloor).Scan(&floor); err != nil {
		return 0, wrap(err)
	}
	rows, err := tx.QueryContext(ctx, d.q.reapSelect, limit)
	if err != nil {
		return 0, wrap(err)
	}
	var (
		names []any
		max   = floor
	)
	for rows.Next() {
		var (
			name  []byte
			token int64
		)
		if err := rows.Scan(&name, &token); err != nil {
			rows.Close()
			return 0, wrap(err)
		}
		names = append(names, name)
		if token > max {
			max = token
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, wrap(err)
	}
	if len(names) > 0 {
		marks := strings.TrimSuffix(strings.Repeat("?,", len(names)), ",")
		res, err := tx.ExecContext(ctx, fmt.Sprintf(d.q.reapDelete, marks), names...)
		if err != nil {
			return 0, wrap(err)
		}
		deleted, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		n = int(deleted)
		if max > floor {
			if _, err := tx.ExecContext(ctx, d.q.reapFloor, max); err != nil {
				return 0, wrap(err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, wrap(err)
	}
	return n, nil
}

// MigrationDriver implements dialect.Dialect. Migrations run on conn (after
// USE of the configured database, created if missing), statement by
// statement so that the DSN needs no multiStatements, serialised by
// GET_LOCK, and recorded in sqllock_schema_migrations. The lock's name is
// computed on the server from the database the migrations write to (its
// SHA-1, so that it stays within MySQL's 64 characters), so that migrators
// of different databases never wait for each other. A statement running
// when ctx ends, a wait for the lock among them, is ended by KILL QUERY
// from another connection of the pool (if none is free in time, conn is
// closed, and the server's wait ends at GET_LOCK's own 5 s timeout). The
// lock is released on a context of its own, and conn is closed after the
// run instead of going back to the pool, which releases the lock whatever
// happened.
func (d *Dialect) MigrationDriver(ctx context.Context, conn *sql.Conn) (database.Driver, error) {
	const key = `CONCAT('sqllock_migrate:', SHA1(COALESCE(DATABASE(), '')))`
	st := sqlmigrate.Statements{
		Lock:         `SELECT GET_LOCK(` + key + `, 5) = 1`,
		Unlock:       `DO RELEASE_LOCK(` + key + `)`,
		Canceller:    d.killQuery,
		EnsureTable:  "CREATE TABLE IF NOT EXISTS sqllock_schema_migrations (version BIGINT NOT NULL PRIMARY KEY, dirty BOOLEAN NOT NULL) ENGINE = InnoDB",
		ReadVersion:  `SELECT version, dirty FROM sqllock_schema_migrations LIMIT 1`,
		ClearVersion: `DELETE FROM sqllock_schema_migrations`,
		WriteVersion: `INSERT INTO sqllock_schema_migrations (version, dirty) VALUES (?, ?)`,
	}
	if d.database != "" {
		// Before the lock, whose name is the selected database's.
		st.Session = []string{
			"CREATE DATABASE IF NOT EXISTS " + quote(d.database),
			"USE " + quote(d.database),
		}
	}
	drv, err := sqlmigrate.New(ctx, conn, st)
	return drv, wrap(err)
}

// killQuery returns a function that ends the statement running on conn by
// KILL QUERY from another connection of the pool (closing the connection,
// the driver's own reaction to a context's end, would leave the server
// waiting).
func (d *Dialect) killQuery(ctx context.Context, conn *sql.Conn) (func(context.Context) error, error) {
	var id int64
	if err := conn.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&id); err != nil {
		return nil, err
	}
	kill := "KILL QUERY " + strconv.FormatInt(id, 10)
	return func(ctx context.Context) error {
		_, err := d.db.ExecContext(ctx, kill)
		return err
	}, nil
}

// wrap maps MySQL errors onto the dialect's sentinels.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1146, 1054, 1049: // no such table, unknown column, unknown database
			return fmt.Errorf("%w: %w", dialect.ErrSchemaMissing, err)
		case 1213: // deadlock: the transaction was rolled back
			return fmt.Errorf("%w: %w", dialect.ErrTransient, err)
		case 1205, 3572: // lock wait timeout (MariaDB's NOWAIT too), MySQL's NOWAIT
			return fmt.Errorf("%w: %w", dialect.ErrLocked, err)
		}
		return err // the server answered: the statement was not applied
	}
	if errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if errors.Is(err, driver.ErrBadConn) {
		// The driver found the connection broken before writing the
		// statement: nothing was sent.
		return fmt.Errorf("%w: %w", dialect.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %w", dialect.ErrOutcomeUnknown, err)
}
