// Package postgres is sqllock's PostgreSQL dialect, on pgx v5.
//
// It works on a *sql.DB opened with pgx's database/sql driver ("pgx") and on a
// *pgxpool.Pool (through stdlib.OpenDBFromPool, which borrows connections from
// the pool instead of opening a second one). It never closes either.
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/internal/sqlmigrate"
	"github.com/sqllock/sqllock/dialect/internal/sqlrun"
	"github.com/sqllock/sqllock/migrations"
)

// Dialect is the PostgreSQL dialect. Create it with New or NewFromPool.
type Dialect struct {
	db      *sql.DB
	ownDB   bool   // db wraps a pgx pool and is ours to close
	schema  string // validated; "" means the connection's search_path
	channel string // NOTIFY channel of released names
	q       queries
	rq      rowLockQueries
	run     *sqlrun.Runner
}

// Option configures a Dialect.
type Option func(*Dialect) error

// WithSchema keeps sqllock's tables in the named schema instead of the first
// schema of the connection's search_path. Migrate creates the schema if it
// does not exist. The name must be a plain identifier (see
// dialect.ValidateIdentifier).
func WithSchema(name string) Option {
	return func(d *Dialect) error {
		if err := dialect.ValidateIdentifier(name); err != nil {
			return err
		}
		d.schema = name
		return nil
	}
}

// New returns the dialect for db, a pool opened with the "pgx" driver of
// github.com/jackc/pgx/v5/stdlib.
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
	d.channel = "sqllock"
	if d.schema != "" {
		d.channel = ("sqllock:" + d.schema)[:min(63, len("sqllock:")+len(d.schema))]
	}
	d.q = buildQueries(d.schema)
	d.rq = buildRowLockQueries(d.schema)
	d.run = &sqlrun.Runner{DB: db, Wrap: wrap}
	return d, nil
}

// NewFromPool returns the dialect for a pgx pool. Lock statements borrow the
// pool's connections; no second pool is opened. Call Close when done with
// the dialect to stop the small database/sql wrapper around the pool (the
// pool itself stays open).
func NewFromPool(pool *pgxpool.Pool, opts ...Option) (*Dialect, error) {
	if pool == nil {
		return nil, dialect.ErrNilDB
	}
	db := stdlib.OpenDBFromPool(pool)
	d, err := New(db, opts...)
	if err != nil {
		db.Close()
		return nil, err
	}
	d.ownDB = true
	// The database/sql wrapper opens as many connections as asked for; the
	// wait for one happens in the pgx pool, which knows its own limit.
	d.run.Full = func() (bool, int) {
		st := pool.Stat()
		return st.AcquiredConns() >= st.MaxConns(), int(st.MaxConns())
	}
	return d, nil
}

// Close releases what the dialect itself opened: the database/sql wrapper of
// NewFromPool, whose closing leaves the pgx pool open. For a dialect made by
// New it does nothing; the *sql.DB belongs to the caller.
func (d *Dialect) Close() error {
	if d.ownDB {
		return d.db.Close()
	}
	return nil
}

// Name returns "postgres".
func (d *Dialect) Name() string { return "postgres" }

// DB returns the pool lock statements run on.
func (d *Dialect) DB() *sql.DB { return d.db }

// Schema returns the configured schema, or "" for the search_path default.
func (d *Dialect) Schema() string { return d.schema }

// Migrations returns the PostgreSQL migration files.
func (d *Dialect) Migrations() fs.FS { return migrations.Postgres() }

// quote double-quotes a validated identifier.
func quote(ident string) string { return `"` + ident + `"` }

type queries struct {
	acquire, remaining, release, reap string
	lease                             leaseQueries // on sqllock_locks
	versions                          versionQueries
}

// leaseQueries are the statements on a lease, for a table with the columns
// of sqllock_locks whose token column is named token.
type leaseQueries struct {
	renew, renewMany, release, guard, list string
}

