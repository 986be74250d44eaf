// Package sqlmigrate is a golang-migrate database driver over one *sql.Conn,
// shared by the dialects. Unlike golang-migrate's own drivers it never closes
// the caller's pool, records versions in a table named by the dialect, and
// does not need multi-statement support in the user's DSN.
package sqlmigrate

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"

	"github.com/golang-migrate/migrate/v4/database"
)

// Statements is the SQL a dialect supplies. Placeholders are the dialect's own.
type Statements struct {
	// Setup runs once on the connection before anything else (for example
	// to create and select a schema); may be empty.
	Setup []string
	// Lock waits until this connection holds the migration lock; Unlock
	// releases it. Both take no arguments. Lock must return one row whose
	// single column is true once the lock is held (false means "try again").
	Lock, Unlock string
	// EnsureTable creates the version table if it does not exist.
	EnsureTable string
	// ReadVersion selects (version, dirty) from the version table.
	ReadVersion string
	// ClearVersion deletes every row of the version table.
	ClearVersion string
	// WriteVersion inserts (version, dirty).
	WriteVersion string
	// Transactional runs each migration file in a transaction (for servers
	// with transactional DDL).
	Transactional bool
	// TxLock makes the migration lock a transaction, for databases whose
	// only lock is the transaction's own (SQLite): Lock is a statement that
	// begins a transaction holding that lock (BEGIN IMMEDIATE), executed
	// rather than queried and retried while Busy says another migrator
	// holds it; Unlock commits. Everything in between runs in that
	// transaction, so Transactional is ignored, and a run during which a
	// migration or a version write failed is rolled back as a whole by
	// Unlock: the schema and its recorded version stay as they were.
	TxLock bool
	// Busy reports whether an error of Lock means that the lock is held
	// elsewhere, to be tried again; used with TxLock, may be nil.
	Busy func(error) bool
}

// Driver implements database.Driver.
type Driver struct {
	ctx  context.Context
	conn *sql.Conn
	st   Statements
	// failed records, under TxLock, that a statement of the current
	// transaction failed, so that Unlock rolls it back.
	failed bool
}

// New returns a driver on conn. It takes ownership of conn: Close discards it.
func New(ctx context.Context, conn *sql.Conn, st Statements) (*Driver, error) {
	d := &Driver{ctx: ctx, conn: conn, st: st}
	// Concurrent CREATE ... IF NOT EXISTS can fail on PostgreSQL with a
	// unique violation, so even the setup runs under the migration lock.
	if err := d.Lock(); err != nil {
		return nil, err
	}
	for _, q := range append(st.Setup, st.EnsureTable) {
		if err := d.exec(q); err != nil {
			_ = d.Unlock()
			return nil, err
		}
	}
	return d, d.Unlock()
}

// Open is not supported: drivers are built from a connection by New.
func (d *Driver) Open(string) (database.Driver, error) {
	return nil, errors.New("sqlmigrate: Open is not supported; use sqllock.Migrate")
}

// Close discards the connection rather than returning it to the pool, since
// Setup may have changed its session state. The pool itself stays open.
func (d *Driver) Close() error {
	// database/sql closes a connection whose Raw callback reports
	// ErrBadConn, instead of returning it to the pool.
	if err := d.conn.Raw(func(any) error { return driver.ErrBadConn }); !errors.Is(err, driver.ErrBadConn) {
		return err
	}
	return nil
}

// Lock waits for the migration lock, for as long as the context allows.
func (d *Driver) Lock() error {
	for {
		var (
			ok  bool
			err error
		)
		if d.st.TxLock {
			_, err = d.conn.ExecContext(d.ctx, d.st.Lock)
			ok = err == nil
			if d.st.Busy != nil && d.st.Busy(err) {
				err = nil
			}
			d.failed = false
		} else {
			err = d.conn.QueryRowContext(d.ctx, d.st.Lock).Scan(&ok)
		}
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if err := d.ctx.Err(); err != nil {
			return err
		}
	}
}

// Unlock releases the migration lock. Under TxLock it commits the
// transaction, or rolls it back if a statement in it failed.
func (d *Driver) Unlock() error {
	q := d.st.Unlock
	if d.st.TxLock && d.failed {
		q = "ROLLBACK"
	}
	_, err := d.conn.ExecContext(d.ctx, q)
	return err
}

// exec runs q on the connection, recording a failure for Unlock.
func (d *Driver) exec(q string, args ...any) error {
	_, err := d.conn.ExecContext(d.ctx, q, args...)
	if err != nil {
		d.failed = true
	}
	return err
}

// Run applies one migration file, statement by statement. Statements are
// separated by a line that ends in ';'; the files in this module are written
// that way and contain no procedural bodies.
func (d *Driver) Run(migration io.Reader) error {
	body, err := io.ReadAll(migration)
	if err != nil {
		return err
	}
	stmts := Split(body)
	if !d.st.Transactional || d.st.TxLock {
		for _, s := range stmts {
			if err := d.exec(s); err != nil {
				return fmt.Errorf("migration statement %q: %w", s, err)
			}
		}
		return nil
	}
	tx, err := d.conn.BeginTx(d.ctx, nil)
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(d.ctx, s); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("migration statement %q: %w", s, err)
		}
	}
	return tx.Commit()
}

// Split cuts a migration file into statements at lines ending in ';',
// dropping blank lines and "--" comment lines.
func Split(body []byte) []string {
	var (
		stmts []string
		cur   bytes.Buffer
	)
	for _, line := range bytes.Split(body, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) == 0 || bytes.HasPrefix(t, []byte("--")) {
			continue
		}
		cur.Write(t)
		cur.WriteByte('\n')
		if bytes.HasSuffix(t, []byte(";")) {
			stmts = append(stmts, string(bytes.TrimSuffix(bytes.TrimSpace(cur.Bytes()), []byte(";"))))
			cur.Reset()
		}
	}
	if s := bytes.TrimSpace(cur.Bytes()); len(s) > 0 {
		stmts = append(stmts, string(s))
	}
	return stmts
}

// SetVersion records version and dirty, replacing what was there.
func (d *Driver) SetVersion(version int, dirty bool) error {
	// golang-migrate records NilVersion (-1) after the last down migration:
	// an empty table says the same.
	write := version >= 0 || dirty
	if d.st.TxLock { // already in the lock's transaction
		if err := d.exec(d.st.ClearVersion); err != nil || !write {
			return err
		}
		return d.exec(d.st.WriteVersion, int64(version), dirty)
	}
	tx, err := d.conn.BeginTx(d.ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(d.ctx, d.st.ClearVersion); err != nil {
		_ = tx.Rollback()
		return err
	}
	if write {
		if _, err := tx.ExecContext(d.ctx, d.st.WriteVersion, int64(version), dirty); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

// Version returns the recorded version, or database.NilVersion.
func (d *Driver) Version() (int, bool, error) {
	var (
		v     int64
		dirty bool
	)
	err := d.conn.QueryRowContext(d.ctx, d.st.ReadVersion).Scan(&v, &dirty)
	if errors.Is(err, sql.ErrNoRows) {
		return database.NilVersion, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return int(v), dirty, nil
}

// Drop is refused: sqllock never drops what it did not create. Use the down
// migrations.
func (d *Driver) Drop() error {
	return errors.New("sqlmigrate: Drop is not supported; migrate down instead")
}
