package main

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// exitCode is the exit status of a finished command's err.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatal(err)
	return -1
}

// Three runs of sqllock barrier -n 3 each run their command, with
// SQLLOCK_NAME and SQLLOCK_MEMBERS, and exit 0 once all have left. (That
// no member goes on before all have entered, and none leaves before all
// have left, is package barrier's TestBarrierEnterLeave.)
func TestBarrierCommand(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		const n = 3
		name := "barrier-" + b.kind
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			outs []string
		)
		for range n {
			c := b.cmd(t, "barrier", "-n", "3", name, "--", "sh", "-c", `echo "in $SQLLOCK_NAME $SQLLOCK_MEMBERS"`)
			var out, stderr bytes.Buffer
			c.Stdout, c.Stderr = &out, &stderr
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				if code := exitCode(t, c.Wait()); code != 0 {
					t.Errorf("barrier: exit %d: %s", code, stderr.String())
				}
				mu.Lock()
				outs = append(outs, strings.TrimSpace(out.String()))
				mu.Unlock()
			})
		}
		wg.Wait()
		for _, o := range outs {
			if o != "in "+name+" 3" {
				t.Errorf("a member's command printed %q, want %q", o, "in "+name+" 3")
			}
		}
	})
}

// A run of sqllock barrier whose other members never come exits -E after
// -w, without running its command; bad flags are usage errors.
func TestBarrierCommandTimeout(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		out, err := b.cmd(t, "barrier", "-n", "2", "-w", "0.2", "-E", "9", "barrier-alone-"+b.kind, "--", "echo", "ran").Output()
		if code := exitCode(t, err); code != 9 || len(out) != 0 {
			t.Fatalf("barrier alone: exit %d, printed %q; want exit 9, nothing", code, out)
		}
		for _, args := range [][]string{
			{"barrier", "x", "--", "true"},                  // no -n
			{"barrier", "-n", "0", "x", "--", "true"},       // no member
			{"barrier", "-n", "2", "x"},                     // no command
			{"barrier", "-n", "2", "-w", "-1", "x", "true"}, // negative wait
		} {
			if code := exitCode(t, b.cmd(t, args...).Run()); code != 64 {
				t.Errorf("%q: exit %d, want 64", args, code)
			}
		}
	})
}
