package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	_ "github.com/jackc/pgx/v5/stdlib" // a driver other than SQLite's
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/dialecttest"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/testutil"
)

func TestMain(m *testing.M) {
	testutil.ChildMain(waiterEnv, waiter.run)
	os.Exit(dbtest.Finish(m.Run()))
}

// The dialect passes the conformance suite, on a database file of each
// subtest's own. SQLite has one writer at a time, no sessions to kill, and
// no view of waiting statements: Waiting counts the statements under way on
// the dialect's pool.
func TestConformance(t *testing.T) {
	t.Parallel()
	dbtest.SQLite(t)
	dialecttest.Exercise(t, dialecttest.Harness{New: newEnv})
}

// newEnv is the suite's dialect on a fresh, migrated database file.
func newEnv(t *testing.T) *dialecttest.Env {
	path := filepath.Join(t.TempDir(), "locks.db")
	db := open(t, path)
	d := newDialect(t, db)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return &dialecttest.Env{
		Dialect: d,
		Open: func(t *testing.T, maxConns int) dialect.Dialect {
			db := open(t, path)
			if maxConns > 0 {
				db.SetMaxOpenConns(maxConns)
			}
			return newDialect(t, db)
		},
		Expire: func(ctx context.Context, tb dialecttest.Table, name string) error {
			// Times are microseconds since the Unix epoch.
			res, err := db.ExecContext(ctx, "UPDATE "+string(tb)+" SET expires_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER) - 1000000 WHERE name = ?", name)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				return fmt.Errorf("%q: %d rows changed (%v), want 1", name, n, err)
			}
			return nil
		},
		// The database's write lock, taken by a write in a transaction of
		// another pool (as another process would).
		HoldRow: func(ctx context.Context, tb dialecttest.Table, name string) (func() error, error) {
			other, err := sqlite.Open(path)
			if err != nil {
				return nil, err
			}
			tx, err := other.BeginTx(ctx, nil)
			if err == nil {
				var res sql.Result
				if res, err = tx.ExecContext(ctx, "UPDATE "+string(tb)+" SET holds = holds WHERE name = ?", name); err == nil {
					if n, _ := res.RowsAffected(); n != 1 {
						err = fmt.Errorf("%q: no row", name)
					}
				}
				if err != nil {
					_ = tx.Rollback()
				}
			}
			if err != nil {
				other.Close()
				return nil, err
			}
			var once sync.Once
			return func() (err error) {
				once.Do(func() { err = errors.Join(tx.Rollback(), other.Close()) })
				return err
			}, nil
		},
		Waiting: func(context.Context) (int, error) { return db.Stats().InUse, nil },
	}
}

// newDialect returns the dialect of db, closed when t ends.
func newDialect(t *testing.T, db *sql.DB) *sqlite.Dialect {
	t.Helper()
	d, err := sqlite.New(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(context.Background()); err != nil {
			t.Errorf("closing the dialect: %v", err)
		}
	})
	return d
}

func open(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// plain opens path without Open's settings: no busy timeout (a lock held
// elsewhere fails a statement at once) and deferred transactions.
func plain(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestOpenSettings(t *testing.T) {
	t.Parallel()
	// A path that would be cut short or misread in a DSN or URI.
	path := filepath.Join(t.TempDir(), "odd ?name#with%25 chars.db")
	db := open(t, path)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file not created under its own name: %v", err)
	}
	for pragma, want := range map[string]string{
		"journal_mode": "wal",
		"busy_timeout": "10000",
		"synchronous":  "2", // FULL
	} {
		var got string
		if err := db.QueryRow("PRAGMA " + pragma).Scan(&got); err != nil || got != want {
			t.Errorf("PRAGMA %s = %q, %v; want %q", pragma, got, err, want)
		}
	}
	if n := db.Stats().MaxOpenConnections; n != 1 {
		t.Errorf("MaxOpenConnections %d, want 1", n)
	}
}

func TestOpenRefusesNonFiles(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"", ":memory:", filepath.Join(t.TempDir(), "missing", "locks.db")} {
		if db, err := sqlite.Open(path); err == nil {
			db.Close()
			t.Errorf("Open(%q) succeeded", path)
		}
	}
}

