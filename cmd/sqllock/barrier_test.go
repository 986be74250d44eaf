package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os/exec"
	"strconv"
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

// A run of sqllock barrier killed (SIGKILL) once all members are inside
// never leaves: the others, their commands done, exit 76 once its lease
// (--ttl 1) has ended, rather than wait for it forever.
func TestBarrierCommandKilled(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		const n = 3
		name := "barrier-killed-" + b.kind
		runs := startBarrierRuns(t, b, name, n, "1")
		if err := runs[0].cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = runs[0].cmd.Wait()
		runs[0].stdin.Close() // its command died with it (Pdeathsig)
		for i, r := range runs[1:] {
			r.stdin.Close()
			if code := exitCode(t, r.cmd.Wait()); code != exitLost {
				t.Errorf("run %d: exit %d, want %d (a member lost)", i+1, code, exitLost)
			}
		}
	})
}

// barrierRun is one `sqllock barrier` whose command prints "in" once in
// the barrier and then copies its standard input until closed.
type barrierRun struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startBarrierRuns starts n runs of `sqllock barrier -n N name` on b, the
// first with --ttl firstTTL (seconds; the others 30), and returns once
// every run's command is in the barrier.
func startBarrierRuns(t *testing.T, b backend, name string, n int, firstTTL string) []barrierRun {
	t.Helper()
	runs := make([]barrierRun, n)
	in := make([]chan struct{}, n) // closed when run i's command printed its line
	for i := range runs {
		ttl := "30"
		if i == 0 {
			ttl = firstTTL
		}
		c := b.cmd(t, "barrier", "-n", strconv.Itoa(n), "--ttl", ttl, name, "--", "sh", "-c", `echo in; cat`)
		stdin, err := c.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		runs[i], in[i] = barrierRun{cmd: c, stdin: stdin}, make(chan struct{})
		go func() {
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			if line == "in\n" {
				close(in[i])
			}
			_, _ = io.Copy(io.Discard, stdout)
		}()
	}
	for i := range runs {
		select {
		case <-in[i]:
		case <-ctxT(t).Done():
			t.Fatalf("run %d's command never started", i)
		}
	}
	return runs
}
