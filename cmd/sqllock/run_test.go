package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

	dsnpkg "github.com/sqllock/sqllock/dsn"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// jobProcesses returns the PIDs of the live processes named comm whose
// environment has SQLLOCK_NAME=name: the processes of one test's job,
// children and grandchildren of `sqllock run` alike. Zombies (dead, not yet
// reaped) are not counted.
func jobProcesses(t *testing.T, comm, name string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("SQLLOCK_NAME=" + name + "\x00")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		c, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) STATE ...
		if i := bytes.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' {
			continue
		}
		env, err := os.ReadFile(filepath.Join(dir, "environ"))
		if err != nil || !bytes.Contains(append(env, 0), want) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// waitFor polls cond every 10 ms until it holds or limit passes, and
// reports whether it held.
func waitFor(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func needProc(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
}

// runningJob is a started `sqllock run` or `elect` whose output is collected.
type runningJob struct {
	cmd  *exec.Cmd
	out  bytes.Buffer  // read once done is closed
	code int           // the exit status, once done is closed
	done chan struct{} // closed once the command has exited
}

// startRunning starts c, collecting its output, and waits until a sleep of the
// job named name runs. It fails if the command exits first, with its
// output, or if no sleep runs within a minute.
func startRunning(t *testing.T, c *exec.Cmd, name string) *runningJob {
	t.Helper()
	j := &runningJob{cmd: c, done: make(chan struct{})}
	c.Stdout, c.Stderr = &j.out, &j.out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		j.code = exitStatus(c.Wait())
		close(j.done)
	}()
	t.Cleanup(func() {
		_ = c.Process.Kill()
		<-j.done
	})
	exited := false
	if !waitFor(time.Minute, func() bool {
		select {
		case <-j.done:
			exited = true
			return true
		default:
		}
		return len(jobProcesses(t, "sleep", name)) > 0
	}) {
		t.Fatal("the job's sleep never started within a minute")
	}
	if exited {
		t.Fatalf("exited %d before the job's sleep started:\n%s", j.code, j.out.String())
	}
	return j
}

// wait waits for the command to exit, and returns its status.
func (j *runningJob) wait() int {
	<-j.done
	return j.code
}

// kill -9 of `sqllock run` ends its job, grandchildren included: no sleep
// of the job is left. The sleeps would run for an hour; they must be gone
// within a minute. `sh -c 'sleep 3600'` may exec sleep in place of the
// shell; `sh -c 'sleep 3600; :'` forks it, so that sleep is a grandchild of
// the wrapper's supervisor.
func TestRunKilledWrapperEndsJob(t *testing.T) {
	needProc(t)
	each(t, func(t *testing.T, b backend) {
		for i, script := range []string{"sleep 3600", "sleep 3600; :", "sleep 3600 & sleep 3600; wait"} {
			name := "k9-" + b.kind + "-" + strconv.Itoa(i) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			c := b.cmd(t, "run", "--grace", "30s", name, "--", "sh", "-c", script)
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			if !waitFor(time.Minute, func() bool { return len(jobProcesses(t, "sleep", name)) > 0 }) {
				t.Fatalf("%q: the job's sleep never started", script)
			}
			if err := c.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = c.Wait()
			if !waitFor(time.Minute, func() bool { return len(jobProcesses(t, "sleep", name)) == 0 }) {
				left := jobProcesses(t, "sleep", name)
				for _, pid := range left {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				t.Fatalf("%q: sleep %v still running a minute after kill -9 of sqllock run", script, left)
			}
		}
	})
}

// A lost lock ends the whole job: the shell and the sleep it forked. The
// TTL is long enough that no renewal of a loaded machine comes too late:
// the lease is lost to the theft alone, found by the next renewal (every
// 5s).
func TestRunLostLockEndsGrandchildren(t *testing.T) {
	needProc(t)
	each(t, func(t *testing.T, b backend) {
		name := "lost-" + b.kind + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		j := startRunning(t, b.cmd(t, "run", "--ttl", "15s", "--grace", "5s", name, "--", "sh", "-c", "sleep 3600; echo survived"), name)
		res, err := b.d.DB().ExecContext(ctxT(t), qualify(b, "UPDATE {sqllock_locks} SET owner = 'thief' WHERE name = '"+name+"'"))
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("stole %d rows", n)
		}
		if code := j.wait(); code != exitLost {
			t.Fatalf("exit %d, want 76\n%s", code, j.out.String())
		}
		if left := jobProcesses(t, "sleep", name); len(left) != 0 {
			t.Fatalf("sleep %v of the job still runs after sqllock run exited 76", left)
		}
		if strings.Contains(j.out.String(), "survived") {
			t.Fatalf("the job went on after the loss:\n%s", j.out.String())
		}
	})
}

