// Package sqlite is sqllock's embedded SQLite dialect, on the pure-Go driver
// modernc.org/sqlite (no cgo, no server).
//
// It is for locks among the processes of one host that share a database
// file: jobs started by cron on the same machine, command-line tools, the
// workers of a single-host service, demos and tests. Leases expire on the
// host's clock (SQLite's 'now'), which every process of the host shares.
// The file must be on a local file system: SQLite's locking is unreliable
// on network file systems, and processes on other hosts would read other
// clocks.
//
// Open a database with Open, which sets what locking needs (see there). New
// also accepts a pool opened otherwise with the "sqlite" driver of
// modernc.org/sqlite, as long as its connections have a busy timeout.
// SQLite 3.42 or later is needed; the driver bundles a newer one.
//
// SQLite has no row locks: a writing transaction locks the whole database
// until it ends, and a transaction that only reads locks nothing (in WAL
// mode). So there is no SELECT ... FOR UPDATE to build the pessimistic
// strategy on, and this dialect supports the lock-table and optimistic
// strategies only. The same whole-database lock is what makes Guard sound
// here; see Dialect.Guard.
//
// A release wakes the waiters of the other processes of the host through
// Unix datagram sockets in a directory beside the database file, named
// after it with "-wake"; where no socket can be bound (an in-memory
// database, a directory the process may not write, Windows), waiters poll.
// See Dialect.Catalogue, and close the dialect (Dialect.Close) when done.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	msqlite "modernc.org/sqlite" // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/internal/sqlmigrate"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// BusyTimeout is how long a connection opened by Open waits for another
// connection's write lock before a statement fails with SQLITE_BUSY (which
// the dialect reports as dialect.ErrTransient). A context that ends sooner
// ends the wait sooner.
const BusyTimeout = 10 * time.Second

// Open opens the SQLite database file at path, creating it if it does not
// exist, with the settings that locking among goroutines and processes
// needs, and connects once so that a bad path is reported at once. The pool
// belongs to the caller, who closes it.
//
// The settings, applied to every connection:
//
//   - journal_mode WAL: readers never wait for the writer, nor the writer
//     for readers; only writers take turns. The mode is stored in the file.
//   - busy_timeout BusyTimeout: a writer waits for the write lock held by
//     another process instead of failing at once.
//   - synchronous FULL: a committed grant survives a power cut, so fencing
//     tokens never repeat after one (WAL's cheaper NORMAL may lose the last
//     commits).
//   - _txlock=immediate: transactions begun on the pool (a guarded write
//     included) take the write lock at BEGIN, so they never fail half-way
//     upgrading a read to a write (SQLITE_BUSY_SNAPSHOT), and a transaction
//     passed to Lock.Guard holds off takeovers from BEGIN on. Read-only
//     transactions (sql.TxOptions.ReadOnly) begin deferred and lock nothing.
//
// The pool has one connection (SetMaxOpenConns(1)). SQLite runs one writer
// at a time anyway, and every lock transition is a write: with one
// connection the goroutines of a process queue in database/sql and get the
// connection the moment it is free, whereas several connections of one
// process would contend inside SQLite, whose busy handler polls with sleeps
// of up to 100ms. The cost: while a transaction or an unclosed *sql.Rows of
// this pool is open, every other statement on the pool waits for it, lease
// renewals included, so keep transactions short, and do not acquire or
// release locks of this pool from inside one of its transactions (that
// waits until the context ends). Raise the limit with SetMaxOpenConns if
// reads must run beside long transactions; correctness does not depend on
// it.
//
// The path must name a file: an in-memory database exists per connection
// and would vanish with it, so "" and ":memory:" are refused. Do not open
// the database file with other code in the same process (os.Open and Close
// of it drop SQLite's POSIX locks on it: see modernc.org/sqlite.OFDLocking).
func Open(path string) (*sql.DB, error) {
	if path == "" || path == ":memory:" {
		return nil, fmt.Errorf("sqlite: open %q: the lock database must be a file", path)
	}
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return db, nil
}

// dsn is the modernc.org/sqlite data source name for the file at path with
// Open's settings. It is a file: URI, so that a path containing '?' or '#'
// stays a path.
func dsn(path string) string {
	p := filepath.ToSlash(path)
	if filepath.IsAbs(path) && !strings.HasPrefix(p, "/") {
		p = "/" + p // a Windows volume: file:///C:/...
	}
	if strings.HasPrefix(p, "/") {
		p = "//" + p // an empty authority, so that //x is not a host
	}
	return "file:" + uriEscaper.Replace(p) + fmt.Sprintf(
		"?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate",
		BusyTimeout.Milliseconds())
}

var uriEscaper = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")

// Dialect is the SQLite dialect. Create it with New. A Dialect is safe for
// concurrent use. It holds no connection; while its lockers have waiters it
// keeps a socket beside the database file and a goroutine reading it (see
// Close).
type Dialect struct {
	db        *sql.DB
	run       *sqlrun.Runner
	reap      []sqlrun.Stmt // one per table
	wake      *waker        // wake-ups between processes (wake.go)
	noWakeups bool          // the catalogue has no Notifier (WithoutWakeups)
	logger    *slog.Logger
	cat       dialect.Catalogue
}

var _ dialect.Dialect = (*Dialect)(nil)

// Option configures a Dialect.
type Option func(*Dialect)

// WithLogger sets the logger of the dialect's wake-ups, which say at debug
// level why this process's waiters poll (see Catalogue). Default: none.
func WithLogger(l *slog.Logger) Option {
	return func(d *Dialect) { d.logger = l }
}

// WithoutWakeups makes the dialect's waiters poll, as they did before
// wake-ups existed, for a process that must keep no socket or goroutine of
// its own. The dialect's releases still wake the waiters of other
// processes.
func WithoutWakeups() Option {
	return func(d *Dialect) { d.noWakeups = true }
}

