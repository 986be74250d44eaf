// The Python client of the lock protocol (sqllock_client.py with
// psycopg2 on PostgreSQL, sqllock_mysql_client.py with MySQLdb on
// MariaDB), run beside the Go library on one schema or database.
package python_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Finish(m.Run())) }

// python is Debian's interpreter, which has python3-psycopg2 and
// python3-mysqldb (a pyenv shim first in PATH may not).
const python = "/usr/bin/python3"

// needModule skips the test when python cannot import module (Debian's
// package pkg), or fails it when CI is set.
func needModule(t *testing.T, module, pkg string) {
	t.Helper()
	if err := exec.Command(python, "-c", "import "+module).Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s cannot import %s (Debian: apt-get install -y %s): %v", python, module, pkg, err)
		}
		t.Skipf("%s cannot import %s (Debian: apt-get install -y %s): %v", python, module, pkg, err)
	}
}

// A backend is a database server the tests run on.
type backend struct {
	name string
	// setup migrates a schema (database) of the test's own and returns
	// a lock table on it, a pool, the schema and the DSN the Python
	// client takes.
	setup func(t *testing.T) (*sqllock.Table, *sql.DB, string, string)
	// counter is the counter table of schema; param is the n-th
	// placeholder.
	counter func(schema string) string
	param   func(n int) string
}

var backends = []backend{
	{name: "postgres", setup: setupPostgres,
		counter: func(schema string) string { return `"` + schema + `".counter` },
		param:   func(n int) string { return "$" + strconv.Itoa(n) }},
	{name: "mariadb", setup: setupMySQL,
		counter: func(schema string) string { return "`" + schema + "`.counter" },
		param:   func(int) string { return "?" }},
}

// eachBackend runs f as a parallel subtest per backend.
func eachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
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
	needModule(t, "psycopg2", "python3-psycopg2")
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
	needModule(t, "MySQLdb", "python3-mysqldb")
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
		t.Skipf("the Python client connects over TCP; the test server's DSN is over %s", cfg.Net)
	}
	u := url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Host: cfg.Addr, Path: "/" + database}
	if cfg.Passwd == "" {
		u.User = url.User(cfg.User)
	}
	return table(t, d), db, database, u.String()
}

// A Go process and a Python process increment one counter under the same
// lock name, each reading it and writing it back one higher: no
// increment is lost.
func TestPythonAndGoShareCounter(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		table, db, schema, dsn := b.setup(t)
		ctx := t.Context()
		counter := b.counter(schema)
		for _, q := range []string{`CREATE TABLE ` + counter + ` (id int PRIMARY KEY, n int NOT NULL)`, `INSERT INTO ` + counter + ` VALUES (1, 0)`} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		const each = 100
		py := exec.CommandContext(ctx, python, "counter.py", dsn, schema, "counter", "increment", strconv.Itoa(each))
		py.Stderr = os.Stderr
		if err := py.Start(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var goErr error
		wg.Go(func() {
			for range each {
				if goErr = increment(ctx, table, db, counter, b.param(1)); goErr != nil {
					return
				}
			}
		})
		pyErr := py.Wait()
		wg.Wait()
		if pyErr != nil || goErr != nil {
			t.Fatalf("Python: %v; Go: %v", pyErr, goErr)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT n FROM `+counter).Scan(&n); err != nil || n != 2*each {
			t.Fatalf("counter %d (%v), want %d", n, err, 2*each)
		}
	})
}

// increment adds one to counter under the lock "counter", reading and
// writing in a transaction fenced by the lease; param is the placeholder
// of the new value.
func increment(ctx context.Context, table *sqllock.Table, db *sql.DB, counter, param string) error {
	k, err := table.Acquire(ctx, "counter")
	if err != nil {
		return err
	}
	err = write(ctx, k, db, counter, param)
	if rerr := k.Release(ctx); err == nil {
		err = rerr
	}
	return err
}

// write reads counter and writes it back one higher, fenced by k.
func write(ctx context.Context, k *sqllock.Lock, db *sql.DB, counter, param string) error {
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
	if _, err := tx.ExecContext(ctx, `UPDATE `+counter+` SET n = `+param+` WHERE id = 1`, n+1); err != nil {
		return err
	}
	return tx.Commit()
}

// A Python holder killed with SIGKILL keeps the lock until its lease
// expires; then Go takes it over with a larger token.
func TestKilledPythonHolderTakenOver(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		table, _, schema, dsn := b.setup(t)
		ctx := t.Context()
		py := exec.CommandContext(ctx, python, "counter.py", dsn, schema, "held", "hold", "6")
		py.Stderr = os.Stderr
		out, err := py.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := py.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			t.Fatalf("reading the Python holder's token: %v", err)
		}
		pyToken, err := strconv.ParseInt(line[:len(line)-1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		// The holder renews every TTL/3 while it lives.
		if _, err := table.TryAcquire(ctx, "held"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("Go TryAcquire of the Python holder's lock: %v, want ErrLocked", err)
		}
		if err := py.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		py.Wait()
		k, err := table.Acquire(ctx, "held")
		if err != nil {
			t.Fatalf("Go Acquire after the holder died: %v", err)
		}
		defer k.Release(ctx)
		if k.Token() <= pyToken {
			t.Fatalf("Go token %d after the Python holder's %d", k.Token(), pyToken)
		}
	})
}