// Background processes the command leaves behind are stopped before the
// lock is released.
func TestRunStopsLeftovers(t *testing.T) {
	needProc(t)
	each(t, func(t *testing.T, b backend) {
		name := "left-" + b.kind + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		out, err := b.cmd(t, "run", "--grace", "5s", name, "--", "sh", "-c", "sleep 60 >/dev/null 2>&1 & exit 3").CombinedOutput()
		if code := exitStatus(err); code != 3 {
			t.Fatalf("exit %d, want the command's 3\n%s", code, out)
		}
		if left := jobProcesses(t, "sleep", name); len(left) != 0 {
			t.Fatalf("background sleep %v still runs after the lock was released", left)
		}
	})
}

// --max-time stops the job's group and exits 124: the job would sleep an
// hour; the test's minute for a command would kill sqllock run (another
// exit status) if --max-time did not stop it.
func TestRunMaxTime(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		out, err := b.cmd(t, "run", "--max-time", "0.5", "--grace", "5s", "slow", "--", "sh", "-c", "sleep 3600; :").CombinedOutput()
		if code := exitStatus(err); code != exitTimedOut {
			t.Fatalf("exit %d, want 124\n%s", code, out)
		}
	})
}

// The flock-like flags: -n, -w SECONDS, -E, -c, -s; contradictions and
// mistakes are usage errors (64) on one line; a missing command is 127.
func TestRunFlags(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		h := b.hold(t, "flk", "--ttl", "60s")
		h.waitToken(t)
		for _, c := range []struct {
			args []string
			want int
			out  string // in the output, if not ""
		}{
			{[]string{"run", "-n", "flk", "true"}, exitNotAcquired, "is busy: held by "},
			{[]string{"run", "-n", "-E", "0", "flk", "true"}, 0, ""},
			{[]string{"run", "-n", "-E", "9", "flk", "true"}, 9, ""},
			// Waits long enough to connect on a loaded machine: the wait
			// bounds the connection too.
			{[]string{"run", "-w", "2", "flk", "true"}, exitNotAcquired, "still busy after 2s"},
			{[]string{"run", "--timeout", "2s", "-E", "3", "flk", "true"}, 3, ""},
			{[]string{"run", "-n", "-c", "exit 4", "free"}, 4, ""},
			{[]string{"run", "-c", "echo $SQLLOCK_NAME", "free"}, 0, "free"},
			{[]string{"run", "-n", "-w", "5", "free", "true"}, exitUsage, "contradict"},
			{[]string{"run", "-c", "true", "free", "--", "true"}, exitUsage, ""},
			{[]string{"run", "-c", "", "free"}, exitUsage, ""},
			{[]string{"run", "-s", "free", "true"}, 0, ""},
			{[]string{"run", "-s", "--strategy", "optimistic", "free", "true"}, exitUsage, "--strategy table"},
			{[]string{"run", "-s", "--exclusive", "free", "true"}, exitUsage, "contradict"},
			{[]string{"run", "-s", "--min-hold", "5", "free", "true"}, exitUsage, "min-hold"},
			{[]string{"run", "-E", "256", "free", "true"}, exitUsage, ""},
			{[]string{"run", "--ttl", "x", "free", "true"}, exitUsage, "not a duration"},
			{[]string{"run", "--ttl", "5", "free", "true"}, 0, ""},
			{[]string{"run", "--nope", "free", "true"}, exitUsage, "unknown flag --nope"},
			{[]string{"run", "free", "--", "/nonexistent/command"}, 127, "command not found"},
			{[]string{"run", "free", "--", "/"}, 126, ""},
		} {
			out, err := b.cmd(t, c.args...).CombinedOutput()
			if code := exitStatus(err); code != c.want || !strings.Contains(string(out), c.out) {
				t.Errorf("sqllock %q: exit %d, want %d with %q:\n%s", c.args, code, c.want, c.out, out)
			}
			if c.want == exitUsage && !oneLineUsage(string(out)) {
				t.Errorf("sqllock %q: not a one-line usage error:\n%s", c.args, out)
			}
			if strings.Contains(string(out), "sqllock: sqllock:") {
				t.Errorf("sqllock %q: doubled prefix:\n%s", c.args, out)
			}
		}
		if b.kind == "sqlite" {
			return
		}
		// Shared holders run side by side; an exclusive one is refused.
		s1 := b.hold(t, "shr", "--strategy", "pessimistic", "-s")
		s1.waitToken(t)
		s2 := b.hold(t, "shr", "--strategy", "pessimistic", "--shared", "-n")
		s2.waitToken(t)
		if out, err := b.cmd(t, "run", "--strategy", "pessimistic", "-n", "shr", "true").CombinedOutput(); exitStatus(err) != exitNotAcquired {
			t.Fatalf("exclusive run beside shared holders: %v\n%s", err, out)
		}
	})
}

