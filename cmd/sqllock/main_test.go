package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	dsnpkg "github.com/sqllock/sqllock/dsn"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// bin is the sqllock binary under test, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	if fuzzing() {
		// The fuzz targets call the command's functions, not the binary.
		os.Exit(dbtest.Finish(m.Run()))
	}
	// The tests spend their time waiting on the binary's processes, their
	// leases and the databases more than on this process's CPU: unless
	// -parallel says otherwise, more of them run at once than go test's
	// default (GOMAXPROCS).
	if !flagSet("test.parallel") {
		_ = flag.Set("test.parallel", strconv.Itoa(3*runtime.GOMAXPROCS(0)))
	}
	dir, err := os.MkdirTemp("", "sqllock-cli")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "sqllock")
	if out, err := exec.Command("go", "build", "-race", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building sqllock: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(dbtest.Finish(code))
}

// fuzzing says whether this process is a fuzzing run (go test -fuzz) or
// one of its workers, each of which runs TestMain.
func fuzzing() bool {
	return flag.Lookup("test.fuzz").Value.String() != "" || flag.Lookup("test.fuzzworker").Value.String() == "true"
}

// flagSet says whether the command line set the flag named name.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// backend is a database the binary is run against: its DSN, migrated, and
// a pool and dialect for the test's own checks.
type backend struct {
	kind string
	dsn  string
	d    dialect.Dialect
	// pooled says the DSN reaches the server through the test PgBouncer,
	// which knows the test user alone and keeps nothing of a session.
	pooled bool
	// ns is the schema (PostgreSQL) or database (MySQL) of the tables on
	// d's pool; "" for SQLite.
	ns string
}

