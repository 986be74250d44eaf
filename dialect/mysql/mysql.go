// Package mysql is sqllock's MySQL and MariaDB dialect, on
// github.com/go-sql-driver/mysql.
//
// It works whatever the DSN says about parseTime, clientFoundRows, loc or the
// session time zone: times travel as integers computed on the server in UTC,
// and every state change is detected in a way that does not depend on
// whether the server counts matched or changed rows. It needs MySQL 8.0.1+ or
// MariaDB 10.6+ (for SKIP LOCKED in the reaper).
//
// On TiDB, New's dialect refuses every grant, row lock and reap with an
// error wrapping dialect.ErrUnsupported (its statements are not safe there);
// NewTiDB's is the dialect for TiDB: a Dialect whose catalogue differs.
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
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// Dialect is the MySQL/MariaDB dialect. Create it with New, and Close it
// when done: while its lockers wait, it keeps one connection of the pool
// on which releases wake them. A Dialect is safe for concurrent use.
type Dialect struct {
	db       *sql.DB
	database string // validated; "" means the connection's default database
	rq       rowLockQueries
	reap     reapStmts
	srv      server
	run      *sqlrun.Runner
	marks    marker // tags grant statements, so that they can be found and cancelled
	// stmtTimeout bounds each call to the server (WithStatementTimeout).
	stmtTimeout time.Duration
	clock       clockCheck
	galera      galeraCheck
	flavor      flavorCheck
	tidb        *tidb // made by NewTiDB: TiDB's statements; nil for MySQL and MariaDB
	cat         dialect.Catalogue

	bells     *bells // this process's wake-ups
	waker     string // the tag of the dialect's bells (wake.go)
	noWakeups bool   // WithoutWakeups

	// reapSems selects a batch of expired semaphore holders, locking
	// them; deleteHolder deletes one.
	reapSems     sqlrun.Stmt
	deleteHolder string
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

// New returns the dialect for db, a pool opened with the "mysql" driver.
func New(db *sql.DB, opts ...Option) (*Dialect, error) {
	if db == nil {
		return nil, dialect.ErrNilDB
	}
	d := &Dialect{db: db, waker: newWaker(), stmtTimeout: dialect.DefaultStatementTimeout}
	for _, o := range opts {
		if err := o(d); err != nil {
			return nil, err
		}
	}
	d.rq = buildRowLockQueries(d.database)
	d.marks = newMarker()
	if err := d.build(); err != nil {
		return nil, err
	}
	return d, nil
}

// Name returns "mysql", or "tidb" for a dialect of NewTiDB.
func (d *Dialect) Name() string {
	if d.tidb != nil {
		return "tidb"
	}
	return "mysql"
}

// DB returns the pool lock statements run on.
func (d *Dialect) DB() *sql.DB { return d.db }

// Database returns the configured database, or "" for the DSN's default.
func (d *Dialect) Database() string { return d.database }

// Migrations implements dialect.Dialect: the package's Migrations, or
// TiDBMigrations for a dialect of NewTiDB.
func (d *Dialect) Migrations() fs.FS {
	if d.tidb != nil {
		return TiDBMigrations()
	}
	return Migrations()
}

// quote backquotes a validated identifier.
func quote(ident string) string { return "`" + ident + "`" }

// Reap implements dialect.Dialect. On one connection, it reaps a batch of
// the lock table, of the version table and of the row-lock table, the
// spent rows of the token table and the read/write locks' expired holder
// rows, each in READ COMMITTED transactions of at most reapChunk rows. A chunk of the lock or version table locks the
// table's floor (so no new row can start from it meanwhile), locks expired
// and released rows (skipping rows an acquirer is touching), deletes them,
// and raises the floor to the largest token or version deleted. Last, it
// reaps a batch of expired semaphore holders (see reapSemaphores), then one
// of expired FIFO tickets of locks (see reapTickets) and one of semaphores
// (see reapSemaphoreTickets). On TiDB it locks each row with NOWAIT
// instead of SKIP LOCKED, which TiDB ignores (see tidbReap).
func (d *Dialect) Reap(ctx context.Context, p dialect.ReapParams) (int, error) {
	if d.tidb != nil {
		return d.tidb.reapAll(ctx, p)
	}
	if err := d.check(ctx); err != nil {
		return 0, err
	}
	return d.reapEach(ctx, p.Limit, d.reapLocks, d.reapVersions, d.reapRowLocks, d.reapTokens, d.reapSemaphores, d.reapRW, d.reapTickets, d.reapSemaphoreTickets)
}

// reapFunc deletes a batch of up to limit rows of one table on conn.
type reapFunc func(ctx context.Context, conn *sql.Conn, limit int) (int, error)

// reapEach runs each of reaps, in chunks of at most reapChunk rows, until
// it has deleted limit rows or a chunk deleted fewer than half of its rows,
// on one connection. A chunk short by the rows it skipped (TiDB's NOWAIT
// skips rows others hold, which SKIP LOCKED would not count) does not end
// a table's batch.
func (d *Dialect) reapEach(ctx context.Context, limit int, reaps ...reapFunc) (total int, err error) {
	err = d.run.Conn(ctx, func(ctx context.Context, conn *sql.Conn) error {
		for _, reap := range reaps {
			for left := limit; left > 0; {
				chunk := min(left, reapChunk)
				n, err := reap(ctx, conn, chunk)
				total += n
				left -= n
				if err != nil {
					return err
				}
				if 2*n < chunk {
					break
				}
			}
		}
		return nil
	})
	return total, err
}

// reapChunk bounds the rows one reaper transaction deletes. They stay
// locked until it commits, and so does the floor of the lock or version
// table: an acquirer of one of those names, or of a new name, waits for at
// most one chunk (a pessimistic TryAcquire of one of those names is
// refused), and with deletes of one row per statement (see deleteByName), a
// chunk of 100 takes a few milliseconds.
const reapChunk = 100

func (d *Dialect) reapLocks(ctx context.Context, conn *sql.Conn, limit int) (int, error) {
	return reapFloored(ctx, conn, &d.reap.locks, limit)
}

func (d *Dialect) reapVersions(ctx context.Context, conn *sql.Conn, limit int) (int, error) {
	return reapFloored(ctx, conn, &d.reap.versions, limit)
}

// reapFloored reaps a batch of the table of s, raising its floor.
func reapFloored(ctx context.Context, conn *sql.Conn, s *floorReap, limit int) (int, error) {
	return reapTx(ctx, conn, func(tx *sql.Tx) (int, error) {
		floor, err := sqlrun.IntOn(ctx, tx, &s.lockFloor, &sqlrun.Params{})
		if err != nil {
			return 0, wrap(err)
		}
		var (
			names []any
			top   = floor // the largest token deleted, or the floor
		)
		err = sqlrun.EachOn(ctx, tx, wrap, &s.expired, &sqlrun.Params{Limit: limit}, func(rows *sql.Rows) error {
			var (
				name  []byte
				token int64
			)
			if err := rows.Scan(&name, &token); err != nil {
				return err
			}
			names = append(names, name)
			top = max(top, token)
			return nil
		})
		if err != nil {
			return 0, err
		}
		n, err := deleteEach(ctx, tx, s.delete, names)
		if err != nil {
			return 0, wrap(err)
		}
		if top > floor {
			if _, err := sqlrun.IntOn(ctx, tx, &s.raiseFloor, &sqlrun.Params{Token: top}); err != nil {
				return 0, wrap(err)
			}
		}
		return n, nil
	})
}

// reapTx runs fn, which returns a number of deleted rows and wrapped
// errors, in a READ COMMITTED transaction on conn, and commits it.
func reapTx(ctx context.Context, conn *sql.Conn, fn func(tx *sql.Tx) (int, error)) (int, error) {
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, wrap(err)
	}
	n, err := fn(tx)
	if err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, wrap(err)
	}
	return n, nil
}