// --verbose says what is waited for and who holds it.
func TestRunVerbose(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		h := b.hold(t, "vrb", "--ttl", "60s")
		tok := h.waitToken(t)
		c := b.cmd(t, "run", "-v", "vrb", "--", "true")
		stderr, err := c.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stderr)
		if !sc.Scan() || !strings.Contains(sc.Text(), `waiting for lock "vrb": held by `) || !strings.Contains(sc.Text(), "token "+strconv.FormatInt(tok, 10)) || !strings.Contains(sc.Text(), "lease expires in") {
			t.Fatalf("first verbose line %q", sc.Text())
		}
		h.stdin.Close()
		var rest []string
		for sc.Scan() {
			rest = append(rest, sc.Text())
		}
		if err := c.Wait(); err != nil {
			t.Fatalf("%v\n%s", err, rest)
		}
		if all := strings.Join(rest, "\n"); !strings.Contains(all, `acquired lock "vrb"`) || !strings.Contains(all, `released lock "vrb"`) {
			t.Fatalf("verbose output:\n%s", all)
		}
	})
}

// A name is one lock across strategies in `sqllock run`.
func TestRunOneNamespace(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		all := strategies(b)
		for _, held := range all {
			h := b.hold(t, "ns-"+held, "--strategy", held)
			h.waitToken(t)
			for _, other := range all {
				if other == held {
					continue
				}
				out, err := b.cmd(t, "run", "--strategy", other, "-n", "ns-"+held, "--", "true").CombinedOutput()
				if code := exitStatus(err); code != exitNotAcquired || !strings.Contains(string(out), held) {
					t.Errorf("%s run while held under %s: exit %d, want 75 naming %s:\n%s", other, held, code, held, out)
				}
			}
			h.stdin.Close()
			h.wait()
			for _, other := range all {
				if out, err := b.cmd(t, "run", "--strategy", other, "-n", "ns-"+held, "--", "true").CombinedOutput(); err != nil {
					t.Errorf("%s run after the %s holder ended: %v\n%s", other, held, err, out)
				}
			}
		}
	})
}