// count counts the rows of table whose name is name, on b.d's pool.
func (b backend) count(t *testing.T, table, name string) int {
	t.Helper()
	q := "SELECT count(*) FROM " + table + " WHERE name = ?"
	switch b.kind {
	case "postgres":
		q = `SELECT count(*) FROM "` + b.ns + `".` + table + ` WHERE name = $1`
	case "mysql":
		q = "SELECT count(*) FROM `" + b.ns + "`." + table + " WHERE name = ?"
	}
	var n int
	if err := b.d.DB().QueryRowContext(t.Context(), q, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

var backends = []struct {
	kind string
	make func(t *testing.T) backend
}{
	{"postgres", func(t *testing.T) backend {
		db, schema := dbtest.Postgres(t)
		u, err := url.Parse(dbtest.PostgresURL(t))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		d, err := postgres.New(db, postgres.WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		return backend{kind: "postgres", dsn: u.String(), d: d, ns: schema}
	}},
	{"postgres/pgbouncer-transaction", func(t *testing.T) backend { return pgBouncerBackend(t, dbtest.Transaction) }},
	{"postgres/pgbouncer-session", func(t *testing.T) backend { return pgBouncerBackend(t, dbtest.Session) }},
	{"mysql", func(t *testing.T) backend {
		db, database := dbtest.MySQL(t)
		c, err := gomysql.ParseDSN(dbtest.MySQLDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		u := url.URL{Scheme: "mysql", Host: c.Addr, Path: "/" + database}
		if c.Passwd != "" {
			u.User = url.UserPassword(c.User, c.Passwd)
		} else {
			u.User = url.User(c.User)
		}
		d, err := mysql.New(db, mysql.WithDatabase(database))
		if err != nil {
			t.Fatal(err)
		}
		return backend{kind: "mysql", dsn: u.String(), d: d, ns: database}
	}},
	{"sqlite", func(t *testing.T) backend {
		dbtest.SQLite(t)
		path := filepath.Join(t.TempDir(), "locks.db")
		cfg, err := dsnpkg.Parse("sqlite:" + path)
		if err != nil {
			t.Fatal(err)
		}
		db, d, err := cfg.Open("")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return backend{kind: "sqlite", dsn: "sqlite:" + path, d: d}
	}},
}

// pgBouncerBackend is PostgreSQL through the test PgBouncer in mode, on a
// database of the test's own (a pooler refuses search_path as a startup
// parameter). In transaction pooling the DSN sets
// default_query_exec_mode=exec, as the README says to.
func pgBouncerBackend(t *testing.T, mode dbtest.PoolMode) backend {
	u, err := url.Parse(dbtest.PgBouncerURL(t, mode))
	if err != nil {
		t.Fatal(err)
	}
	name := dbtest.PostgresDatabase(t)
	u.Path = "/" + name
	if mode == dbtest.Transaction {
		q := u.Query()
		q.Set("default_query_exec_mode", "exec")
		u.RawQuery = q.Encode()
	}
	direct, err := url.Parse(dbtest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	direct.Path = "/" + name
	db := dbtest.OpenPostgres(t, direct.String())
	d, err := postgres.New(db, postgres.WithSchema("public")) // the CLI's, by search_path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	return backend{kind: "postgres", dsn: u.String(), d: d, pooled: true, ns: "public"}
}

// each runs fn against every backend with a migrated schema, in parallel.
func each(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Parallel()
	for _, m := range backends {
		t.Run(m.kind, func(t *testing.T) {
			t.Parallel()
			b := m.make(t)
			if err := sqllock.Migrate(ctxT(t), b.d); err != nil {
				t.Fatal(err)
			}
			fn(t, b)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// cmd prepares the binary with args, the DSN in SQLLOCK_DSN.
func (b backend) cmd(t *testing.T, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctxT(t), bin, args...)
	c.Env = append(os.Environ(), "SQLLOCK_DSN="+b.dsn)
	return c
}

// holder is a `sqllock run` whose command prints its token and then waits
// for a line on its standard input.
type holder struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	token chan int64    // the token, once the command runs
	done  chan struct{} // closed once the run has ended
	// Set before done is closed: the exit status and standard error.
	code   int
	stderr string
}

const holdScript = `echo "$SQLLOCK_NAME $SQLLOCK_TOKEN"; read line || true`

func (b backend) hold(t *testing.T, name string, flags ...string) *holder {
	t.Helper()
	args := append(append([]string{"run"}, flags...), name, "--", "sh", "-c", holdScript)
	h := &holder{name: name, cmd: b.cmd(t, args...), token: make(chan int64, 1), done: make(chan struct{})}
	var err error
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	h.cmd.Stderr = &stderr
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == name {
				tok, _ := strconv.ParseInt(f[1], 10, 64)
				h.token <- tok
			}
		}
		h.code = exitStatus(h.cmd.Wait())
		h.stderr = stderr.String()
		if h.stderr != "" {
			t.Logf("%s: %s", name, h.stderr)
		}
		close(h.done)
	}()
	// The holder ends before the test does (and before its schema is
	// dropped): its command reads standard input until it closes.
	t.Cleanup(func() {
		h.stdin.Close()
		<-h.done
	})
	return h
}

// wait waits for the run to end, and returns its exit status.
func (h *holder) wait() int {
	<-h.done
	return h.code
}

// waitToken returns the token the run printed once its command ran. The
// test fails if the run ended first (it could not reach the database, or
// its context ended), instead of waiting for a token that never comes.
func (h *holder) waitToken(t *testing.T) int64 {
	t.Helper()
	select {
	case tok := <-h.token:
		return tok
	case <-h.done:
	}
	select {
	case tok := <-h.token:
		return tok
	default:
		t.Fatalf("run %s ended (exit %d) before its command ran:\n%s", h.name, h.code, h.stderr)
		return 0
	}
}

// Two runs at once with --no-wait: exactly one runs its command, the other
// exits 75; when the holder is done the lock is free again.
func TestRunNoWaitExcludes(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		a, c := b.hold(t, "job", "--no-wait"), b.hold(t, "job", "--no-wait")
		var (
			winner *holder
			code   int
		)
		select {
		case <-a.done:
			code = a.code
			winner = c
		case <-c.done:
			code = c.code
			winner = a
		}
		if code != exitNotAcquired {
			t.Fatalf("first run to end exited %d, want 75", code)
		}
		tok := winner.waitToken(t)
		if tok <= 0 {
			t.Fatalf("token %d", tok)
		}
		winner.stdin.Close()
		if code := winner.wait(); code != 0 {
			t.Fatalf("holder exited %d", code)
		}
		next := b.hold(t, "job", "--no-wait")
		next.stdin.Close()
		if got := next.waitToken(t); got <= tok {
			t.Fatalf("next token %d, want > %d", got, tok)
		}
		if code := next.wait(); code != 0 {
			t.Fatalf("next run exited %d", code)
		}
	})
}

// A holder killed with SIGKILL cannot release: the next run gets the lock
// once the lease has expired, with a larger token. A pessimistic lock dies
// with its connection: its holder is given a TTL of an hour, which the
// next run does not wait for. The next run waits with --timeout, under
// the minute the test gives a command, and must get the lock, not time out.
func TestRunAfterHolderKilled(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		for _, strategy := range strategies(b) {
			t.Run(strategy, func(t *testing.T) {
				t.Parallel()
				name := "nightly-" + strategy
				ttl := 2 * time.Second
				if strategy == "pessimistic" {
					ttl = time.Hour
				}
				h := b.hold(t, name, "--strategy", strategy, "--ttl", ttl.String())
				tok := h.waitToken(t)
				if err := h.cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				killed := time.Now()
				h.stdin.Close() // the orphaned command ends too, closing the output
				h.wait()
				next := b.hold(t, name, "--strategy", strategy, "--timeout", "50s")
				next.stdin.Close()
				var got int64
				select {
				case got = <-next.token:
				case <-next.done:
					select {
					case got = <-next.token: // printed just before it ended
					default:
						t.Fatalf("%s: the next run exited %d without the lock, %v after the kill (TTL %v)", strategy, next.code, time.Since(killed), ttl)
					}
				}
				if got <= tok {
					t.Fatalf("%s: token %d after the killed holder's %d", strategy, got, tok)
				}
				// Not a measure of speed: a bound far above the TTL for a lease
				// (the pessimistic run got the lock within its --timeout, far
				// below its holder's TTL).
				if waited := time.Since(killed); strategy != "pessimistic" && waited > 15*ttl {
					t.Fatalf("%s: took the lock over %v after the kill, want within 15 × TTL %v", strategy, waited, ttl)
				}
				if code := next.wait(); code != 0 {
					t.Fatalf("%s: next run exited %d", strategy, code)
				}
			})
		}
	})
}

// strategies lists the --strategy values b supports.
func strategies(b backend) []string {
	if b.kind == "sqlite" {
		return []string{"table", "optimistic"}
	}
	return []string{"table", "optimistic", "pessimistic"}
}

// Killing the connection of a pessimistic holder stops its command: 76.
func TestRunLostPessimisticLock(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		if b.kind == "sqlite" {
			return
		}
		h := b.hold(t, "conn", "--strategy", "pessimistic", "--grace", "5s")
		h.waitToken(t)
		// The connections holding a lock on this test's row-lock table (on
		// MySQL, every connection to the test's database).
		q := `SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relname = 'sqllock_rowlocks' AND n.nspname = $1 AND l.pid <> pg_backend_pid()`
		if b.kind == "mysql" {
			db := b.d.(interface{ Database() string }).Database()
			rows, err := b.d.DB().QueryContext(ctxT(t), "SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()", db)
			if err != nil {
				t.Fatal(err)
			}
			var ids []int64
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			rows.Close()
			for _, id := range ids {
				_, _ = b.d.DB().ExecContext(ctxT(t), fmt.Sprintf("KILL CONNECTION %d", id))
			}
		} else {
			schema := b.d.(interface{ Schema() string }).Schema()
			if _, err := b.d.DB().ExecContext(ctxT(t), q, schema); err != nil {
				t.Fatal(err)
			}
		}
		if code := h.wait(); code != exitLost {
			t.Fatalf("exit %d, want 76", code)
		}
	})
}

