// Package sqlmigrate is a golang-migrate database driver over one *sql.Conn,
// shared by the dialects. Unlike golang-migrate's own drivers it never closes
// the caller's pool, records versions in a table named by the dialect, and
// does not need multi-statement support in the user's DSN.
//
// It runs DDL only to change the schema: reading the version, and a run
// that finds nothing to do, take the migration lock and read, which a role
// with no more than SELECT, INSERT, UPDATE and DELETE on the tables may do.
// The version table (and the schema or database it is in) is created under
// the lock before the first version record of a run is written, so a role
// without the privilege to create them fails there, before anything of the
// run is written.
//
// Its connection never goes back to the pool: Close, and New when it fails,
// discard it, so that no transaction, session lock or session setting of a
// migration outlives it. Statements that end a transaction or release the
// lock run on a context of their own, bounded by CleanupTimeout, so that
// they run even after the caller's context ended.
package sqlmigrate

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"time"

	"github.com/golang-migrate/migrate/v4/database"

	"github.com/sqllock/sqllock/internal/sqlrun"
)

// CleanupTimeout bounds each statement that ends a migration run's
// transaction or releases its lock.
const CleanupTimeout = 5 * time.Second

// Statements is the SQL a dialect supplies. Placeholders are the dialect's own.
type Statements struct {
	// Session runs once, first, outside the lock (for example to select
	// a database); may be empty. Its settings end with the connection.
	Session []string
	// Create makes what Session needs, such as the database it selects:
	// when a statement of Session fails with an error that Missing
	// reports, Create runs and then Session again. Both may be nil. It
	// needs DDL privileges, so it runs only when something is missing.
	Create  []string
	Missing func(error) bool
	// TxLock makes the migration lock a transaction's, for servers with
	// transactional DDL: Lock begins a transaction with Begin, runs
	// Prepare in it and then takes the lock with the Lock statement (if
	// any); everything up to Unlock runs in that transaction, which Unlock
	// commits, or rolls back if a statement in it failed or the context
	// ended: a run is applied as a whole or not at all, and nothing of it
	// outlives the transaction. Without TxLock, Lock and Unlock take and
	// release a session lock, migration files run statement by statement,
	// and each version record is a transaction of its own.
	TxLock bool
	// Begin begins the lock's transaction (TxLock only): BEGIN, or
	// SQLite's BEGIN IMMEDIATE, which takes the lock itself.
	Begin string
	// Prepare runs in the lock's transaction before the Lock statement
	// (TxLock only), for settings of the transaction (SET LOCAL).
	Prepare []string
	// Lock waits for the migration lock. It takes no arguments and
	// returns one row whose single column is true once the lock is held
	// (false means "try again"). Under TxLock it may be empty, when Begin
	// takes the lock.
	Lock string
	// Unlock releases the session lock (without TxLock).
	Unlock string
	// Busy reports whether an error of Begin or Lock means that another
	// migrator holds the lock, to be tried again; may be nil.
	Busy func(error) bool
	// Setup runs under the lock, before EnsureTable (for example to create
	// the schema, which concurrent migrators would otherwise race on).
	Setup []string
	// EnsureTable creates the version table if it does not exist. It and
	// Setup run under the lock before the first version record of a run,
	// and not at all for a run that writes none.
	EnsureTable string
	// TableExists selects one boolean: whether the version table exists.
	// It takes no arguments and needs no privilege beyond those on the
	// table, found as ReadVersion finds it.
	TableExists string
	// ReadVersion selects (version, dirty) from the version table.
	ReadVersion string
	// ClearVersion deletes every row of the version table.
	ClearVersion string
	// WriteVersion inserts (version, dirty).
	WriteVersion string
	// Canceller, if not nil, is called once, first, and returns a function
	// asking the server to cancel the statement running on conn. A
	// statement running when the context ends is then ended on the server
	// (see sqlrun.Cancellable), so that no wait outlives the context, and
	// the lock is released on a live connection before it is discarded.
	// Without it, the driver interrupts the statement as the context ends.
	Canceller func(ctx context.Context, conn *sql.Conn) (func(context.Context) error, error)
	// Applied, if not nil, reports whether a statement of a migration file
	// is applied already, to be skipped: for DDL the database cannot make
	// conditional (SQLite's ADD COLUMN has no IF NOT EXISTS), so that the
	// files apply over the objects another tool created from them.
	Applied func(ctx context.Context, conn *sql.Conn, stmt string) (bool, error)
	// Lead are arguments put before every statement's own, which the
	// driver takes as options of the statement (pgx's QueryExecMode); nil
	// for none. Statements that end a transaction run without them.
	Lead []any
}

