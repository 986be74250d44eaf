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
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/examples/internal/crosslang"
	"github.com/sqllock/sqllock/internal/dbtest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Finish(m.Run())) }

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
			crosslang.Missing(t, "%s is not on PATH (Debian: apt-get install -y nodejs npm; scripts/test.sh does it as root): %v", cmd, err)
		}
	}
	installOnce.Do(func() { installErr = install() })
	if installErr != nil {
		crosslang.Missing(t, "installing the Node client's packages: %v", installErr)
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

// eachBackend runs f as a parallel subtest per backend, with node and
// the client's packages at hand.
func eachBackend(t *testing.T, f func(t *testing.T, b crosslang.Backend)) {
	crosslang.Each(t, func(t *testing.T, b crosslang.Backend) {
		needNode(t)
		f(t, b)
	})
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
	eachBackend(t, func(t *testing.T, b crosslang.Backend) {
		table, db, schema, dsn := b.Setup(t)
		crosslang.NeedPython(t, b.Python, b.PythonPkg)
		ctx := t.Context()
		counter := b.Counter(schema)
		createCounter(t, db, counter)
		const each = 100
		start := time.Now()
		node := exec.CommandContext(ctx, "node", "counter.js", dsn, schema, "counter", "increment", strconv.Itoa(each))
		node.Stderr = os.Stderr
		py := exec.CommandContext(ctx, crosslang.Python, "counter.py", dsn, schema, "counter", "increment", strconv.Itoa(each))
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
				if goErr = crosslang.Increment(ctx, table, db, counter, b.Param(1)); goErr != nil {
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

// A Node holder that stops renewing (a pause) loses its lease at the end
// of its TTL, and Go takes the lock over; sqllock_guard then refuses the
// Node holder's stale token, and its fenced write is rolled back, while
// Go's write under the new token commits.
func TestNodeStaleTokenRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, b crosslang.Backend) {
		table, db, schema, dsn := b.Setup(t)
		ctx := t.Context()
		counter := b.Counter(schema)
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
		if err := crosslang.Write(ctx, k, db, counter, b.Param(1), 1); err != nil {
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
	eachBackend(t, func(t *testing.T, b crosslang.Backend) {
		table, _, schema, dsn := b.Setup(t)
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
		if wakeups, _ := strconv.Atoi(fields[1]); b.Wakes && wakeups < 1 {
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
	eachBackend(t, func(t *testing.T, b crosslang.Backend) {
		table, _, schema, dsn := b.Setup(t)
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
	eachBackend(t, func(t *testing.T, b crosslang.Backend) {
		table, _, schema, dsn := b.Setup(t)
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