// help for every command, on stdout, with its flags; --version.
func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		for _, args := range [][]string{{"help", c.name}, {c.name, "--help"}, {c.name, "-h"}} {
			var stdout, stderr bytes.Buffer
			if code := mainCode(t.Context(), args, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
				t.Fatalf("%q: exit %d, stderr %q", args, code, stderr.String())
			}
			_, flags, ok := strings.Cut(stdout.String(), "\nFlags:\n")
			if c.name == "completion" || c.name == "man" {
				// No database, no flags.
				if ok {
					t.Fatalf("%q lists flags:\n%s", args, stdout.String())
				}
				continue
			}
			if !ok || !strings.Contains(flags, "--dsn DSN") {
				t.Fatalf("%q: no flags listed:\n%s", args, stdout.String())
			}
		}
	}
	var stdout, stderr bytes.Buffer
	if code := mainCode(t.Context(), []string{"--version"}, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "sqllock ") {
		t.Fatalf("--version: %d %q %q", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	mainCode(t.Context(), []string{"help", "run"}, &stdout, &stderr)
	for _, f := range []string{"-n, --no-wait", "-w, --timeout SECONDS", "-E, --conflict-exit-code", "-c, --command", "-s, --shared", "-v, --verbose", "--grace", "--max-time", "--schema"} {
		if !strings.Contains(stdout.String(), f) {
			t.Errorf("help run lacks %q", f)
		}
	}
}

// locks shows every strategy's locks, pessimistic ones included where the
// server shows them, with wall-clock times and numeric JSON.
func TestLocksAllStrategies(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		var holders []*holder
		for _, s := range strategies(b) {
			h := b.hold(t, "all-"+s, "--strategy", s)
			h.waitToken(t)
			holders = append(holders, h)
		}
		var waiter *holder
		if b.kind != "sqlite" {
			// A waiter makes the pessimistic lock visible on MariaDB too.
			waiter = b.hold(t, "all-pessimistic", "--strategy", "pessimistic")
			holders = append(holders, waiter)
		}
		defer func() {
			// Every holder ends before the schema is dropped.
			for _, h := range holders {
				h.stdin.Close()
			}
			for _, h := range holders {
				h.wait()
			}
		}()
		var rows []lockRow
		ok := waitFor(time.Minute, func() bool {
			out, err := b.cmd(t, "locks", "--json").Output()
			if err != nil {
				t.Fatal(err)
			}
			rows = nil
			if err := json.Unmarshal(out, &rows); err != nil {
				t.Fatalf("%v in %s", err, out)
			}
			if len(rows) != len(strategies(b)) {
				return false
			}
			for _, r := range rows {
				if r.Strategy == "pessimistic" && (waiter == nil || r.Waiters == nil || *r.Waiters != 1) {
					return false
				}
			}
			return true
		})
		if !ok {
			t.Fatalf("locks --json: %+v", rows)
		}
		for _, r := range rows {
			if r.Name != "all-"+r.Strategy || r.Holds != 1 || r.AcquiredAt.IsZero() || r.HeldForMS < 0 || r.Owner == "" {
				t.Errorf("row %+v", r)
			}
			if (r.Strategy == "pessimistic") != (r.ExpiresInMS == nil) {
				t.Errorf("row %+v: a lease has expires_in_ms, a row lock has none", r)
			}
		}
		out, err := b.cmd(t, "locks", "--json").Output()
		if err != nil || !bytes.Contains(out, []byte(`"held_for_ms": `)) {
			t.Fatalf("JSON durations not numeric milliseconds: %v\n%s", err, out)
		}
		out, err = b.cmd(t, "locks").Output()
		zone, _ := time.Now().Zone()
		if err != nil || !strings.Contains(string(out), "ACQUIRED ("+zone+")") || !strings.Contains(string(out), "WAITERS") {
			t.Fatalf("locks: %v\n%s", err, out)
		}
	})
}

// locks --watch shows the locks again until interrupted.
func TestLocksWatch(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		c := b.cmd(t, "locks", "--watch", "0.1")
		out, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		seen := 0
		for seen < 2 && sc.Scan() {
			if sc.Text() == "no locks held" {
				seen++
			}
		}
		if seen < 2 {
			t.Fatal("locks --watch did not refresh")
		}
		if err := c.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		for sc.Scan() {
		}
		if err := c.Wait(); err != nil {
			t.Fatalf("locks --watch after SIGINT: %v", err)
		}
	})
}

// The CLI accepts every DSN form of internal/dsn: URLs, pgx keywords and
// go-sql-driver/mysql's own form, with the schema from the DSN or --schema.
func TestDSNForms(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		if b.pooled {
			return // the forms name the server itself; the pooler's DSN runs in every other test
		}
		var forms [][]string // DSN, then extra flags
		switch b.kind {
		case "postgres":
			schema := b.d.(interface{ Schema() string }).Schema()
			cfg, err := dsnpkg.Parse(dbtest.PostgresURL(t))
			if err != nil {
				t.Fatal(err)
			}
			p := cfg.Postgres
			kw := "host=" + p.Host + " port=" + strconv.Itoa(int(p.Port)) + " user=" + p.User + " dbname=" + p.Database + " sslmode=disable"
			if p.Password != "" {
				kw += " password=" + p.Password
			}
			sep := "?"
			if strings.Contains(dbtest.PostgresURL(t), "?") {
				sep = "&"
			}
			forms = [][]string{
				{dbtest.PostgresURL(t) + sep + "schema=" + schema},
				{dbtest.PostgresURL(t), "--schema", schema},
				{kw + " schema=" + schema},
				{kw, "--schema", schema},
			}
		case "mysql":
			db := b.d.(interface{ Database() string }).Database()
			cfg, err := dsnpkg.Parse(dbtest.MySQLDSN(t))
			if err != nil {
				t.Fatal(err)
			}
			c := cfg.MySQL.Clone()
			c.DBName = db
			forms = [][]string{{c.FormatDSN()}, {"mysql://" + c.FormatDSN()}, {b.dsn}}
		case "sqlite":
			forms = [][]string{{b.dsn}, {"sqlite://" + strings.TrimPrefix(b.dsn, "sqlite:")}}
		}
		for i, f := range forms {
			args := append([]string{"run", "--dsn", f[0]}, f[1:]...)
			args = append(args, "-n", "form-"+strconv.Itoa(i), "--", "true")
			if out, err := b.cmd(t, args...).CombinedOutput(); err != nil {
				t.Errorf("form %d (%s): %v\n%s", i, redact(f[0]), err, out)
			}
		}
		// The schema the forms named is the one the test migrated: the
		// locks they took left rows there.
		rows, err := sqllockList(t, b)
		if err != nil || rows < len(forms) {
			t.Errorf("%d lock rows in the test's schema after %d forms: %v", rows, len(forms), err)
		}
	})
}

