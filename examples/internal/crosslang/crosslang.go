// Package crosslang is what the tests of the lock protocol's clients in
// other languages (examples/python, examples/node) share: the database
// servers they run on beside the Go library, the prerequisites they skip
// (or, in CI, fail) without, and the counter that Go increments under the
// lock, fenced by its lease.
package crosslang

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// Python is Debian's interpreter, which has python3-psycopg2 and
// python3-mysqldb (a pyenv shim first in PATH may not).
const Python = "/usr/bin/python3"

// Missing skips t for a missing prerequisite, or fails it when CI is set.
func Missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv(dbtest.CIEnv) != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// NeedPython skips t when Python cannot import module (Debian's package
// pkg), or fails it when CI is set.
func NeedPython(t *testing.T, module, pkg string) {
	t.Helper()
	if err := exec.Command(Python, "-c", "import "+module).Run(); err != nil {
		Missing(t, "%s cannot import %s (Debian: apt-get install -y %s): %v", Python, module, pkg, err)
	}
}

// A Backend is a database server the tests run on.
type Backend struct {
	Name string
	// Python is the module the Python client needs on it, and PythonPkg
	// its Debian package.
	Python, PythonPkg string
	// Counter is the counter table of schema; Param is the n-th
	// placeholder.
	Counter func(schema string) string
	Param   func(n int) string
	// Wakes tells whether a SQL waiter is woken by a release (LISTEN on
	// PostgreSQL); MySQL has no NOTIFY, and its SQL waiters poll.
	Wakes bool
	setup func(t *testing.T) (*sqllock.Table, *sql.DB, string, string)
}

// Setup migrates a schema (database) of the test's own and returns a lock
// table on it, a pool, the schema and the URL the other languages' clients
// take.
func (b Backend) Setup(t *testing.T) (*sqllock.Table, *sql.DB, string, string) {
	t.Helper()
	return b.setup(t)
}

// Backends are PostgreSQL and MariaDB.
var Backends = []Backend{
	{Name: "postgres", setup: setupPostgres, Python: "psycopg2", PythonPkg: "python3-psycopg2", Wakes: true,
		Counter: func(schema string) string { return `"` + schema + `".counter` },
		Param:   func(n int) string { return "$" + strconv.Itoa(n) }},
	{Name: "mariadb", setup: setupMySQL, Python: "MySQLdb", PythonPkg: "python3-mysqldb",
		Counter: func(schema string) string { return "`" + schema + "`.counter" },
		Param:   func(int) string { return "?" }},
}

// Each runs f as a parallel subtest per backend.
func Each(t *testing.T, f func(t *testing.T, b Backend)) {
	t.Parallel()
	for _, b := range Backends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			f(t, b)
		})
	}
}

// table migrates d and returns a lock table on it.
func table(t *testing.T, d dialect.Dialect) *sqllock.Table {
	t.Helper()
	if err := sqllock.Migrate(t.Context(), d); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	table, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return table
}

func setupPostgres(t *testing.T) (*sqllock.Table, *sql.DB, string, string) {
	t.Helper()
	db, schema := dbtest.Postgres(t)
	d, err := postgres.New(db, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(context.Background()) })
	return table(t, d), db, schema, dbtest.PostgresURL(t)
}

func setupMySQL(t *testing.T) (*sqllock.Table, *sql.DB, string, string) {
	t.Helper()
	db, database := dbtest.MySQL(t)
	d, err := mysql.New(db, mysql.WithDatabase(database))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(context.Background()) })
	cfg, err := gomysql.ParseDSN(dbtest.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Net != "tcp" {
		t.Skipf("the other languages' clients connect over TCP; the test server's DSN is over %s", cfg.Net)
	}
	u := url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Host: cfg.Addr, Path: "/" + database}
	if cfg.Passwd == "" {
		u.User = url.User(cfg.User)
	}
	return table(t, d), db, database, u.String()
}

// Increment adds one to counter under the lock "counter", reading and
// writing in a transaction fenced by the lease; param is the placeholder
// of the new value.
func Increment(ctx context.Context, table *sqllock.Table, db *sql.DB, counter, param string) error {
	k, err := table.Acquire(ctx, "counter")
	if err != nil {
		return err
	}
	err = Write(ctx, k, db, counter, param, 1)
	if rerr := k.Release(ctx); err == nil {
		err = rerr
	}
	return err
}

// Write adds by to counter in a transaction fenced by k.
func Write(ctx context.Context, k *sqllock.Lock, db *sql.DB, counter, param string, by int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := k.Guard(ctx, tx); err != nil {
		return err
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT n FROM `+counter+` WHERE id = 1`).Scan(&n); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+counter+` SET n = `+param+` WHERE id = 1`, n+by); err != nil {
		return err
	}
	return tx.Commit()
}
