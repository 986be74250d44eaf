package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/dialecttest"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/testutil"
)

func newTiDB(db *sql.DB, database string) (dialect.Dialect, error) {
	return mysql.NewTiDB(db, mysql.WithDatabase(database))
}

// The TiDB dialect passes the conformance suite on a TiDB server (make
// test-tidb), but for shared row locks, which it refuses, and a killed
// session.
func TestTiDBConformance(t *testing.T) {
	t.Parallel()
	dialecttest.Exercise(t, tidbHarness(func(t *testing.T) *dialecttest.Env {
		db, database := dbtest.TiDB(t)
		e := envOn(t, db, database, dbtest.TiDBDSN(t), newTiDB)
		// KILL CONNECTION of a session inside a transaction crashes the
		// TiDB server of the test bed: the check of a killed holder is
		// skipped there.
		e.Kill = nil
		return e
	}))
}

// Its statements are portable: it passes the suite on MySQL/MariaDB too.
func TestTiDBConformanceOnMySQL(t *testing.T) {
	t.Parallel()
	dialecttest.Exercise(t, tidbHarness(func(t *testing.T) *dialecttest.Env {
		db, database := dbtest.MySQL(t)
		return envOn(t, db, database, dbtest.MySQLDSN(t), newTiDB)
	}))
}

func tidbHarness(newEnv func(t *testing.T) *dialecttest.Env) dialecttest.Harness {
	return dialecttest.Harness{
		New: newEnv,
		WithNamespace: func(name string) error {
			db, err := sql.Open("mysql", "nobody@tcp(nowhere.invalid:3306)/none") // never connects
			if err != nil {
				return err
			}
			defer db.Close()
			_, err = mysql.NewTiDB(db, mysql.WithDatabase(name))
			return err
		},
	}
}

// On TiDB, the MySQL dialect refuses every strategy, with the reason.
func TestMySQLDialectRefusesTiDB(t *testing.T) {
	t.Parallel()
	db, database := dbtest.TiDB(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	td, err := mysql.NewTiDB(db, mysql.WithDatabase(database))
	if err != nil {
		t.Fatal(err)
	}
	if err := sqllock.Migrate(ctx, td); err != nil {
		t.Fatal(err)
	}
	d, err := mysql.New(db, mysql.WithDatabase(database))
	if err != nil {
		t.Fatal(err)
	}
	p := dialect.AcquireParams{Name: "n", Owner: "o", TTL: time.Minute}
	checks := map[string]func() error{
		"Acquire": func() error { _, err := testutil.Tables(t, d).Locks.Acquire(ctx, p); return err },
		"Create":  func() error { _, err := testutil.Tables(t, d).Versions.Create(ctx, p); return err },
		"LockRow": func() error {
			_, err := d.Catalogue().Pessimistic.LockRow(ctx, dialect.RowLockParams{Name: "n"})
			return err
		},
		"Reap": func() error { _, err := d.Reap(ctx, dialect.ReapParams{Limit: 10}); return err },
	}
	for what, run := range checks {
		if err := run(); !errors.Is(err, dialect.ErrUnsupported) {
			t.Errorf("%s on TiDB: %v, want ErrUnsupported", what, err)
		}
	}
	// Nothing was granted.
	held, err := testutil.Tables(t, td).Locks.List(ctx)
	if err != nil || len(held) != 0 {
		t.Errorf("List: %v, %v: want nothing held", held, err)
	}
}

// The TiDB dialect refuses shared row locks.
func TestTiDBRefusesSharedRowLocks(t *testing.T) {
	t.Parallel()
	db, database := dbtest.MySQL(t)
	d, err := mysql.NewTiDB(db, mysql.WithDatabase(database))
	if err != nil {
		t.Fatal(err)
	}
	for _, wait := range []bool{false, true} {
		if _, err := d.Catalogue().Pessimistic.LockRow(t.Context(), dialect.RowLockParams{Name: "n", Shared: true, Wait: wait}); !errors.Is(err, dialect.ErrUnsupported) {
			t.Errorf("shared LockRow (Wait %v): %v, want ErrUnsupported", wait, err)
		}
	}
}

// TiDB's retryable transaction errors are transient; its other errors map
// as MySQL's do.
func TestWrapTiDB(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  *gomysql.MySQLError
		want error // nil: none of the sentinels
	}{
		{&gomysql.MySQLError{Number: 1105, Message: "pessimistic lock retry limit reached"}, dialect.ErrTransient},
		{&gomysql.MySQLError{Number: 1105, Message: "some other internal error"}, nil},
		{&gomysql.MySQLError{Number: 9007, Message: "Write conflict"}, dialect.ErrTransient},
		{&gomysql.MySQLError{Number: 8028, Message: "Information schema is changed"}, dialect.ErrTransient},
		{&gomysql.MySQLError{Number: 1213, Message: "Deadlock found"}, dialect.ErrTransient},
		{&gomysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}, dialect.ErrLocked},
		{&gomysql.MySQLError{Number: 3572, Message: "NOWAIT"}, dialect.ErrLocked},
		{&gomysql.MySQLError{Number: 1146, Message: "no such table"}, dialect.ErrSchemaMissing},
	} {
		got := mysql.WrapTiDB(c.err)
		if !errors.Is(got, c.err) {
			t.Errorf("%v: %v does not wrap the server's error", c.err, got)
		}
		for _, s := range []error{dialect.ErrTransient, dialect.ErrLocked, dialect.ErrSchemaMissing, dialect.ErrOutcomeUnknown} {
			if errors.Is(got, s) != (s == c.want) {
				t.Errorf("%v: %v: errors.Is(%v) = %v", c.err, got, s, errors.Is(got, s))
			}
		}
	}
}

// The TiDB migrations are a folder of their own, beside MySQL's: a
// dialect's migration files are all at the root of its FS.
func TestTiDBMigrationsApart(t *testing.T) {
	t.Parallel()
	tidb, err := fs.Glob(mysql.TiDBMigrations(), "*.up.sql")
	if err != nil || len(tidb) == 0 {
		t.Fatalf("TiDB migrations: %v, %v", tidb, err)
	}
	rowlocks, err := fs.ReadFile(mysql.TiDBMigrations(), "5_create_rowlocks.up.sql")
	if err != nil || !strings.Contains(string(rowlocks), "AUTO_ID_CACHE=1") {
		t.Fatalf("TiDB's row-lock migration lacks AUTO_ID_CACHE=1 (%v)", err)
	}
	if _, err := fs.Stat(mysql.Migrations(), "19_semaphore_ticket_wakers.up.sql"); err != nil {
		t.Fatalf("MySQL migrations: %v", err)
	}
	files, err := fs.ReadDir(mysql.Migrations(), ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.IsDir() || !strings.HasSuffix(f.Name(), ".sql") {
			t.Errorf("MySQL migrations hold %s", f.Name())
		}
	}
}