// deleteEach runs query, a prepared DELETE of one row by its key, in tx for
// each of keys, and returns how many rows it deleted. The error is the
// driver's.
func deleteEach(ctx context.Context, tx *sql.Tx, query string, keys []any) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	st, err := tx.PrepareContext(ctx, query)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	n := 0
	for _, k := range keys {
		res, err := st.ExecContext(ctx, k)
		if err != nil {
			return 0, err
		}
		deleted, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		n += int(deleted)
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
// happened. On TiDB, a wait for the lock that TiDB ends with an error is
// repeated until ctx ends.
//
// New's dialect refuses to migrate a TiDB server, with an error wrapping
// dialect.ErrUnsupported, before anything is run: its migrations are
// MySQL's, which TiDB cannot apply (it refuses an index on a column added
// by the same ALTER TABLE, and a migration cut off there leaves the schema
// dirty), and its migrators would not wait for each other there (TiDB ends
// a wait for the lock with an error). NewTiDB's dialect has TiDB's.
func (d *Dialect) MigrationDriver(ctx context.Context, conn *sql.Conn) (database.Driver, error) {
	if d.tidb != nil {
		return d.tidb.migrationDriver(ctx, conn)
	}
	var version string
	if err := conn.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&version); err != nil {
		_ = dialect.Discard(conn)
		return nil, wrap(err)
	}
	if isTiDB(version) {
		_ = dialect.Discard(conn)
		return nil, fmt.Errorf("%w: the server is TiDB (VERSION() %q), which cannot apply the MySQL "+
			"dialect's migrations: use mysql.NewTiDB (a tidb:// DSN for the sqllock command), whose "+
			"migrations are TiDB's", dialect.ErrUnsupported, version)
	}
	drv, err := sqlmigrate.New(ctx, conn, d.migrationStatements())
	return drv, wrap(err)
}

