// Package testutil holds what sqllock's tests share beyond a database: a
// wait for a condition the test can observe (Eventually), the running of a
// test binary as child processes of its own tests (ChildMain,
// ChildCommand), and a dialect's tables (Tables).
package testutil

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// Eventually calls cond until it reports true, pausing between calls (1ms
// at first, growing to 20ms), and fails t with "never: what" if ctx ends
// first. cond runs on the calling goroutine, so it may fail t itself, say
// when it sees that the awaited thing can no longer happen.
//
// It waits for what a test can observe (a server's view of waiting
// sessions, a counter, a row), never for time to pass: a slow machine makes
// it wait longer, not fail.
func Eventually(ctx context.Context, t testing.TB, what string, cond func() bool) {
	t.Helper()
	pause := time.Millisecond
	for !cond() {
		tm := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			tm.Stop()
			t.Fatalf("never: %s (%v)", what, context.Cause(ctx))
			return
		case <-tm.C:
		}
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// ChildMain makes the process a child process of a test when the
// environment variable env is set: it decodes the variable's JSON into a C,
// calls run with it, and exits, with status 0 when run returns nil, else
// with status 2 after writing the error to standard error. When env is
// unset it returns at once. Call it first in TestMain, before m.Run.
func ChildMain[C any](env string, run func(c C) error) {
	spec := os.Getenv(env)
	if spec == "" {
		return
	}
	var c C
	err := json.Unmarshal([]byte(spec), &c)
	if err == nil {
		err = run(c)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "child %d: %v\n", os.Getpid(), err)
		os.Exit(2)
	}
	os.Exit(0)
}

// ChildCommand returns a command that runs the test binary as a child
// process with config c, JSON-encoded in the environment variable env for
// ChildMain, and runs none of the binary's tests. ctx kills the process as
// for exec.CommandContext.
func ChildCommand(ctx context.Context, env string, c any) (*exec.Cmd, error) {
	spec, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("testutil: child config: %w", err)
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+string(spec))
	return cmd, nil
}

// LocksOnly returns cat with its lock table's declaration and its runner's
// hooks alone: no other primitive, and no notifier (waiters poll).
func LocksOnly(cat dialect.Catalogue) dialect.Catalogue {
	return dialect.Catalogue{Style: cat.Style, Lead: cat.Lead, Expand: cat.Expand, Locks: cat.Locks, Hooks: cat.Hooks}
}

// Tables returns the tables the runner builds from d's catalogue, failing t
// if it cannot.
func Tables(t testing.TB, d dialect.Dialect) *sqlrun.Tables {
	t.Helper()
	tb, err := sqlrun.Open(d)
	if err != nil {
		t.Fatalf("sqlrun.Open(%s): %v", d.Name(), err)
	}
	return tb
}

// Renewed reports which leases a LeaseTable.RenewMany renewed
// (sqlrun.Renewal.OK), passing its error on: a test's view of a renewal.
func Renewed(rs []sqlrun.Renewal, err error) ([]bool, error) {
	if err != nil {
		return nil, err
	}
	ok := make([]bool, len(rs))
	for i, r := range rs {
		ok[i] = r.OK
	}
	return ok, nil
}
