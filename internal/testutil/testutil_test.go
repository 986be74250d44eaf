package testutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Fatalf instead of ending the test.
type recorder struct {
	testing.TB
	fatal []string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = append(r.fatal, fmt.Sprintf(format, args...))
}

func TestEventually(t *testing.T) {
	t.Parallel()
	calls := 0
	Eventually(t.Context(), t, "the third call", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var r recorder
	Eventually(ctx, &r, "nothing", func() bool { return false })
	if len(r.fatal) != 1 || !strings.Contains(r.fatal[0], "never: nothing") {
		t.Fatalf("after the context ended: %q, want one failure saying what never happened", r.fatal)
	}
}

// childEnv names the variable that makes this test binary a child.
const childEnv = "SQLLOCK_TESTUTIL_CHILD"

type childConfig struct {
	Say  string
	Fail bool
}

func TestMain(m *testing.M) {
	ChildMain(childEnv, func(c childConfig) error {
		if c.Fail {
			return fmt.Errorf("failing as told")
		}
		fmt.Print(c.Say)
		return nil
	})
	os.Exit(m.Run())
}

// A child process gets its config, runs no tests, and reports a failure by
// its exit status and standard error.
func TestChild(t *testing.T) {
	t.Parallel()
	cmd, err := ChildCommand(t.Context(), childEnv, childConfig{Say: "hello from the child"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.Output()
	if err != nil || string(out) != "hello from the child" {
		t.Fatalf("child: %q, %v", out, err)
	}

	cmd, err = ChildCommand(t.Context(), childEnv, childConfig{Fail: true})
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr.String(), "failing as told") {
		t.Fatalf("failing child: %v, stderr %q; want exit status 2 and the error", err, stderr.String())
	}
}
