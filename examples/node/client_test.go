//go:build unix

// The Node client of the lock protocol (sqllock.js, with pg on PostgreSQL
// and mysql2 on MariaDB), run beside the Go library and the Python client
// (examples/python) on one schema or database.
package node_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// missing skips t for a missing prerequisite, or fails it when CI is set.
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv(dbtest.CIEnv) != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// needPython skips the test when python cannot import module (Debian's
// package pkg), or fails it when CI is set.
func needPython(t *testing.T, module, pkg string) {
	t.Helper()
	if err := exec.Command(python, "-c", "import "+module).Run(); err != nil {
		missing(t, "%s cannot import %s (Debian: apt-get install -y %s): %v", python, module, pkg, err)
	}
}

var (
	installOnce sync.Once
	installErr  error
)

// needNode skips the test when node or npm is missing, or fails it when CI
// is set; then it makes sure the pinned packages (package-lock.json) are
// in node_modules, installing them with npm ci once per change of the
// lock file.
func needNode(t *testing.T) {
	t.Helper()
	for _, cmd := range []string{"node", "npm"} {
		if _, err := exec.LookPath(cmd); err != nil {
			missing(t, "%s is not on PATH (Debian: apt-get install -y nodejs npm; scripts/test.sh does it as root): %v", cmd, err)
		}
	}
	installOnce.Do(func() { installErr = install() })
	if installErr != nil {
		missing(t, "installing the Node client's packages: %v", installErr)
	}
}

// stamp is the file in node_modules that holds the SHA-256 of the
// package-lock.json it was installed from.
const stamp = "node_modules/.sqllock-lock-sha256"

// install runs npm ci unless node_modules was installed from this
// package-lock.json, holding an exclusive flock on a file beside it so
// that test processes running at once install once.
func install() error {
	lock, err := os.ReadFile("package-lock.json")
	if err != nil {
		return err
	}
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "sqllock-node-install.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if got, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(got)) == want {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error").CombinedOutput()
	if err != nil {
		return errors.New("npm ci: " + err.Error() + ": " + strings.TrimSpace(string(out)))
	}
	return os.WriteFile(stamp, []byte(want+"\n"), 0o644)
}

// A backend is a database server the tests run on.
type backend struct {
	name string
	// setup migrates a schema (database) of the test's own and returns a
	// lock table on it, a pool, the schema and the URL the Node and
	// Python clients take.
	setup func(t *testing.T) (*sqllock.Table, *sql.DB, string, string)
	// python is the module the Python client needs, and its Debian package.
	python, pythonPkg string
	// counter is the counter table of schema; param is the n-th
	// placeholder.
	counter func(schema string) string
	param   func(n int) string
	// wakes tells whether a SQL waiter is woken by a release (LISTEN on
	// PostgreSQL); MySQL has no NOTIFY, and its SQL waiters poll.
	wakes bool
}

var backends = []backend{
	{name: "postgres", setup: setupPostgres, python: "psycopg2", pythonPkg: "python3-psycopg2", wakes: true,
		counter: func(schema string) string { return `"` + schema + `".counter` },
		param:   func(n int) string { return "$" + strconv.Itoa(n) }},
	{name: "mariadb", setup: setupMySQL, python: "MySQLdb", pythonPkg: "python3-mysqldb",
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
	needNode(t)
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
	needNode(t)
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
		t.Skipf("the Node client connects over TCP; the test server's DSN is over %s", cfg.Net)
	}
	u := url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Host: cfg.Addr, Path: "/" + database}
	if cfg.Passwd == "" {
		u.User = url.User(cfg.User)
	}
	return table(t, d), db, database, u.String()
}

// createCounter creates the counter table, its one row at 0.
func createCounter(t *testing.T, db *sql.DB, counter string) {
	t.Helper()
	for _, q := range []string{`CREATE TABLE ` + counter + ` (id int PRIMARY KEY, n int NOT NULL)`, `INSERT INTO ` + counter + ` VALUES (1, 0)`} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
}