// A lock lost while the command runs stops the command and exits 76.
func TestRunLostLock(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		// A TTL long enough that no renewal of a loaded machine comes too
		// late: the lease is lost to the theft alone, found by the next
		// renewal (every 5s).
		h := b.hold(t, "lease", "--ttl", "15s", "--grace", "5s")
		h.waitToken(t)
		// Another owner takes the row: the next renewal finds it gone.
		res, err := b.d.DB().ExecContext(ctxT(t), qualify(b, "UPDATE {sqllock_locks} SET owner = 'thief' WHERE name = 'lease'"))
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("stole %d rows", n)
		}
		if code := h.wait(); code != exitLost {
			t.Fatalf("exit %d, want 76", code)
		}
	})
}

// SIGTERM to sqllock reaches the command; its status is sqllock's, and the
// lock is released.
func TestRunForwardsSignals(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		c := b.cmd(t, "run", "sig", "--", "sh", "-c", `trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done`)
		out, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "ready" {
			t.Fatalf("command did not start: %q", sc.Text())
		}
		if err := c.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if !sc.Scan() || sc.Text() != "got-term" {
			t.Fatalf("command did not get SIGTERM: %q", sc.Text())
		}
		if code := exitStatus(c.Wait()); code != 7 {
			t.Fatalf("exit %d, want the command's 7", code)
		}
		if out, err := b.cmd(t, "run", "--no-wait", "sig", "--", "true").CombinedOutput(); err != nil {
			t.Fatalf("lock not released after the command ended: %v\n%s", err, out)
		}
	})
}