func buildLeaseQueries(table, token string) leaseQueries {
	// now() is the statement's start in autocommit; the guard runs inside a
	// user's transaction, where clock_timestamp() is the current time.
	return leaseQueries{
		renew: fmt.Sprintf(`UPDATE %[1]s SET expires_at = now() + $4::bigint * interval '1 microsecond'
WHERE name = $1 AND owner = $2 AND %[2]s = $3 AND holds > 0 AND expires_at > now()`, table, token),
		renewMany: fmt.Sprintf(`UPDATE %[1]s AS l SET expires_at = now() + $4::bigint * interval '1 microsecond'
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS r(name, owner, token)
WHERE l.name = r.name AND l.owner = r.owner AND l.%[2]s = r.token AND l.holds > 0 AND l.expires_at > now()
RETURNING l.name, l.owner, l.%[2]s`, table, token),
		release: fmt.Sprintf(`UPDATE %[1]s SET holds = holds - 1,
  expires_at = CASE WHEN holds = 1 THEN '-infinity' ELSE expires_at END
WHERE name = $1 AND owner = $2 AND %[2]s = $3 AND holds > 0`, table, token),
		guard: fmt.Sprintf(`SELECT 1 FROM %[1]s
WHERE name = $1 AND owner = $2 AND %[2]s = $3 AND holds > 0 AND expires_at > clock_timestamp()
FOR SHARE`, table, token),
		list: fmt.Sprintf(`SELECT name, owner, %[2]s, holds, acquired_at, expires_at,
  (extract(epoch FROM expires_at - now()) * 1000000)::bigint
FROM %[1]s WHERE holds > 0 ORDER BY name`, table, token),
	}
}

func buildQueries(schema string) queries {
	locks, seq, versions := "sqllock_locks", "sqllock_token_seq", "sqllock_versions"
	if schema != "" {
		locks = quote(schema) + "." + locks
		seq = quote(schema) + "." + seq
		versions = quote(schema) + "." + versions
	}
	return queries{
		// The token comes from the sequence; on takeover it is drawn in the
		// UPDATE, after the row lock, so it exceeds the token it replaces.
		acquire: fmt.Sprintf(`INSERT INTO %[1]s AS l (name, owner, token, holds, acquired_at, expires_at)
VALUES ($1, $2, nextval('%[2]s'), 1, now(), now() + $3::bigint * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE SET
  token       = CASE WHEN l.expires_at <= now() THEN nextval('%[2]s') ELSE l.token END,
  holds       = CASE WHEN l.expires_at <= now() THEN 1 ELSE l.holds + 1 END,
  acquired_at = CASE WHEN l.expires_at <= now() THEN now() ELSE l.acquired_at END,
  owner       = EXCLUDED.owner,
  expires_at  = EXCLUDED.expires_at
WHERE l.expires_at <= now() OR l.owner = EXCLUDED.owner
RETURNING token`, locks, seq),
		// Only waiters ask how long a lease has left: the same statement
		// sets the waiters hint (once), so that the release will NOTIFY.
		remaining: fmt.Sprintf(`WITH hint AS (
  UPDATE %[1]s SET waiters = true WHERE name = $1 AND NOT waiters AND expires_at > now()
)
SELECT (extract(epoch FROM greatest(expires_at, now()) - now()) * 1000000)::bigint
FROM %[1]s WHERE name = $1`, locks),
		lease: buildLeaseQueries(locks, "token"),
		// The last release of a name someone waited for announces it.
		release: fmt.Sprintf(`WITH r AS (
  UPDATE %s SET holds = holds - 1,
    expires_at = CASE WHEN holds = 1 THEN '-infinity' ELSE expires_at END
  WHERE name = $1 AND owner = $2 AND token = $3 AND holds > 0
  RETURNING name, holds = 0 AND waiters AS wake
)
SELECT count(*) FROM r LEFT JOIN LATERAL (SELECT pg_notify($4, r.name) WHERE r.wake) n ON true`, locks),
		// SKIP LOCKED lets reapers in many processes share the work and never
		// wait behind an acquirer; the outer condition re-checks expiry.
		reap: fmt.Sprintf(`WITH d AS (
  DELETE FROM %[1]s WHERE name IN (
    SELECT name FROM %[1]s WHERE expires_at <= now() ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED
  ) AND expires_at <= now()
  RETURNING name, waiters
)
SELECT count(*) FROM d LEFT JOIN LATERAL (SELECT pg_notify($2, d.name) WHERE d.waiters) n ON true`, locks),
		versions: buildVersionQueries(versions),
	}
}