// Driver implements database.Driver.
type Driver struct {
	ctx    context.Context
	conn   *sql.Conn
	st     Statements
	cancel func(context.Context) error // from st.Canceller, or nil
	// failed records that a statement failed since the current
	// transaction began, so that it is rolled back.
	failed bool
	// ensured records that Setup and EnsureTable ran, in the lock's
	// current transaction under TxLock: see ensure.
	ensured bool
}

// New returns a driver on conn, whose statements run on ctx. It takes
// ownership of conn: Close discards it, and so does New if it fails.
func New(ctx context.Context, conn *sql.Conn, st Statements) (*Driver, error) {
	d := &Driver{ctx: ctx, conn: conn, st: st}
	if err := d.init(); err != nil {
		_ = d.Close()
		return nil, err
	}
	return d, nil
}

// init prepares the connection: no DDL runs unless Session needs Create.
func (d *Driver) init() error {
	if d.st.Canceller != nil {
		var err error
		if d.cancel, err = d.st.Canceller(d.ctx, d.conn); err != nil {
			return err
		}
	}
	err := d.session()
	if err != nil && len(d.st.Create) > 0 && d.st.Missing != nil && d.st.Missing(err) {
		for _, q := range d.st.Create {
			if err := d.exec(q); err != nil {
				return err
			}
		}
		err = d.session()
	}
	return err
}

// session runs the Session statements.
func (d *Driver) session() error {
	for _, q := range d.st.Session {
		if err := d.exec(q); err != nil {
			return err
		}
	}
	return nil
}

// EnsureTable creates the version table, and the schema or database it is
// in, if missing: it takes the lock, runs Setup and EnsureTable, and
// releases the lock. sqllock.Migrate calls it before a run that writes a
// version record, so that a role without the privilege to create them
// fails before golang-migrate starts the run. A run ensures the table
// itself otherwise, before its first version record (see SetVersion).
func (d *Driver) EnsureTable() error {
	if err := d.Lock(); err != nil {
		return err
	}
	if err := d.ensure(); err != nil {
		_ = d.Unlock()
		return err
	}
	return d.Unlock()
}

// ensure runs Setup and EnsureTable once per driver, under the lock, before
// the first version record is written. Concurrent CREATE ... IF NOT EXISTS
// can fail on PostgreSQL with a unique violation: under the lock, it does
// not race. Under TxLock it runs in the lock's transaction, once per
// transaction (Lock starts another).
func (d *Driver) ensure() error {
	if d.ensured {
		return nil
	}
	for _, q := range slices.Concat(d.st.Setup, []string{d.st.EnsureTable}) {
		if err := d.exec(q); err != nil {
			return err
		}
	}
	d.ensured = true
	return nil
}

// Open is not supported: drivers are built from a connection by New.
func (d *Driver) Open(string) (database.Driver, error) {
	return nil, errors.New("sqlmigrate: Open is not supported; use sqllock.Migrate")
}

// Close discards the connection rather than returning it to the pool: its
// session state is the migration's, and a cleanup that failed may have left
// it inside a transaction or holding the lock, which only the end of the
// connection then releases. The pool itself stays open.
func (d *Driver) Close() error {
	// database/sql closes a connection whose Raw callback reports
	// ErrBadConn, instead of returning it to the pool.
	if err := d.conn.Raw(func(any) error { return driver.ErrBadConn }); !errors.Is(err, driver.ErrBadConn) {
		return err
	}
	return nil
}