func TestRunExitStatus(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		for _, c := range []struct {
			args []string
			want int
		}{
			{[]string{"run", "x", "--", "sh", "-c", "exit 3"}, 3},
			{[]string{"run", "x", "sh", "-c", "kill -KILL $$"}, 128 + 9},
			{[]string{"run", "--strategy", "optimistic", "--no-wait", "x", "--", "true"}, 0},
			{[]string{"run", "--strategy", "pessimistic", "--no-wait", "x", "--", "true"}, map[bool]int{true: exitUsage, false: 0}[b.kind == "sqlite"]},
			{[]string{"run"}, exitUsage},
			{[]string{"run", "x"}, exitUsage},
			{[]string{"run", "x", "--"}, exitUsage},
			{[]string{"run", "--strategy", "bogus", "x", "--", "true"}, exitUsage},
			{[]string{"run", "--ttl", "1ms", "x", "--", "true"}, exitUsage},
			{[]string{"run", "", "--", "true"}, exitUsage},
			{[]string{"bogus"}, exitUsage},
			{[]string{}, exitUsage},
			{[]string{"migrate", "sideways"}, exitUsage},
			{[]string{"run", "--dsn", "oracle://x", "x", "--", "true"}, exitUsage},
			{[]string{"run", "--dsn", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "x", "--", "true"}, exitUnavailable},
			{[]string{"run", "--dsn", "mysql://nobody@127.0.0.1:1/none?timeout=2s", "x", "--", "true"}, exitUnavailable},
			{[]string{"help"}, 0},
			{[]string{"help", "run"}, 0},
		} {
			cmd := b.cmd(t, c.args...)
			out, err := cmd.CombinedOutput()
			if got := exitStatus(err); got != c.want {
				t.Errorf("sqllock %q: exit %d, want %d\n%s", c.args, got, c.want, out)
			}
			if c.want != 0 && c.want < 64 {
				continue
			}
			if strings.Contains(string(out), "goroutine ") {
				t.Errorf("sqllock %q printed a stack trace:\n%s", c.args, out)
			}
		}
	})
}