// sqllockList counts the rows of b's lock table.
func sqllockList(t *testing.T, b backend) (int, error) {
	var n int
	err := b.d.DB().QueryRowContext(ctxT(t), qualify(b, "SELECT count(*) FROM {sqllock_locks}")).Scan(&n)
	return n, err
}

// demo --buyers 200 never opens more than --conns connections: it runs as a
// database user allowed only --conns + 1 at once (PostgreSQL: the
// listener; MariaDB: a closed connection keeps its place in
// MAX_USER_CONNECTIONS until its server thread has ended, which on a loaded
// server comes after the pool has replaced it: error 1226 was seen once).
func TestDemoBoundsConnections(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		if b.kind == "sqlite" || b.pooled {
			return // a pooler's auth file knows the test user alone
		}
		const conns = 3
		user := "u" + strconv.FormatInt(time.Now().UnixNano(), 36)
		db := b.d.DB()
		var setup, teardown []string
		dsn := ""
		switch b.kind {
		case "postgres":
			schema := b.d.(interface{ Schema() string }).Schema()
			setup = []string{
				`CREATE ROLE ` + user + ` LOGIN CONNECTION LIMIT ` + strconv.Itoa(conns+1),
				`GRANT ALL ON SCHEMA "` + schema + `" TO ` + user,
				`GRANT ALL ON ALL TABLES IN SCHEMA "` + schema + `" TO ` + user,
				`GRANT ALL ON ALL SEQUENCES IN SCHEMA "` + schema + `" TO ` + user,
			}
			teardown = []string{`DROP OWNED BY ` + user, `DROP ROLE ` + user}
			u, err := url.Parse(b.dsn)
			if err != nil {
				t.Fatal(err)
			}
			u.User = url.User(user)
			dsn = u.String()
		case "mysql":
			database := b.d.(interface{ Database() string }).Database()
			setup = []string{
				`CREATE USER '` + user + `'@'%' WITH MAX_USER_CONNECTIONS ` + strconv.Itoa(conns+1),
				"GRANT ALL ON `" + database + "`.* TO '" + user + "'@'%'",
			}
			teardown = []string{`DROP USER '` + user + `'@'%'`}
			u, err := url.Parse(b.dsn)
			if err != nil {
				t.Fatal(err)
			}
			u.User = url.User(user)
			dsn = u.String()
		}
		t.Cleanup(func() {
			for _, q := range teardown {
				if _, err := db.ExecContext(context.WithoutCancel(ctxT(t)), q); err != nil {
					t.Errorf("%s: %v", q, err)
				}
			}
		})
		for _, q := range setup {
			if _, err := db.ExecContext(ctxT(t), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		// The whole workload, 200 buyers a strategy on a few connections,
		// gets a deadline of its own: on a loaded machine (a busy MariaDB
		// above all) it can take longer than the minute of b.cmd.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, bin, "demo", "--dsn", dsn, "--buyers", "200", "--stock", "5", "--think", "0", "--conns", strconv.Itoa(conns))
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("demo with 200 buyers on %d connections: %v\n%s", conns, err, out)
		}
		for _, strategy := range strategies(b) {
			if !hasRow(string(out), strategy, "correct") {
				t.Errorf("no correct %s row:\n%s", strategy, out)
			}
		}
	})
}