// Lock waits for the migration lock, for as long as the context allows. An
// attempt that fails leaves nothing held.
func (d *Driver) Lock() error {
	for {
		held, err := d.tryLock()
		if err == nil && held {
			d.failed = false
			if d.st.TxLock {
				d.ensured = false // a new transaction
			}
			return nil
		}
		// Drop what the attempt may have left: its transaction, or a
		// lock granted to a statement as the context cut it off.
		_ = d.release()
		// Once the context ended, the next attempt returns its error.
		if err != nil && (d.st.Busy == nil || !d.st.Busy(err)) {
			return err
		}
	}
}

// tryLock makes one attempt at the lock.
func (d *Driver) tryLock() (held bool, err error) {
	if d.st.TxLock {
		for _, q := range append([]string{d.st.Begin}, d.st.Prepare...) {
			if err := d.exec(q); err != nil {
				return false, err
			}
		}
		if d.st.Lock == "" {
			return true, nil
		}
	}
	err = d.run(func(ctx context.Context) error {
		return d.conn.QueryRowContext(ctx, d.st.Lock, d.args()...).Scan(&held)
	})
	return held, err
}

// Unlock releases the migration lock. Under TxLock it commits the
// transaction, or rolls it back if a statement in it failed or the context
// ended; it then returns the context's error, since nothing was applied.
func (d *Driver) Unlock() error {
	if d.st.TxLock {
		return d.finish()
	}
	return d.release()
}

// finish ends the current transaction: it commits it unless a statement in
// it failed or the context ended, and rolls it back otherwise. It returns
// the context's error if that ended.
func (d *Driver) finish() error {
	if err := d.ctx.Err(); err != nil {
		_ = d.cleanup("ROLLBACK")
		return err
	}
	if d.failed {
		return d.cleanup("ROLLBACK")
	}
	// COMMIT is not cut off when the context ends: its outcome would be
	// unknown.
	if err := d.cleanup("COMMIT"); err != nil {
		_ = d.cleanup("ROLLBACK")
		return err
	}
	return nil
}

// release drops the lock: it rolls the lock's transaction back (TxLock), or
// releases the session lock.
func (d *Driver) release() error {
	if d.st.TxLock {
		return d.cleanup("ROLLBACK")
	}
	return d.cleanup(d.st.Unlock)
}

// cleanup runs q, which ends a transaction or releases the lock, on a
// context of its own: the caller's may have ended. It is bounded by
// CleanupTimeout; if it fails, Close's discarding of the connection ends
// what q was to end.
func (d *Driver) cleanup(q string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.ctx), CleanupTimeout)
	defer cancel()
	_, err := d.conn.ExecContext(ctx, q)
	return err
}

// run runs f, one statement on the connection, unless the context ended:
// f's context ends with the driver's, or, with a canceller, the statement
// is cancelled on the server when the driver's context ends. A failure is
// recorded for the current transaction.
func (d *Driver) run(f func(ctx context.Context) error) error {
	err := d.ctx.Err()
	if err == nil {
		_, err = sqlrun.Cancellable(d.ctx, d.cancel, f)
	}
	if err != nil {
		d.failed = true
	}
	return err
}

// exec runs q on the connection.
func (d *Driver) exec(q string, args ...any) error {
	return d.run(func(ctx context.Context) error {
		_, err := d.conn.ExecContext(ctx, q, d.args(args...)...)
		return err
	})
}

// args returns a statement's arguments after the leading ones.
func (d *Driver) args(args ...any) []any {
	return append(d.st.Lead[:len(d.st.Lead):len(d.st.Lead)], args...)
}

// Run applies one migration file, statement by statement. Statements are
// separated by a line that ends in ';' (see Split); the files in this module
// are written that way.
func (d *Driver) Run(migration io.Reader) error {
	body, err := io.ReadAll(migration)
	if err != nil {
		return err
	}
	for _, s := range Split(body) {
		if d.st.Applied != nil {
			var done bool
			err := d.run(func(ctx context.Context) (err error) {
				done, err = d.st.Applied(ctx, d.conn, s)
				return err
			})
			if err != nil {
				return fmt.Errorf("migration statement %q: %w", s, err)
			}
			if done {
				continue
			}
		}
		if err := d.exec(s); err != nil {
			return fmt.Errorf("migration statement %q: %w", s, err)
		}
	}
	return nil
}

