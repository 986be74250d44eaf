package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// withoutDSN is the environment without SQLLOCK_DSN, with XDG_STATE_HOME
// set to state: as cron and systemd start a command.
func withoutDSN(state string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SQLLOCK_DSN=") && !strings.HasPrefix(kv, "XDG_STATE_HOME=") {
			env = append(env, kv)
		}
	}
	return append(env, "XDG_STATE_HOME="+state)
}

// Without --dsn and SQLLOCK_DSN, every command that coordinates processes
// refuses to run (exit 64, naming both) rather than use a file only this
// host sees; nothing is created.
func TestNoDSNRefused(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	for _, args := range [][]string{
		{"run", "nightly", "true"},
		{"run", "-n", "nightly", "true"},
		{"locks"},
		{"reap"},
		{"migrate", "up"},
		{"elect", "scheduler", "true"},
		{"leader", "scheduler"},
	} {
		c := exec.CommandContext(ctxT(t), bin, args...)
		c.Env = withoutDSN(state)
		out, err := c.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUsage {
			t.Errorf("%q without a DSN: %v, want exit %d\n%s", args, err, exitUsage, out)
			continue
		}
		if !strings.Contains(string(out), "--dsn") || !strings.Contains(string(out), "SQLLOCK_DSN") {
			t.Errorf("%q without a DSN says:\n%s\nwant --dsn and SQLLOCK_DSN named", args, out)
		}
	}
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Errorf("commands without a DSN created %v in the state directory", entries)
	}
}

// An SQLite file in a directory that does not exist is refused (exit 64,
// naming the directory), not created with its directories.
func TestSQLiteMissingDirectoryRefused(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "typo", "dir")
	c := exec.CommandContext(ctxT(t), bin, "run", "--dsn", "sqlite:"+filepath.Join(dir, "x.db"), "nightly", "true")
	out, err := c.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), dir) {
		t.Fatalf("run on a missing directory: %v, want exit %d naming %s\n%s", err, exitUsage, dir, out)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the missing directory was created: %v", err)
	}
}