// A server without the schema is reported with the command that fixes it;
// an embedded database is migrated on first use.
func TestSchemaMissing(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		if err := sqllock.MigrateDown(ctxT(t), b.d); err != nil {
			t.Fatal(err)
		}
		out, err := b.cmd(t, "run", "x", "--", "true").CombinedOutput()
		if b.kind == "sqlite" {
			if err != nil {
				t.Fatalf("run on an empty embedded database: %v\n%s", err, out)
			}
			return
		}
		if code := exitStatus(err); code != exitUnavailable || !strings.Contains(string(out), "sqllock migrate up --dsn") {
			t.Fatalf("exit %d, output %s; want 69 and the fix", code, out)
		}
		if lines := strings.Count(strings.TrimSpace(string(out)), "\n"); lines != 0 {
			t.Fatalf("error takes %d lines, want one:\n%s", lines+1, out)
		}
		// Tables named by --schema: the fix names it too.
		out, err = b.cmd(t, "run", "--schema", b.ns, "x", "--", "true").CombinedOutput()
		if code := exitStatus(err); code != exitUnavailable || !strings.Contains(string(out), "--schema "+b.ns+"`") {
			t.Fatalf("with --schema: exit %d, output %s; want 69 and the fix with --schema", code, out)
		}
		for _, args := range [][]string{{"migrate", "up"}, {"migrate", "version"}} {
			out, err := b.cmd(t, args...).CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "schema version ") || strings.HasPrefix(string(out), "schema version 0") {
				t.Fatalf("%q: %v\n%s", args, err, out)
			}
		}
	})
}

func TestLocksAndReap(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		h := b.hold(t, "listed", "--ttl", "30s")
		tok := h.waitToken(t)
		out, err := b.cmd(t, "locks", "--json").Output()
		if err != nil {
			t.Fatal(err)
		}
		var rows []lockRow
		if err := json.Unmarshal(out, &rows); err != nil {
			t.Fatalf("%v in %s", err, out)
		}
		if len(rows) != 1 || rows[0].Name != "listed" || rows[0].Token != tok || rows[0].Strategy != "table" {
			t.Fatalf("locks: %+v, want listed with token %d", rows, tok)
		}
		out, err = b.cmd(t, "locks").Output()
		if err != nil || !strings.Contains(string(out), "listed") || !strings.Contains(string(out), "TIME LEFT") {
			t.Fatalf("locks table: %v\n%s", err, out)
		}
		h.stdin.Close()
		h.wait()
		out, err = b.cmd(t, "reap").Output()
		// The table row, and the rows run's check of the other strategies
		// created: the row-lock row (on servers with pessimistic locks)
		// and the released holder row of the read/write lock.
		if want := map[bool]string{true: "reaped 2 rows", false: "reaped 3 rows"}[b.kind == "sqlite"]; err != nil || strings.TrimSpace(string(out)) != want {
			t.Fatalf("reap: %v, %q", err, out)
		}
		out, err = b.cmd(t, "locks").Output()
		if err != nil || strings.TrimSpace(string(out)) != "no locks held" {
			t.Fatalf("locks after release: %v, %q", err, out)
		}
	})
}

func TestDemo(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		out, err := b.cmd(t, "demo", "--stock", "2", "--buyers", "5").CombinedOutput()
		if err != nil {
			t.Fatalf("demo: %v\n%s", err, out)
		}
		for _, strategy := range strategies(b) {
			if !hasRow(string(out), strategy, "correct") {
				t.Errorf("demo: no correct %s row:\n%s", strategy, out)
			}
		}
		if !hasRow(string(out), "no lock", "") {
			t.Errorf("demo: no unlocked row:\n%s", out)
		}
		// The one-statement update is correct with no lock; one column per
		// count; the no-lock row explained.
		if !hasRow(string(out), "one UPDATE", "correct") {
			t.Errorf("demo: no correct one-statement row:\n%s", out)
		}
		if !strings.Contains(string(out), " WAITED  RETRIED ") || strings.Contains(string(out), "RETRIES/WAITS") {
			t.Errorf("demo: want a WAITED and a RETRIED column:\n%s", out)
		}
		if !strings.Contains(string(out), "\nNo lock: ") {
			t.Errorf("demo: the no-lock row is not explained:\n%s", out)
		}
		if hasRow(string(out), "no lock", "OVERSOLD by 3") && !strings.Contains(string(out), "is the last write, not 2 - 5, and 3 were sold") {
			t.Errorf("demo: the overselling is not explained:\n%s", out)
		}
	})
}