func TestNewRefusesOtherPools(t *testing.T) {
	t.Parallel()
	if _, err := sqlite.New(nil); !errors.Is(err, dialect.ErrNilDB) {
		t.Fatalf("New(nil): %v, want ErrNilDB", err)
	}
	pg, err := sql.Open("pgx", "postgres://nowhere.invalid/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	if _, err := sqlite.New(pg); err == nil {
		t.Fatal("New accepted a pool of another driver")
	}
}

// A read-write transaction of a pool from Open holds the write lock from
// BEGIN on; a read-only one takes none. Lock statements that find the write
// lock taken (once the busy timeout is over) report ErrTransient.
func TestTransactionsBeginImmediate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "locks.db")
	db := open(t, path)
	d, err := sqlite.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	other, err := sqlite.New(plain(t, path))
	if err != nil {
		t.Fatal(err)
	}
	p := dialect.AcquireParams{Name: "n", Owner: "o", TTL: time.Minute}

	ro, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := testutil.Tables(t, other).Locks.Acquire(ctx, p); err != nil || tok == 0 {
		t.Fatalf("acquire beside a read-only transaction: %d, %v", tok, err)
	}
	if err := ro.Rollback(); err != nil {
		t.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = testutil.Tables(t, other).Locks.Acquire(ctx, p)
	var se *msqlite.Error
	if !errors.Is(err, dialect.ErrTransient) || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY {
		t.Fatalf("acquire beside a fresh read-write transaction: %v, want ErrTransient wrapping SQLITE_BUSY", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if tok, err := testutil.Tables(t, other).Locks.Acquire(ctx, p); err != nil || tok == 0 {
		t.Fatalf("re-entry after the transaction: %d, %v", tok, err)
	}
}

// Migrators in several processes (here: pools, whose connections lock each
// other out as processes do) serialise on SQLite's write lock.
func TestMigrateFromManyPools(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "locks.db")
	var ds []*sqlite.Dialect
	for range 4 {
		d, err := sqlite.New(open(t, path))
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	for _, step := range []func(context.Context, dialect.Dialect) error{sqllock.Migrate, sqllock.MigrateDown, sqllock.Migrate} {
		var wg sync.WaitGroup
		for _, d := range ds {
			wg.Go(func() {
				if err := step(ctx, d); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	want := latestMigration(t, ds[0])
	if v, dirty, err := sqllock.MigrationVersion(ctx, ds[0]); err != nil || v != want || dirty {
		t.Fatalf("version %d dirty %v err %v, want %d", v, dirty, err, want)
	}
}

// A failed migration run is rolled back as a whole: the schema and the
// recorded version stay as they were, not dirty.
func TestFailedMigrationRollsBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := open(t, filepath.Join(t.TempDir(), "locks.db"))
	d, err := sqlite.New(db)
	if err != nil {
		t.Fatal(err)
	}
	files := fstest.MapFS{
		"1_good.up.sql":   {Data: []byte("CREATE TABLE good (id INTEGER);\n")},
		"1_good.down.sql": {Data: []byte("DROP TABLE good;\n")},
		"2_bad.up.sql":    {Data: []byte("CREATE TABLE bad (id INTEGER);\nINSERT INTO nowhere VALUES (1);\n")},
		"2_bad.down.sql":  {Data: []byte("DROP TABLE bad;\n")},
	}
	src, err := iofs.New(files, ".")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	drv, err := d.MigrationDriver(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "sqlite", drv)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Up(); err == nil {
		t.Fatal("a failing migration succeeded")
	}
	v, dirty, err := m.Version()
	if !errors.Is(err, migrate.ErrNilVersion) {
		t.Fatalf("version after the failed run: %d dirty %v err %v, want none", v, dirty, err)
	}
	// Closing gives the pool's one connection back.
	if serr, derr := m.Close(); serr != nil || derr != nil {
		t.Fatal(serr, derr)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema WHERE name IN ('good', 'bad')").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tables of the failed run left, %v", n, err)
	}
}

// latestMigration is the highest version among d's migration files.
func latestMigration(t *testing.T, d dialect.Dialect) uint {
	t.Helper()
	files, err := fs.Glob(d.Migrations(), "*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	var latest uint
	for _, f := range files {
		v, err := strconv.ParseUint(f[:strings.IndexByte(f, '_')], 10, 64)
		if err != nil {
			t.Fatalf("migration file %s: %v", f, err)
		}
		latest = max(latest, uint(v))
	}
	return latest
}