// On a terminal the job's process group takes it: the job reads from it
// (no SIGTTIN stop) and Ctrl-C reaches the job. script(1) gives the run a
// pseudo-terminal.
func TestRunOnTerminal(t *testing.T) {
	t.Parallel()
	script, err := exec.LookPath("script")
	if err != nil || runtime.GOOS != "linux" {
		t.Skip("needs util-linux script(1)")
	}
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "locks.db")
	job := `trap "echo got-int; exit 7" INT; echo ready; read a; echo "got $a"; while :; do sleep 0.05; done`
	c := exec.CommandContext(ctxT(t), script, "-qec", bin+" run tty -- sh -c '"+job+"'; echo wrapper-exit=$?", "/dev/null")
	c.Env = append(os.Environ(), "SQLLOCK_DSN="+dsn)
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	sc := bufio.NewScanner(out)
	var seen []string
	expect := func(want string) {
		t.Helper()
		for sc.Scan() {
			seen = append(seen, sc.Text())
			if strings.Contains(sc.Text(), want) {
				return
			}
		}
		t.Fatalf("no %q from the job on the terminal: %q", want, seen)
	}
	expect("ready")
	if _, err := in.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	expect("got hello")
	if _, err := in.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	expect("got-int")
	expect("wrapper-exit=7")
	in.Close()
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
}

// A stopped `sqllock run` (SIGSTOP: a frozen VM, a debugger, an operator's
// mistake) cannot renew its lease, but its job must not run on beside the
// next holder: the supervisor stops the job by the lease's trust deadline,
// before another run can take the lock, and the run, once continued,
// exits 76.
func TestRunStoppedRunner(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		for _, mode := range []string{"table", "optimistic", "occurrence"} {
			t.Run(mode, func(t *testing.T) {
				t.Parallel()
				pidfile := filepath.Join(t.TempDir(), "pid")
				name := "stopped-" + mode
				flags, next := []string{"--ttl", "5", "--strategy", mode}, []string{"-w", "50"}
				if mode == "occurrence" {
					flags, next = []string{"--ttl", "5", "--occurrence", "k"}, []string{"--wait"}
				}
				run := func(extra []string, script string) *exec.Cmd {
					args := append(append(append([]string{"run"}, flags...), extra...), name, "--", "sh", "-c", script, pidfile)
					return b.cmd(t, args...)
				}
				// The first run's job starts under the lock. A machine so
				// starved that the run lost its lease before its job
				// started never reached the state under test: again, on a
				// name of its own (an occurrence's attempt is used up).
				var (
					a      *exec.Cmd
					stderr bytes.Buffer
				)
				for attempt := 1; ; attempt++ {
					stderr.Reset()
					a = run(nil, `echo $$ > "$0"; echo ready; exec sleep 60`)
					out, err := a.StdoutPipe()
					if err != nil {
						t.Fatal(err)
					}
					a.Stderr = &stderr
					if err := a.Start(); err != nil {
						t.Fatal(err)
					}
					line, _ := bufio.NewReader(out).ReadString('\n')
					if line == "ready\n" {
						break
					}
					_ = a.Process.Kill()
					werr := a.Wait()
					if exitStatus(werr) == exitLost && attempt < 3 {
						t.Logf("first run lost its lease before its job started (a starved machine), attempt %d:\n%s", attempt, stderr.String())
						name = fmt.Sprintf("stopped-%s-%d", mode, attempt+1)
						continue
					}
					t.Fatalf("first run: %q, %v\n%s", line, werr, stderr.String())
				}
				pid, err := os.ReadFile(pidfile)
				if err != nil {
					t.Fatal(err)
				}
				job, _ := strconv.Atoi(strings.TrimSpace(string(pid)))
				if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				// While sqllock is stopped, its job ends...
				for deadline := time.Now().Add(time.Minute); syscall.Kill(job, 0) == nil; time.Sleep(20 * time.Millisecond) {
					if time.Now().After(deadline) {
						_ = a.Process.Signal(syscall.SIGCONT)
						t.Fatalf("the job of a stopped run was still running a minute later")
					}
				}
				// ... and the next run's job runs alone. Not on SQLite: a
				// process stopped while it writes (a renewal) keeps the
				// file's write lock, and every other process waits until
				// it goes on.
				if b.kind != "sqlite" {
					got, err := run(next, `if kill -0 "$(cat "$0")" 2>/dev/null; then echo beside; else echo alone; fi`).CombinedOutput()
					if err != nil || !strings.Contains(string(got), "alone") {
						t.Errorf("the next run: %v\n%s (want its job to run alone: the stopped run's job ended)", err, got)
					}
				}
				_ = a.Process.Signal(syscall.SIGCONT)
				if code := exitStatus(a.Wait()); code != exitLost || !strings.Contains(stderr.String(), "not renewed in time") {
					t.Errorf("the stopped run, continued, exited %d, want %d:\n%s", code, exitLost, stderr.String())
				}
			})
		}
	})
}