// Acquire implements dialect.Dialect. When ctx ends while the statement
// waits (behind a guarded transaction's row lock, say), a cancel request
// ends the wait on the server before Acquire returns.
func (d *Dialect) Acquire(ctx context.Context, p dialect.AcquireParams) (int64, error) {
	var token int64
	err := d.grant(ctx, func(ctx context.Context, conn *sql.Conn) error {
		err := conn.QueryRowContext(ctx, d.q.acquire, p.Name, p.Owner, p.TTL.Microseconds()).Scan(&token)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	return token, nil
}

// grant runs a statement that may grant a lease (see sqlrun.Runner.Grant):
// on a connection of its own, and cancelled on the server if ctx ends, so
// that no lease is granted after an error is returned. A connection of its
// own also keeps database/sql from running the statement twice: on the
// *sql.DB, it runs a statement again on another connection when the driver
// reports driver.ErrBadConn, which drivers are to report only when nothing
// was sent; but pgx's stdlib reports it for every error pgx marks safe to
// retry, and pgx (v5.12) marks so a connection it finds closed while
// waiting for the reply to a statement it sent. On a *sql.Conn,
// database/sql never retries.
func (d *Dialect) grant(ctx context.Context, fn func(ctx context.Context, conn *sql.Conn) error) error {
	return d.run.Grant(ctx, canceller, fn)
}

// Remaining implements dialect.Dialect.
func (d *Dialect) Remaining(ctx context.Context, name string) (time.Duration, bool, error) {
	return d.run.Micros(ctx, d.q.remaining, name)
}

// Renew implements dialect.Dialect.
func (d *Dialect) Renew(ctx context.Context, l dialect.Lease, ttl time.Duration) (bool, error) {
	return d.run.ExecOne(ctx, d.q.lease.renew, l.Name, l.Owner, l.Token, ttl.Microseconds())
}

// RenewMany implements dialect.BatchRenewer.
func (d *Dialect) RenewMany(ctx context.Context, ls []dialect.Lease, ttl time.Duration) ([]bool, error) {
	return d.renewMany(ctx, d.q.lease.renewMany, ls, ttl)
}

func (d *Dialect) renewMany(ctx context.Context, q string, ls []dialect.Lease, ttl time.Duration) ([]bool, error) {
	names, owners, tokens := make([]string, len(ls)), make([]string, len(ls)), make([]int64, len(ls))
	for i, l := range ls {
		names[i], owners[i], tokens[i] = l.Name, l.Owner, l.Token
	}
	var out []bool
	err := d.run.Conn(ctx, func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, q, names, owners, tokens, ttl.Microseconds())
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
	var n int
	_, err := d.run.QueryRow(ctx, d.q.release, []any{l.Name, l.Owner, l.Token, d.channel}, &n)
	return n == 1, err
}

// Guard implements dialect.Dialect.
func (d *Dialect) Guard(ctx context.Context, tx *sql.Tx, l dialect.Lease) (bool, error) {
	return sqlrun.Exists(ctx, tx, wrap, d.q.lease.guard, l.Name, l.Owner, l.Token)
}

// List implements dialect.Dialect.
func (d *Dialect) List(ctx context.Context) ([]dialect.LockInfo, error) {
	return d.list(ctx, d.q.lease.list)
}

func (d *Dialect) list(ctx context.Context, q string) ([]dialect.LockInfo, error) {
	var out []dialect.LockInfo
	err := d.run.Query(ctx, q, nil, func(rows *sql.Rows) error {
		var (
			li dialect.LockInfo
			us int64
		)
		if err := rows.Scan(&li.Name, &li.Owner, &li.Token, &li.Holds, &li.AcquiredAt, &li.ExpiresAt, &us); err != nil {
			return err
		}
		li.AcquiredAt, li.ExpiresAt = li.AcquiredAt.UTC(), li.ExpiresAt.UTC()
		li.ExpiresIn = time.Duration(us) * time.Microsecond
		out = append(out, li)
		return nil
	})
	return out, err
}

// Reap implements dialect.Dialect. Tokens come from a sequence, so deleting
// rows cannot make a later token smaller.
// Names that had waiters are announced with NOTIFY.
func (d *Dialect) Reap(ctx context.Context, p dialect.ReapParams) (int, error) {
	var n int
	_, err := d.run.QueryRow(ctx, d.q.reap, []any{p.Limit, d.channel}, &n)
	return n, err
}

// Listen implements dialect.Notifier with LISTEN on one connection of the
// pool, which it discards afterwards. The connection is busy for as long as
// Listen runs.
func (d *Dialect) Listen(ctx context.Context, ready func(), wake func(name string)) error {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return wrap(err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("postgres: LISTEN needs the pgx driver, not %T", dc)
		}
		pc := sc.Conn()
		if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{d.channel}.Sanitize()); err != nil {
			return errors.Join(err, driver.ErrBadConn)
		}
		ready()
		for {
			n, err := pc.WaitForNotification(ctx)
			if err != nil {
				// Listening, or cut off mid-wait: never back to the pool.
				return errors.Join(err, driver.ErrBadConn)
			}
			wake(n.Payload)
		}
	})
	return err
}