// migrationStatements are the statements of MigrationDriver.
func (d *Dialect) migrationStatements() sqlmigrate.Statements {
	st := sqlmigrate.Statements{
		Lock:        `SELECT GET_LOCK(` + migrationLockName + `, 5) = 1`,
		Unlock:      `DO RELEASE_LOCK(` + migrationLockName + `)`,
		Canceller:   d.killQuery,
		EnsureTable: "CREATE TABLE IF NOT EXISTS sqllock_schema_migrations (version BIGINT NOT NULL PRIMARY KEY, dirty BOOLEAN NOT NULL) ENGINE = InnoDB",
		TableExists: `SELECT COUNT(*) > 0 FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = 'sqllock_schema_migrations'`,
		ReadVersion:  `SELECT version, dirty FROM sqllock_schema_migrations LIMIT 1`,
		ClearVersion: `DELETE FROM sqllock_schema_migrations`,
		WriteVersion: `INSERT INTO sqllock_schema_migrations (version, dirty) VALUES (?, ?)`,
	}
	if d.database != "" {
		// Before the lock, whose name is the selected database's. The
		// database is created only if it is missing: CREATE DATABASE IF
		// NOT EXISTS needs the CREATE privilege even when it exists.
		st.Session = []string{"USE " + quote(d.database)}
		st.Create = []string{"CREATE DATABASE IF NOT EXISTS " + quote(d.database)}
		st.Missing = unknownDatabase
	}
	return st
}

// unknownDatabase reports MySQL's error 1049, unknown database.
func unknownDatabase(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1049
}

// migrationLockName is the name of the migration lock, computed on the
// server: 16 characters and a SHA-1 in hex, 56 in all, whatever the
// database's name. MySQL 5.7+ and TiDB refuse GET_LOCK names over 64
// characters (error 3057), which a database name (up to 64) plus a prefix
// could exceed.
const migrationLockName = `CONCAT('sqllock_migrate:', SHA1(COALESCE(DATABASE(), '')))`

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

// refusedByDriver are the messages with which go-sql-driver/mysql refuses
// to execute a statement before writing its execution (v1.10:
// mysqlStmt.writeExecutePacket). A packet larger than maxAllowedPacket
// (mysql.ErrPktTooLarge) is refused before anything of it is written too.
var refusedByDriver = []string{
	"argument count mismatch (got: ",
	"cannot convert type: ",
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
		case 1792, 1836, 1874, 1036: // read-only transaction, read-only mode, innodb_read_only, read-only table
			return fmt.Errorf("%w: %w", dialect.ErrReadOnly, err)
		case 1290: // the server's options prevent the statement: read_only among others
			if strings.Contains(me.Message, "read-only") || strings.Contains(me.Message, "read_only") {
				return fmt.Errorf("%w: %w", dialect.ErrReadOnly, err)
			}
		}
		return err // the server answered: the statement was not applied
	}
	if errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if errors.Is(err, mysql.ErrPktTooLarge) || sqlrun.NotSent(err, refusedByDriver...) {
		return sqlrun.MarkNotSent(err)
	}
	if errors.Is(err, driver.ErrBadConn) {
		// The driver found the connection broken before writing the
		// statement: nothing was sent.
		return fmt.Errorf("%w: %w", dialect.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %w", dialect.ErrOutcomeUnknown, err)
}
