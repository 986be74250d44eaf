// The Python client of the lock protocol (sqllock_client.py with
// psycopg2 on PostgreSQL, sqllock_mysql_client.py with MySQLdb on
// MariaDB), run beside the Go library on one schema or database.
package python_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/examples/internal/crosslang"
	"github.com/sqllock/sqllock/internal/dbtest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Finish(m.Run())) }

// eachBackend runs f as a parallel subtest per backend that the Python
// client can reach.
func eachBackend(t *testing.T, f func(t *testing.T, b crosslang.Backend)) {
	crosslang.Each(t, func(t *testing.T, b crosslang.Backend) {
		crosslang.NeedPython(t, b.Python, b.PythonPkg)
		f(t, b)
	})
}

// A Go process and a Python process increment one counter under the same
// lock name, each reading it and writing it back one higher: no
// increment is lost.
func TestPythonAndGoShareCounter(t *testing.T) {
	eachBackend(t, func(t *testing.T, b crosslang.Backend) {
		table, db, schema, dsn := b.Setup(t)
		ctx := t.Context()
		counter := b.Counter(schema)
		for _, q := range []string{`CREATE TABLE ` + counter + ` (id int PRIMARY KEY, n int NOT NULL)`, `INSERT INTO ` + counter + ` VALUES (1, 0)`} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		const each = 100
		py := exec.CommandContext(ctx, crosslang.Python, "counter.py", dsn, schema, "counter", "increment", strconv.Itoa(each))
		py.Stderr = os.Stderr
		if err := py.Start(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var goErr error
		wg.Go(func() {
			for range each {
				if goErr = crosslang.Increment(ctx, table, db, counter, b.Param(1)); goErr != nil {
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

// A Python holder killed with SIGKILL keeps the lock until its lease
// expires; then Go takes it over with a larger token.
func TestKilledPythonHolderTakenOver(t *testing.T) {
	eachBackend(t, func(t *testing.T, b crosslang.Backend) {
		table, _, schema, dsn := b.Setup(t)
		ctx := t.Context()
		py := exec.CommandContext(ctx, crosslang.Python, "counter.py", dsn, schema, "held", "hold", "6")
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
