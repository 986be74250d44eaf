// The Python client of the lock protocol (sqllock_client.py), run beside
// the Go library on one PostgreSQL schema.
package python_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Finish(m.Run())) }

// python is Debian's interpreter, which has python3-psycopg2 (a pyenv
// shim first in PATH may not).
const python = "/usr/bin/python3"

// needPsycopg skips the test without python3-psycopg2, or fails it when
// CI is set.
func needPsycopg(t *testing.T) {
	t.Helper()
	if err := exec.Command(python, "-c", "import psycopg2").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s cannot import psycopg2 (Debian: apt-get install -y python3-psycopg2): %v", python, err)
		}
		t.Skipf("%s cannot import psycopg2 (Debian: apt-get install -y python3-psycopg2): %v", python, err)
	}
}

// setup migrates a schema of the test's own and returns a lock table on
// it, a pool, the schema and the server's URL.
func setup(t *testing.T) (*sqllock.Table, *sql.DB, string, string) {
	t.Helper()
	db, schema := dbtest.Postgres(t)
	needPsycopg(t)
	d, err := postgres.New(db, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(context.Background()) })
	if err := sqllock.Migrate(t.Context(), d); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	table, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return table, db, schema, dbtest.PostgresURL(t)
}

// A Go process and a Python process increment one counter under the same
// lock name, each reading it and writing it back one higher: no
// increment is lost.
func TestPythonAndGoShareCounter(t *testing.T) {
	t.Parallel()
	table, db, schema, url := setup(t)
	ctx := t.Context()
	counter := `"` + schema + `".counter`
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+counter+` (id int PRIMARY KEY, n int NOT NULL); INSERT INTO `+counter+` VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	const each = 100
	py := exec.CommandContext(ctx, python, "counter.py", url, schema, "counter", "increment", strconv.Itoa(each))
	py.Stderr = os.Stderr
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var goErr error
	wg.Go(func() {
		for range each {
			if goErr = increment(ctx, table, db, counter); goErr != nil {
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
}

// increment adds one to counter under the lock "counter", reading and
// writing in a transaction fenced by the lease.
func increment(ctx context.Context, table *sqllock.Table, db *sql.DB, counter string) error {
	k, err := table.Acquire(ctx, "counter")
	if err != nil {
		return err
	}
	err = write(ctx, k, db, counter)
	if rerr := k.Release(ctx); err == nil {
		err = rerr
	}
	return err
}

// write reads counter and writes it back one higher, fenced by k.
func write(ctx context.Context, k *sqllock.Lock, db *sql.DB, counter string) error {
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
	if _, err := tx.ExecContext(ctx, `UPDATE `+counter+` SET n = $1 WHERE id = 1`, n+1); err != nil {
		return err
	}
	return tx.Commit()
}

// A Python holder killed with SIGKILL keeps the lock until its lease
// expires; then Go takes it over with a larger token.
func TestKilledPythonHolderTakenOver(t *testing.T) {
	t.Parallel()
	table, _, schema, url := setup(t)
	ctx := t.Context()
	py := exec.CommandContext(ctx, python, "counter.py", url, schema, "held", "hold", "6")
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
}