func hasRow(out, strategy, verdict string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, strategy+" ") && strings.HasSuffix(strings.TrimSpace(line), verdict) {
			return true
		}
	}
	return false
}

// qualify rewrites {table} to the backend's schema-qualified name.
func qualify(b backend, q string) string {
	ns := ""
	switch d := b.d.(type) {
	case *postgres.Dialect:
		ns = `"` + d.Schema() + `".`
	case *mysql.Dialect:
		ns = "`" + d.Database() + "`."
	}
	return strings.NewReplacer("{sqllock_locks}", ns+"sqllock_locks").Replace(q)
}

func TestParseInterspersed(t *testing.T) {
	for _, c := range []struct {
		args []string
		max  int
		want []string
	}{
		{[]string{"up", "--json"}, -1, []string{"up"}},
		{[]string{"--json", "up"}, -1, []string{"up"}},
		// run and elect (one positional): options stop at NAME or "--".
		{[]string{"name", "--json", "--", "cmd", "-x"}, 1, []string{"name", "--json", "--", "cmd", "-x"}},
		{[]string{"--json", "name", "--", "cmd", "-x"}, 1, []string{"name", "--", "cmd", "-x"}},
		{[]string{"--json", "--", "name", "cmd", "-x"}, 1, []string{"name", "cmd", "-x"}},
		{[]string{"name", "cmd", "-x"}, 1, []string{"name", "cmd", "-x"}},
	} {
		fs := runFlagSetForTest()
		got, err := parseInterspersed(fs, c.args, c.max)
		if err != nil || strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%q: %q, %v; want %q", c.args, got, err, c.want)
		}
	}
	if _, err := parseInterspersed(runFlagSetForTest(), []string{"--nope"}, -1); err == nil {
		t.Error("unknown flag accepted")
	}
}

func runFlagSetForTest() *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Bool("json", false, "")
	return fs
}

