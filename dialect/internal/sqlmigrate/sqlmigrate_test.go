package sqlmigrate_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/golang-migrate/migrate/v4/database"
	msqlite "modernc.org/sqlite"

	"github.com/sqllock/sqllock/dialect/internal/sqlmigrate"
)

// cancels maps a test's name to the cancel function that the SQL function
// cancel_ctx(name) calls: a way to end a context at an exact point of a run.
var cancels sync.Map

func init() {
	msqlite.MustRegisterScalarFunction("cancel_ctx", 1, func(_ *msqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		if f, ok := cancels.Load(args[0]); ok {
			f.(context.CancelFunc)()
		}
		return int64(1), nil
	})
}

// statements is a migration driver's SQL for SQLite, with setup as its Setup.
func statements(setup ...string) sqlmigrate.Statements {
	return sqlmigrate.Statements{
		TxLock:       true,
		Begin:        "BEGIN IMMEDIATE",
		Setup:        setup,
		EnsureTable:  `CREATE TABLE IF NOT EXISTS versions (version INTEGER NOT NULL PRIMARY KEY, dirty INTEGER NOT NULL)`,
		TableExists:  `SELECT COUNT(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = 'versions'`,
		ReadVersion:  `SELECT version, dirty FROM versions LIMIT 1`,
		ClearVersion: `DELETE FROM versions`,
		WriteVersion: `INSERT INTO versions (version, dirty) VALUES (?, ?)`,
	}
}

// open opens a pool of one connection on the file at path.
func open(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(100)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// checkClean fails t unless db holds no connection, and another pool can
// take the file's write lock: nothing of the run is left behind.
func checkClean(t *testing.T, db *sql.DB, path string) {
	t.Helper()
	if n := db.Stats().OpenConnections; n != 0 {
		t.Fatalf("%d connections open: the driver's went back to the pool", n)
	}
	conn, err := open(t, path).Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("the write lock is still held: %v", err)
	}
	if _, err := conn.ExecContext(t.Context(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
}

// A New whose context ends half-way discards its connection.
func TestNewCancelledDiscardsConnection(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.db")
	db := open(t, path)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cancels.Store(t.Name(), cancel)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := statements()
	st.Session = []string{`SELECT cancel_ctx('` + t.Name() + `')`, `SELECT 1`}
	drv, err := sqlmigrate.New(ctx, conn, st)
	if !errors.Is(err, context.Canceled) || drv != nil {
		t.Fatalf("New: %v, want context.Canceled", err)
	}
	checkClean(t, db, path)
}

// A first version record whose context ends in the setup, inside the
// lock's transaction, fails; Unlock rolls the transaction back and Close
// discards the connection.
func TestSetupCancelledRollsBack(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.db")
	db := open(t, path)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cancels.Store(t.Name(), cancel)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	drv, err := sqlmigrate.New(ctx, conn, statements(`SELECT cancel_ctx('`+t.Name()+`')`))
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Lock(); err != nil {
		t.Fatal(err)
	}
	if err := drv.SetVersion(1, true); !errors.Is(err, context.Canceled) {
		t.Fatalf("SetVersion: %v, want context.Canceled", err)
	}
	if err := drv.Unlock(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Unlock: %v, want context.Canceled", err)
	}
	if err := drv.Close(); err != nil {
		t.Fatal(err)
	}
	checkClean(t, db, path)
}

// Reading the version and a run that writes none create nothing: the
// version table is made before the first version record.
func TestVersionCreatesNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.db")
	db := open(t, path)
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	drv, err := sqlmigrate.New(t.Context(), conn, statements())
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Lock(); err != nil {
		t.Fatal(err)
	}
	if v, dirty, err := drv.Version(); err != nil || v != database.NilVersion || dirty {
		t.Fatalf("Version: %d, %v, %v; want NilVersion", v, dirty, err)
	}
	if err := drv.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := drv.Close(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM sqlite_schema`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tables after reading the version, %v", n, err)
	}
}

// A run whose context ends after a migration is rolled back as a whole,
// by an Unlock that reports the context's error, and Close discards the
// connection.
func TestCancelledRunRollsBack(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "m.db")
	db := open(t, path)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	drv, err := sqlmigrate.New(ctx, conn, statements())
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Lock(); err != nil {
		t.Fatal(err)
	}
	if err := drv.Run(strings.NewReader("CREATE TABLE t (id INTEGER);\n")); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := drv.SetVersion(1, false); !errors.Is(err, context.Canceled) {
		t.Fatalf("SetVersion: %v, want context.Canceled", err)
	}
	if err := drv.Unlock(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Unlock: %v, want context.Canceled", err)
	}
	if err := drv.Close(); err != nil {
		t.Fatal(err)
	}
	checkClean(t, db, path)
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM sqlite_schema WHERE name = 't'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tables of the cancelled run, %v", n, err)
	}
}