// New returns the dialect for db, a pool opened with the "sqlite" driver of
// modernc.org/sqlite, preferably by Open. One database file is one
// namespace, with no schema to choose.
func New(db *sql.DB, opts ...Option) (*Dialect, error) {
	if db == nil {
		return nil, dialect.ErrNilDB
	}
	if _, ok := db.Driver().(*msqlite.Driver); !ok {
		return nil, fmt.Errorf("sqlite: the pool's driver is %T, not modernc.org/sqlite's", db.Driver())
	}
	d := &Dialect{db: db}
	for _, o := range opts {
		o(d)
	}
	if d.logger == nil {
		d.logger = slog.New(slog.DiscardHandler)
	}
	d.wake = newWaker(db, d.logger)
	if err := d.build(); err != nil {
		return nil, err
	}
	return d, nil
}

// Close removes the dialect's wake-up socket, if it has one, and waits
// until its goroutine has ended or ctx ends (then it returns ctx's error).
// The *sql.DB belongs to the caller and stays open; lockers on the dialect
// keep working, but their waiters poll. Calling it again does no harm.
func (d *Dialect) Close(ctx context.Context) error {
	return d.wake.close(ctx)
}

// Name returns "sqlite".
func (d *Dialect) Name() string { return "sqlite" }

// DB returns the pool lock statements run on.
func (d *Dialect) DB() *sql.DB { return d.db }

// Migrations implements dialect.Dialect: the package's Migrations.
func (d *Dialect) Migrations() fs.FS { return Migrations() }

// MigrationDriver implements dialect.Dialect. The migration lock is SQLite's
// write lock: the driver begins a transaction with BEGIN IMMEDIATE (waiting
// while another migrator or writer holds the lock, for as long as the
// context allows), runs the whole migration and its version records in it,
// and commits, or rolls everything back if a statement fails or ctx ends
// (the rollback runs on a context of its own, and conn is closed after the
// run rather than returned to the pool, so that no transaction can outlive
// it). A migrator that dies mid-way leaves nothing behind: SQLite rolls
// back its transaction and the operating system drops its lock. Versions
// are recorded in sqllock_schema_migrations.
func (d *Dialect) MigrationDriver(ctx context.Context, conn *sql.Conn) (database.Driver, error) {
	st := sqlmigrate.Statements{
		TxLock:       true,
		Begin:        "BEGIN IMMEDIATE",
		Busy:         isBusy,
		EnsureTable:  `CREATE TABLE IF NOT EXISTS sqllock_schema_migrations (version INTEGER NOT NULL PRIMARY KEY, dirty INTEGER NOT NULL)`,
		TableExists:  `SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'sqllock_schema_migrations'`,
		ReadVersion:  `SELECT version, dirty FROM sqllock_schema_migrations LIMIT 1`,
		ClearVersion: `DELETE FROM sqllock_schema_migrations`,
		WriteVersion: `INSERT INTO sqllock_schema_migrations (version, dirty) VALUES (?, ?)`,
		Applied:      columnAdded,
	}
	drv, err := sqlmigrate.New(ctx, conn, st)
	return drv, wrap(err)
}

// addColumn matches a migration file's "ALTER TABLE t ADD COLUMN c ...".
var addColumn = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+(\w+)\s+ADD\s+COLUMN\s+(\w+)\s`)

// columnAdded reports whether stmt adds a column that its table has
// already: SQLite has no ADD COLUMN IF NOT EXISTS, and the files must apply
// over the objects a pipeline created from them.
func columnAdded(ctx context.Context, conn *sql.Conn, stmt string) (bool, error) {
	m := addColumn.FindStringSubmatch(stmt)
	if m == nil {
		return false, nil
	}
	var n int
	err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ? COLLATE NOCASE`, m[1], m[2]).Scan(&n)
	return n > 0, wrap(err)
}

// isBusy reports an error saying that another connection holds a lock the
// statement needed: SQLITE_BUSY (another connection's write lock, after the
// busy timeout) or SQLITE_LOCKED (a conflict within a shared cache). The
// statement was not applied.
func isBusy(err error) bool {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	code := se.Code() & 0xff // the primary code of an extended one
	return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED
}

// refusedByDriver are the messages with which modernc.org/sqlite refuses to
// bind a statement's arguments (v1.61: conn.bind), before the statement is
// stepped.
var refusedByDriver = []string{
	"sqlite: invalid driver.Value type ",
	"missing named argument ",
	"missing argument with index ",
}

// wrap maps SQLite errors onto the dialect's sentinels.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var se *msqlite.Error
	if errors.As(err, &se) {
		switch {
		case isBusy(err):
			return fmt.Errorf("%w: %w", dialect.ErrTransient, err)
		case se.Code()&0xff == sqlite3.SQLITE_ERROR && schemaMissing(se.Error()):
			return fmt.Errorf("%w: %w", dialect.ErrSchemaMissing, err)
		}
		return err // SQLite refused the statement: it was not applied
	}
	if errors.Is(err, sql.ErrNoRows) || errors.Is(err, driver.ErrBadConn) {
		return err
	}
	if sqlrun.NotSent(err, refusedByDriver...) {
		return sqlrun.MarkNotSent(err)
	}
	// Above all a context that ended while the statement ran: the driver
	// then interrupts it, but it may have completed just before.
	return fmt.Errorf("%w: %w", dialect.ErrOutcomeUnknown, err)
}

// schemaMissing reports a message of SQLITE_ERROR that names a missing
// table or column; SQLite has no finer code for these.
func schemaMissing(msg string) bool {
	return strings.Contains(msg, "no such table") || strings.Contains(msg, "no such column")
}