func TestMySQLConfig(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"mysql://root@127.0.0.1:3306/app", "root@tcp(127.0.0.1:3306)/app"},
		{"mysql://u:p%40ss@db/app?parseTime=true", "u:p@ss@tcp(db:3306)/app?parseTime=true"},
	} {
		got, err := mysqlConfig(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if _, err := gomysql.ParseDSN(got); err != nil || !strings.HasPrefix(got, strings.SplitN(c.want, "?", 2)[0]) || (strings.Contains(c.want, "?") && !strings.Contains(got, "parseTime=true")) {
			t.Errorf("%s: %s (%v), want %s", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"mysql://root@127.0.0.1:3306", "mysql://root@db/app?parseTime=maybe"} {
		if _, err := mysqlConfig(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if got := redact("postgres://u:secret@h/db"); strings.Contains(got, "secret") {
		t.Errorf("redact: %s", got)
	}
	var ue usageError
	if _, err := openTarget(context.Background(), "sqlite:", ""); !errors.As(err, &ue) {
		t.Errorf("empty sqlite path: %v", err)
	}
}

// With no DSN at all, the demo runs on the embedded default: no server
// needed.
func TestDemoOnDefaultDatabase(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	c := exec.CommandContext(ctxT(t), bin, "demo")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SQLLOCK_DSN=") && !strings.HasPrefix(kv, "XDG_STATE_HOME=") {
			c.Env = append(c.Env, kv)
		}
	}
	c.Env = append(c.Env, "XDG_STATE_HOME="+state)
	out, err := c.CombinedOutput()
	if err != nil || !hasRow(string(out), "table", "correct") || !strings.Contains(string(out), "on sqlite") {
		t.Fatalf("demo on the default database: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(state, "sqllock", "sqllock.db")); err != nil {
		t.Fatalf("default database file: %v", err)
	}
}

func TestBench(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		out, err := b.cmd(t, "bench", "--ops", "40", "--handoffs", "5").CombinedOutput()
		if err != nil {
			t.Fatalf("bench: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "sqllock bench: table, 1 client(s), 40 acquire+release...") {
			t.Errorf("bench: no progress on stderr:\n%s", out)
		}
		for _, strategy := range strategies(b) {
			if n := strings.Count(string(out), " "+strategy+" "); n != 2 {
				t.Errorf("bench: %d rows for %s, want 2 (1 and 8 clients):\n%s", n, strategy, out)
			}
		}
	})
}

// replicas runs n `sqllock run --no-wait [flags] name -- <5 ms job>` and
// returns how many times the job ran (counted in a file the job appends
// to) and the exit statuses. Replicas start every 100 ms (spread over
// 400 ms for five, as cron on five machines would start them), or, if
// sequential, each once the previous one has exited.
func (b backend) replicas(t *testing.T, n int, name string, sequential bool, flags ...string) (int, []int) {
	t.Helper()
	runs := filepath.Join(t.TempDir(), "runs")
	args := append(append([]string{"run", "--no-wait"}, flags...), name, "--", "sh", "-c", `echo run >> "$RUNS"; sleep 0.005`)
	codes := make([]int, n)
	var started []*exec.Cmd
	for k := range n {
		if k > 0 && !sequential {
			time.Sleep(100 * time.Millisecond)
		}
		c := b.cmd(t, args...)
		c.Env = append(c.Env, "RUNS="+runs)
		var stderr bytes.Buffer
		c.Stderr = &stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if stderr.Len() > 0 {
				t.Logf("replica %d: %s", k, stderr.String())
			}
		})
		if sequential {
			codes[k] = exitStatus(c.Wait())
			continue
		}
		started = append(started, c)
	}
	for k, c := range started {
		codes[k] = exitStatus(c.Wait())
	}
	data, err := os.ReadFile(runs)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return strings.Count(string(data), "run\n"), codes
}

// Five replicas of a 5 ms job started within 500 ms of each other, with
// --min-hold 10m (far longer than the replicas could take to start on a
// loaded machine): the job runs exactly once, the others exit 75. Without
// --min-hold, five replicas started one after the other (each after the
// previous one exited) all run it: the count is the job's own, not a
// timing artefact; with --min-hold, again once.
func TestRunMinHold(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		n, codes := b.replicas(t, 5, "report:hourly", false, "--min-hold", "10m")
		if n != 1 {
			t.Errorf("with --min-hold 10m the job ran %d times, want 1 (exit statuses %v)", n, codes)
		}
		if countOf(codes, 0) != 1 || countOf(codes, exitNotAcquired) != 4 {
			t.Errorf("exit statuses %v, want one 0 and four 75", codes)
		}
		if n, codes := b.replicas(t, 5, "report:other", true); n != 5 {
			t.Errorf("without --min-hold, five runs one after the other ran the job %d times, want 5 (exit statuses %v)", n, codes)
		}
		if n, codes := b.replicas(t, 3, "report:again", true, "--min-hold", "1h"); n != 1 {
			t.Errorf("with --min-hold 1h, three runs one after the other ran the job %d times, want 1 (exit statuses %v)", n, codes)
		}
	})
}

func countOf(s []int, v int) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

// --min-hold is refused for the pessimistic strategy, whose lock ends with
// its transaction, and when negative.
func TestRunMinHoldUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"run", "--strategy", "pessimistic", "--min-hold", "1s", "x", "--", "true"},
		{"run", "--min-hold", "-1s", "x", "--", "true"},
	} {
		c := exec.CommandContext(ctxT(t), bin, args...)
		c.Env = append(os.Environ(), "SQLLOCK_DSN=sqlite:"+filepath.Join(t.TempDir(), "l.db"))
		out, err := c.CombinedOutput()
		if code := exitStatus(err); code != 64 {
			t.Errorf("%v: exit %d, want 64: %s", args, code, out)
		}
	}
}