// Split cuts a migration file into statements at lines ending in ';'
// outside a $$-quoted body (a PostgreSQL function's) and outside a MySQL
// routine's compound body (from an unindented line "BEGIN" to an
// unindented line "END;", which ends the statement), dropping blank lines
// and "--" comment lines.
func Split(body []byte) []string {
	var (
		stmts    []string
		cur      bytes.Buffer
		quoted   bool // inside $$ ... $$
		compound bool // inside an unindented BEGIN ... END;
	)
	for _, line := range bytes.Split(body, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) == 0 || bytes.HasPrefix(t, []byte("--")) {
			continue
		}
		cur.Write(t)
		cur.WriteByte('\n')
		if bytes.Count(t, []byte("$$"))%2 == 1 {
			quoted = !quoted
		}
		raw := bytes.TrimRight(line, " \t\r")
		switch {
		case quoted:
		case !compound && bytes.Equal(raw, []byte("BEGIN")):
			compound = true
			continue
		case compound && bytes.Equal(raw, []byte("END;")):
			compound = false
		case compound:
			continue
		}
		if !quoted && bytes.HasSuffix(t, []byte(";")) {
			stmts = append(stmts, string(bytes.TrimSuffix(bytes.TrimSpace(cur.Bytes()), []byte(";"))))
			cur.Reset()
		}
	}
	if s := bytes.TrimSpace(cur.Bytes()); len(s) > 0 {
		stmts = append(stmts, string(s))
	}
	return stmts
}

// SetVersion records version and dirty, replacing what was there. The
// first record of a run ensures the version table first (see ensure):
// golang-migrate writes one before each migration it runs.
func (d *Driver) SetVersion(version int, dirty bool) error {
	if err := d.ensure(); err != nil {
		return err
	}
	if !d.st.TxLock { // a transaction of its own
		if err := d.exec("BEGIN"); err != nil {
			return err
		}
		d.failed = false
	}
	err := d.exec(d.st.ClearVersion)
	// golang-migrate records NilVersion (-1) after the last down migration:
	// an empty table says the same.
	if err == nil && (version >= 0 || dirty) {
		err = d.exec(d.st.WriteVersion, int64(version), dirty)
	}
	if d.st.TxLock { // the lock's transaction goes on
		return err
	}
	if ferr := d.finish(); err == nil {
		err = ferr
	}
	return err
}

// Version returns the recorded version, or database.NilVersion (also when
// the version table does not exist yet).
func (d *Driver) Version() (int, bool, error) {
	var (
		v     int64
		dirty bool
		none  bool
	)
	err := d.run(func(ctx context.Context) error {
		var exists bool
		if err := d.conn.QueryRowContext(ctx, d.st.TableExists, d.args()...).Scan(&exists); err != nil || !exists {
			none = true
			return err
		}
		err := d.conn.QueryRowContext(ctx, d.st.ReadVersion, d.args()...).Scan(&v, &dirty)
		if errors.Is(err, sql.ErrNoRows) {
			none, err = true, nil
		}
		return err
	})
	switch {
	case err != nil:
		return 0, false, err
	case none:
		return database.NilVersion, false, nil
	}
	return int(v), dirty, nil
}

// Drop is refused: sqllock never drops what it did not create. Use the down
// migrations.
func (d *Driver) Drop() error {
	return errors.New("sqlmigrate: Drop is not supported; migrate down instead")
}

// Files returns the folder dir of a dialect's embedded migration files,
// which holds them at its root. dir is a constant the embed directive
// names, so fs.Sub cannot fail; if it did, the build itself is wrong.
func Files(embedded fs.FS, dir string) fs.FS {
	f, err := fs.Sub(embedded, dir)
	if err != nil {
		panic(err)
	}
	return f
}
