package main

import (
	"bufio"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
)

// exitOf is the exit status of a finished command, 0 on success.
func exitOf(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatal(err)
	return 0
}

// On a dirty schema (a migration failed half-way) run and locks stop with
// exit 69 and the repair, rather than carry on.
func TestDirtySchemaRefused(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		ns := ""
		switch d := b.d.(type) {
		case *postgres.Dialect:
			ns = `"` + d.Schema() + `".`
		case *mysql.Dialect:
			ns = "`" + d.Database() + "`."
		}
		if _, err := b.d.DB().ExecContext(ctxT(t), "UPDATE "+ns+"sqllock_schema_migrations SET dirty = true"); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"run", "-n", "job", "true"}, {"locks"}} {
			out, err := b.cmd(t, args...).CombinedOutput()
			if code := exitOf(t, err); code != exitUnavailable || !strings.Contains(string(out), "migrate force") {
				t.Errorf("%q on a dirty schema: exit %d, want %d with the repair\n%s", args, code, exitUnavailable, out)
			}
		}
	})
}

// migrate force accepts only a version the embedded migrations have (or
// 0, -1: none), and names them otherwise.
func TestMigrateForceUnknownVersion(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		out, err := b.cmd(t, "migrate", "force", "99").CombinedOutput()
		if code := exitOf(t, err); code != exitUsage || !strings.Contains(string(out), "its versions are 1,") {
			t.Fatalf("migrate force 99: exit %d, want %d naming the versions\n%s", code, exitUsage, out)
		}
		out, err = b.cmd(t, "migrate", "up").CombinedOutput()
		if err != nil {
			t.Fatalf("migrate up after a refused force: %v\n%s", err, out)
		}
	})
}

// Messages read as English: "an election name".
func TestUsageArticles(t *testing.T) {
	t.Parallel()
	out, _ := exec.CommandContext(ctxT(t), bin, "elect").CombinedOutput()
	if !strings.Contains(string(out), "needs an election name") {
		t.Fatalf("elect without arguments:\n%s", out)
	}
}

// startUntil starts c and reads its standard error until a line holds
// marker; the rest of it is read by the scanner returned.
func startUntil(t *testing.T, c *exec.Cmd, marker string) *bufio.Scanner {
	t.Helper()
	stderr, err := c.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() && !strings.Contains(sc.Text(), marker) {
	}
	return sc
}

// interruptedStatus sends SIGINT to c, started by startUntil with sc, and
// returns its exit status.
func interruptedStatus(t *testing.T, c *exec.Cmd, sc *bufio.Scanner) int {
	t.Helper()
	if err := c.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
	}
	return exitOf(t, c.Wait())
}

// Ctrl-C (SIGINT) while waiting for a held lock exits 130, as flock and the
// shell report a command the signal ended, not 75 (lock busy).
func TestRunInterruptedWhileWaiting(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		h := b.hold(t, "busy")
		h.waitToken(t)
		c := b.cmd(t, "run", "-v", "busy", "true")
		if code := interruptedStatus(t, c, startUntil(t, c, "waiting for lock")); code != 130 {
			t.Fatalf("run interrupted while waiting: exit %d, want 130", code)
		}
	})
}

// Ctrl-C while campaigning exits 130 too, as the wait of run does, not -E
// (not elected in time).
func TestElectInterruptedWhileCampaigning(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		leader := b.cmd(t, "elect", "-v", "busy", "--", "sleep", "60")
		startUntil(t, leader, "elected leader")
		t.Cleanup(func() { leader.Process.Kill(); leader.Wait() })
		c := b.cmd(t, "elect", "-v", "busy", "true")
		if code := interruptedStatus(t, c, startUntil(t, c, "leads")); code != 130 {
			t.Fatalf("elect interrupted while campaigning: exit %d, want 130", code)
		}
	})
}

// elect -w that times out names the leader it waited for, as run names
// the holder.
func TestElectTimeoutNamesLeader(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		leader := b.cmd(t, "elect", "-v", "--value", "host-a:42", "busy", "--", "sleep", "60")
		startUntil(t, leader, "elected leader")
		t.Cleanup(func() { leader.Process.Kill(); leader.Wait() })
		out, err := b.cmd(t, "elect", "-w", "0.2", "busy", "true").CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitNotAcquired {
			t.Fatalf("elect -w 0.2 on a held election: %v, want exit %d\n%s", err, exitNotAcquired, out)
		}
		if !strings.Contains(string(out), `not elected leader of "busy" within 200ms: "host-a:42" leads (term `) {
			t.Fatalf("elect -w 0.2 on a held election said %q, not who leads", out)
		}
	})
}

// migrate down leaves nothing of sqllock's, not even the table of its
// version.
func TestMigrateDownRemovesEverything(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		if out, err := b.cmd(t, "migrate", "down").CombinedOutput(); err != nil {
			t.Fatalf("migrate down: %v\n%s", err, out)
		}
		q := "SELECT count(*) FROM sqlite_master WHERE name LIKE 'sqllock%'"
		var args []any
		switch b.kind {
		case "postgres":
			q, args = "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name LIKE 'sqllock%'", []any{b.ns}
		case "mysql":
			q, args = "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name LIKE 'sqllock%'", []any{b.ns}
		}
		var n int
		if err := b.d.DB().QueryRowContext(ctxT(t), q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("%d sqllock tables left after migrate down", n)
		}
	})
}

// As flock: options, then NAME, then the command. "--" ends the options
// wherever it stands (it is never a lock name), and an option after NAME is
// a usage error rather than the command.
func TestRunOptionsBeforeName(t *testing.T) {
	t.Parallel()
	dsn := "SQLLOCK_DSN=sqlite:" + t.TempDir() + "/l.db"
	c := exec.CommandContext(ctxT(t), bin, "run", "-n", "--", "myjob", "sh", "-c", `echo "$SQLLOCK_NAME"`)
	c.Env = append(c.Environ(), dsn)
	out, err := c.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "myjob" {
		t.Fatalf("run -n -- myjob: %v\n%s", err, out)
	}
	c = exec.CommandContext(ctxT(t), bin, "run", "myjob", "-n", "true")
	c.Env = append(c.Environ(), dsn)
	out, err = c.CombinedOutput()
	if code := exitOf(t, err); code != exitUsage || !strings.Contains(string(out), "options go before") {
		t.Fatalf("run myjob -n true: exit %d, want %d saying options go before NAME\n%s", code, exitUsage, out)
	}
	c = exec.CommandContext(ctxT(t), bin, "run", "myjob", "--", "sh", "-c", "echo ok")
	c.Env = append(c.Environ(), dsn)
	if out, err := c.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("run myjob -- sh -c: %v\n%s", err, out)
	}
}