// MigrationDriver implements dialect.Dialect. A migration run is one
// transaction on conn (PostgreSQL's DDL is transactional), serialised with
// other migrators of the same schema by a transaction-scoped advisory lock:
// it sets search_path to the configured schema for the transaction alone,
// waits for the lock, creates the schema if missing, applies the migrations,
// records them in sqllock_schema_migrations, and commits; a failure or the
// end of ctx rolls it all back. The lock's key is computed on the server
// from the schema the migrations write to: the configured one, or else the
// search_path's first existing schema, so that migrators of different
// schemas never wait for each other. A wait for the lock ends with ctx,
// through a cancel request. Nothing outlives the transaction (no session
// lock, no session setting), which suits transaction poolers.
func (d *Dialect) MigrationDriver(ctx context.Context, conn *sql.Conn) (database.Driver, error) {
	table, schema := "sqllock_schema_migrations", "current_schema()"
	st := sqlmigrate.Statements{
		TxLock: true,
		// A snapshot taken before the lock was granted would hide what
		// the migrator before us committed.
		Begin:     `BEGIN ISOLATION LEVEL READ COMMITTED`,
		Canceller: canceller,
	}
	if d.schema != "" {
		// Qualified, the version table is found also outside the lock's
		// transaction (where golang-migrate reads the version).
		table, schema = quote(d.schema)+"."+table, "'"+d.schema+"'"
		st.Prepare = []string{`SET LOCAL search_path TO ` + quote(d.schema)}
		st.Setup = []string{`CREATE SCHEMA IF NOT EXISTS ` + quote(d.schema)}
	}
	st.Lock = fmt.Sprintf(`SELECT true FROM pg_advisory_xact_lock(hashtextextended('sqllock:migrate:' || COALESCE(%s, ''), 0))`, schema)
	st.EnsureTable = `CREATE TABLE IF NOT EXISTS ` + table + ` (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL)`
	st.ReadVersion = `SELECT version, dirty FROM ` + table + ` LIMIT 1`
	st.ClearVersion = `DELETE FROM ` + table
	st.WriteVersion = `INSERT INTO ` + table + ` (version, dirty) VALUES ($1, $2)`
	drv, err := sqlmigrate.New(ctx, conn, st)
	return drv, wrap(err)
}

// wrap maps PostgreSQL errors onto the dialect's sentinels.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "42P01", "42703", "42883", "3F000": // undefined table, column, function; no such schema
			return fmt.Errorf("%w: %w", dialect.ErrSchemaMissing, err)
		case "40P01", "40001": // deadlock, serialization failure
			return fmt.Errorf("%w: %w", dialect.ErrTransient, err)
		case "55P03": // lock not available: NOWAIT, lock_timeout
			return fmt.Errorf("%w: %w", dialect.ErrLocked, err)
		}
		return err // the server answered: the statement was not applied
	}
	if errors.Is(err, sql.ErrNoRows) || notSent(err) {
		return err
	}
	return fmt.Errorf("%w: %w", dialect.ErrOutcomeUnknown, err)
}

// notSent reports whether err certainly means the statement was not sent.
// pgx marks "conn closed" safe to retry (and its stdlib turns it into
// driver.ErrBadConn) also when it finds the connection closed while waiting
// for the reply to a statement it sent (pgx v5.12: PgConn.receiveMessage),
// so neither is trusted; what is left of pgx's safe-to-retry errors is.
func notSent(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || strings.Contains(err.Error(), "conn closed") {
		return false
	}
	return pgconn.SafeToRetry(err)
}