// readCounter returns the counter's value.
func readCounter(t *testing.T, db *sql.DB, counter string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT n FROM `+counter).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A nodeProc is a running counter.js, with its standard input and output.
type nodeProc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	lines chan string // the lines of out, closed at its end
}

// startNode starts node counter.js with args; it is killed when the test
// ends.
func startNode(t *testing.T, args ...string) *nodeProc {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "node", append([]string{"counter.js"}, args...)...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &nodeProc{cmd: cmd, in: in, out: bufio.NewReader(out), lines: make(chan string)}
	go func() {
		defer close(p.lines)
		for {
			l, err := p.out.ReadString('\n')
			if err != nil {
				return
			}
			p.lines <- strings.TrimSuffix(l, "\n")
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		for range p.lines { // until the reader sees the pipe closed
		}
	})
	return p
}

// line returns the process's next line of output; it fails t if the
// process ends first.
func (p *nodeProc) line(t *testing.T) string {
	t.Helper()
	l, ok := <-p.lines
	if !ok {
		t.Fatalf("counter.js ended without printing a line: %v", p.cmd.Wait())
	}
	return l
}

// token parses a line of the process as a fencing token.
func (p *nodeProc) token(t *testing.T) int64 {
	t.Helper()
	l := p.line(t)
	token, err := strconv.ParseInt(l, 10, 64)
	if err != nil {
		t.Fatalf("counter.js printed %q, want a token", l)
	}
	return token
}

// A Go process, a Python process and a Node process increment one counter
// under the same lock name, each reading it and writing it back one higher
// in a transaction fenced by its lease: no increment is lost.
func TestGoPythonNodeShareCounter(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		table, db, schema, dsn := b.setup(t)
		needPython(t, b.python, b.pythonPkg)
		ctx := t.Context()
		counter := b.counter(schema)
		createCounter(t, db, counter)
		const each = 100
		start := time.Now()
		node := exec.CommandContext(ctx, "node", "counter.js", dsn, schema, "counter", "increment", strconv.Itoa(each))
		node.Stderr = os.Stderr
		py := exec.CommandContext(ctx, python, "counter.py", dsn, schema, "counter", "increment", strconv.Itoa(each))
		py.Dir = "../python"
		py.Stderr = os.Stderr
		for _, c := range []*exec.Cmd{node, py} {
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
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
		nodeErr, pyErr := node.Wait(), py.Wait()
		wg.Wait()
		if nodeErr != nil || pyErr != nil || goErr != nil {
			t.Fatalf("Node: %v; Python: %v; Go: %v", nodeErr, pyErr, goErr)
		}
		if n := readCounter(t, db, counter); n != 3*each {
			t.Fatalf("counter %d, want %d", n, 3*each)
		}
		t.Logf("%d increments, %d per language, in %v", 3*each, each, time.Since(start).Round(time.Millisecond))
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
	err = write(ctx, k, db, counter, param, 1)
	if rerr := k.Release(ctx); err == nil {
		err = rerr
	}
	return err
}

// write adds by to counter in a transaction fenced by k.
func write(ctx context.Context, k *sqllock.Lock, db *sql.DB, counter, param string, by int) error {
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

// A Node holder that stops renewing (a pause) loses its lease at the end
// of its TTL, and Go takes the lock over; sqllock_guard then refuses the
// Node holder's stale token, and its fenced write is rolled back, while
// Go's write under the new token commits.
func TestNodeStaleTokenRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		table, db, schema, dsn := b.setup(t)
		ctx := t.Context()
		counter := b.counter(schema)
		createCounter(t, db, counter)
		node := startNode(t, dsn, schema, "fenced", "stale", "2")
		stale := node.token(t)
		k, err := table.Acquire(ctx, "fenced") // once the Node lease has expired
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release(ctx)
		if k.Token() <= stale {
			t.Fatalf("Go token %d after the Node holder's %d", k.Token(), stale)
		}
		if _, err := io.WriteString(node.in, "write\n"); err != nil {
			t.Fatal(err)
		}
		if got := node.line(t); got != "refused" {
			t.Fatalf("the Node holder's write with the stale token %d: %q, want refused", stale, got)
		}
		if n := readCounter(t, db, counter); n != 0 {
			t.Fatalf("counter %d after the refused write, want 0", n)
		}
		if err := write(ctx, k, db, counter, b.param(1), 1); err != nil {
			t.Fatalf("Go's write under token %d: %v", k.Token(), err)
		}
		if n := readCounter(t, db, counter); n != 1 {
			t.Fatalf("counter %d after Go's write, want 1", n)
		}
	})
}

// A Node waiter on a lock Go holds gets it once Go releases it. On
// PostgreSQL the release's NOTIFY wakes it (its wait, up to the 30 s the
// lease has left, is cut short); on MariaDB, which has no NOTIFY, it polls
// with a backoff capped at 500 ms.
func TestNodeWaiterWokenByGoRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		table, _, schema, dsn := b.setup(t)
		ctx := t.Context()
		k, err := table.Acquire(ctx, "queue")
		if err != nil {
			t.Fatal(err)
		}
		node := startNode(t, dsn, schema, "queue", "wait", "30")
		if got := node.line(t); got != "waiting" {
			t.Fatalf("counter.js printed %q, want waiting", got)
		}
		released := time.Now()
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
		fields := strings.Fields(node.line(t))
		took := time.Since(released)
		if len(fields) != 2 {
			t.Fatalf("counter.js printed %q, want TOKEN WAKEUPS", fields)
		}
		token, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || token <= k.Token() {
			t.Fatalf("Node token %s (%v) after Go's %d", fields[0], err, k.Token())
		}
		if wakeups, _ := strconv.Atoi(fields[1]); b.wakes && wakeups < 1 {
			t.Fatalf("the Node waiter got the lock %v after Go's release, woken by no notification", took)
		}
		t.Logf("the Node waiter got the lock %v after Go's release (woken %s times)", took.Round(time.Millisecond), fields[1])
		if err := node.cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	})
}

// A Go waiter on a lock Node holds gets it once Node releases it, with a
// larger token.
func TestGoWaiterAfterNodeRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		table, _, schema, dsn := b.setup(t)
		ctx := t.Context()
		node := startNode(t, dsn, schema, "queue", "hold", "30")
		held := node.token(t)
		if _, err := table.TryAcquire(ctx, "queue"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("Go TryAcquire of the Node holder's lock: %v, want ErrLocked", err)
		}
		got := make(chan *sqllock.Lock, 1)
		go func() {
			k, err := table.Acquire(ctx, "queue")
			if err != nil {
				t.Error(err)
			}
			got <- k
		}()
		if _, err := io.WriteString(node.in, "release\n"); err != nil {
			t.Fatal(err)
		}
		if l := node.line(t); l != "released" {
			t.Fatalf("counter.js printed %q, want released", l)
		}
		k := <-got
		if k == nil {
			return
		}
		defer k.Release(ctx)
		if k.Token() <= held {
			t.Fatalf("Go token %d after the Node holder's %d", k.Token(), held)
		}
	})
}

// A Node holder killed with SIGKILL keeps the lock until its lease
// expires; then Go takes it over with a larger token.
func TestKilledNodeHolderTakenOver(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		table, _, schema, dsn := b.setup(t)
		ctx := t.Context()
		node := startNode(t, dsn, schema, "held", "hold", "6")
		held := node.token(t)
		// The holder renews every TTL/3 while it lives.
		if _, err := table.TryAcquire(ctx, "held"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("Go TryAcquire of the Node holder's lock: %v, want ErrLocked", err)
		}
		if err := node.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		node.cmd.Wait()
		killed := time.Now()
		k, err := table.Acquire(ctx, "held")
		if err != nil {
			t.Fatalf("Go Acquire after the holder died: %v", err)
		}
		defer k.Release(ctx)
		if k.Token() <= held {
			t.Fatalf("Go token %d after the Node holder's %d", k.Token(), held)
		}
		t.Logf("taken over %v after the kill (TTL 6 s)", time.Since(killed).Round(time.Millisecond))
	})
}
