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
	"github.com/sqllock/sqllock/dialect/internal/listen"
	"github.com/sqllock/sqllock/dialect/internal/sqlmigrate"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// Dialect is the PostgreSQL dialect. Create it with New or NewFromPool, and
// Close it when done: while its lockers wait, it runs a listening connection.
// A Dialect is safe for concurrent use.
type Dialect struct {
	db       *sql.DB
	ownDB    bool        // db wraps a pgx pool and is ours to close
	schema   string      // validated; "" means the connection's search_path
	channel  string      // NOTIFY channel of released names
	hub      *listen.Hub // the listening connection, shared by every locker
	cat      dialect.Catalogue
	rq       rowLockQueries
	run      *sqlrun.Runner
	waker    string // NOTIFY channel of this dialect's FIFO wake-ups (fair.go)
	reap     reapStmts
	reapSems sqlrun.Stmt
	// reapSemTickets deletes expired tickets of the semaphores' queue.
	reapSemTickets sqlrun.Stmt
	// full reports a NewFromPool pool at its limit (see dialect.Hooks.Full).
	full func() (bool, int)
	// lead are the arguments put before every statement's own (see
	// WithPooler); nil for none.
	lead []any
	// listenCfg is the listening connection's own configuration (see
	// WithListenDSN); nil: a connection of the pool.
	listenCfg *pgx.ConnConfig
	// probeEvery is the period of the listening connection's probes.
	probeEvery time.Duration

	// syncCommit is the synchronous_commit level of lock statements'
	// transactions (WithSynchronousCommit); "" leaves the server's.
	syncCommit string
	// noGrace turns the failover grace off (WithoutFailoverGrace).
	noGrace bool
	// stmtTimeout bounds each call to the server (WithStatementTimeout).
	stmtTimeout time.Duration
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

// WithStatementTimeout bounds each call the dialect makes to the server —
// connecting (for Migrate too), and each statement (or short transaction)
// of an acquire, release, renewal or reap — to d, whatever the caller's
// context: a silent server or network makes a call fail within d (plus 2
// s for a cancel request to the server) with an error wrapping
// dialect.ErrNoAnswer, and dialect.ErrUnavailable when nothing was sent,
// else dialect.ErrOutcomeUnknown. A context that ends sooner bounds the
// call as before. Default dialect.DefaultStatementTimeout (10 s); 0 turns
// the bound off, leaving the caller's context alone. A wait of a
// pessimistic Acquire in the database's lock queue is not a statement
// bounded so: it lasts as long as its context.
func WithStatementTimeout(d time.Duration) Option {
	return func(dl *Dialect) error {
		if d < 0 {
			return fmt.Errorf("%w: WithStatementTimeout(%v): negative", dialect.ErrInvalidOptions, d)
		}
		dl.stmtTimeout = d
		return nil
	}
}

// New returns the dialect for db, a pool opened with the "pgx" driver of
// github.com/jackc/pgx/v5/stdlib.
func New(db *sql.DB, opts ...Option) (*Dialect, error) {
	if db == nil {
		return nil, dialect.ErrNilDB
	}
	d := &Dialect{db: db, probeEvery: probeEvery, stmtTimeout: dialect.DefaultStatementTimeout}
	for _, o := range opts {
		if err := o(d); err != nil {
			return nil, err
		}
	}
	d.channel = "sqllock"
	if d.schema != "" {
		d.channel = ("sqllock:" + d.schema)[:min(63, len("sqllock:")+len(d.schema))]
	}
	d.waker = newWaker()
	d.rq = buildRowLockQueries(d.schema, durable(d.syncCommit))
	d.hub = listen.New(d.listen, listenLinger)
	if err := d.build(); err != nil {
		return nil, err
	}
	return d, nil
}

// NewFromPool returns the dialect for a pgx pool. Lock statements borrow the
// pool's connections; no second pool is opened. Call Close when done with
// the dialect: it also stops the small database/sql wrapper around the pool
// (the pool itself stays open).
func NewFromPool(pool *pgxpool.Pool, opts ...Option) (*Dialect, error) {
	if pool == nil {
		return nil, dialect.ErrNilDB
	}
	db := stdlib.OpenDBFromPool(pool)
	// The database/sql wrapper opens as many connections as asked for; the
	// wait for one happens in the pgx pool, which knows its own limit.
	full := func(d *Dialect) error {
		d.full = func() (bool, int) {
			st := pool.Stat()
			return st.AcquiredConns() >= st.MaxConns(), int(st.MaxConns())
		}
		return nil
	}
	d, err := New(db, append(opts, full)...)
	if err != nil {
		db.Close()
		return nil, err
	}
	d.ownDB = true
	return d, nil
}

// Close releases what the dialect itself started or opened: it stops the
// listening connection, if one runs, and waits until its goroutine has
// ended or ctx ends (then it returns ctx's error), and it closes the
// database/sql wrapper of NewFromPool, which leaves the pgx pool open. The
// *sql.DB given to New belongs to the caller and stays open, and lockers on
// it keep working, but their waiters poll: nothing listens any more. Call
// Close once the dialect's lockers are no longer used; calling it again
// does no harm.
func (d *Dialect) Close(ctx context.Context) error {
	err := d.hub.Close(ctx)
	if d.ownDB {
		err = errors.Join(err, d.db.Close())
	}
	return err
}

// Name returns "postgres".
func (d *Dialect) Name() string { return "postgres" }

// DB returns the pool lock statements run on.
func (d *Dialect) DB() *sql.DB { return d.db }

// Schema returns the configured schema, or "" for the search_path default.
func (d *Dialect) Schema() string { return d.schema }

// Migrations implements dialect.Dialect: the package's Migrations.
func (d *Dialect) Migrations() fs.FS { return Migrations() }

// quote double-quotes a validated identifier.
func quote(ident string) string { return `"` + ident + `"` }

// listenLinger is how long the listening connection stays after the last
// waiter left: lockers that take turns on a name would otherwise reconnect
// and LISTEN again at every hand-off.
const listenLinger = 500 * time.Millisecond

// Catalogue implements dialect.Dialect: PostgreSQL holds every primitive.
//
// Its Notifier is one listening connection, taken from the pool (or opened
// from WithListenDSN) and shared by every locker built on the dialect,
// while any of them has waiters and for a short while after; releases of
// names someone waited for (of locks, semaphore permits and read/write
// locks, and withdrawn writer intents) are announced with
// NOTIFY on a channel of the dialect's schema, and the FIFO queues wake the
// process of the oldest live ticket alone. The connection counts as
// listening once a notification it sent itself through the pool came back:
// behind a transaction pooler none does, and waiters poll, every
// MaxBackoff at the most, unless WithListenDSN gives the dialect a
// connection of its own. Close stops it.
func (d *Dialect) Catalogue() dialect.Catalogue { return d.cat }

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
		// No server-side prepared statements, whatever the pool's
		// default_query_exec_mode: a migration may run through a pooler.
		Lead: []any{pgx.QueryExecModeExec},
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
	st.TableExists = `SELECT to_regclass('` + table + `') IS NOT NULL`
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
		case "42P05", "26000": // duplicate, missing prepared statement
			return &preparedStatementsLost{pe}
		case "42P01", "42703", "42883", "3F000": // undefined table, column, function; no such schema
			return fmt.Errorf("%w: %w", dialect.ErrSchemaMissing, err)
		case "40P01", "40001": // deadlock, serialization failure
			return fmt.Errorf("%w: %w", dialect.ErrTransient, err)
		case graceCode: // a grant during the failover grace (epoch.go)
			return graceError(pe)
		case "55P03": // lock not available: NOWAIT, lock_timeout
			return fmt.Errorf("%w: %w", dialect.ErrLocked, err)
		case "25006": // read-only transaction: a standby, default_transaction_read_only
			return fmt.Errorf("%w: %w", dialect.ErrReadOnly, err)
		case "22023": // invalid parameter value
			if strings.Contains(pe.Message, noStandby) {
				return fmt.Errorf("%w: %w", dialect.ErrUnsupported, err)
			}
		case "55000": // object not in prerequisite state
			if strings.Contains(pe.Message, "recovery is in progress") {
				return fmt.Errorf("%w: %w", dialect.ErrReadOnly, err)
			}
		}
		return err // the server answered: the statement was not applied
	}
	if errors.Is(err, pgx.ErrTxCommitRollback) { // the server answered COMMIT with ROLLBACK
		return fmt.Errorf("%w: %w", dialect.ErrRolledBack, err)
	}
	if errors.Is(err, sql.ErrNoRows) || notSent(err) {
		return err
	}
	if sqlrun.NotSent(err, refusedByPgx...) {
		return sqlrun.MarkNotSent(err)
	}
	return fmt.Errorf("%w: %w", dialect.ErrOutcomeUnknown, err)
}

// refusedByPgx are the messages with which pgx refuses a statement before
// executing it (v5.12: ExtendedQueryBuilder.Build, which encodes the
// arguments after a statement was prepared, if at all, and before it is
// executed; PgConn.execExtendedPrefix): an argument its parameter's type
// cannot hold, such as 2^31 for an integer column, is no "outcome unknown".
var refusedByPgx = []string{
	"failed to encode args[",
	"mismatched param and argument count",
	"extended protocol limited to ",
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
