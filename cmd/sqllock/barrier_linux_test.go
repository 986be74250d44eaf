package main

import (
	"bufio"
	"io"
	"os/exec"
	"syscall"
	"testing"
)

// A run of sqllock barrier stopped (SIGSTOP) inside the barrier for longer
// than its --ttl is lost: the other member exits 76 as it leaves, and the
// stopped one, continued (SIGCONT), exits 76 too once its command is done,
// its lease having ended.
func TestBarrierCommandStopped(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		name := "barrier-stopped-" + b.kind
		type run struct {
			cmd   *exec.Cmd
			stdin io.WriteCloser
			in    chan struct{} // closed when the command printed its line
		}
		var runs [2]run
		for i := range runs {
			ttl := "30"
			if i == 0 {
				ttl = "1" // the run that is stopped
			}
			c := b.cmd(t, "barrier", "-n", "2", "--ttl", ttl, name, "--", "sh", "-c", `echo in; cat`)
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
			r := run{cmd: c, stdin: stdin, in: make(chan struct{})}
			go func() {
				line, _ := bufio.NewReader(stdout).ReadString('\n')
				if line == "in\n" {
					close(r.in)
				}
				_, _ = io.Copy(io.Discard, stdout)
			}()
			runs[i] = r
		}
		for i, r := range runs {
			select {
			case <-r.in:
			case <-ctxT(t).Done():
				t.Fatalf("run %d's command never started", i)
			}
		}
		stopped := runs[0].cmd.Process.Pid
		if err := syscall.Kill(stopped, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		runs[1].stdin.Close()
		code := exitCode(t, runs[1].cmd.Wait())
		if err := syscall.Kill(stopped, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if code != exitLost {
			t.Errorf("the running member: exit %d, want %d (a member lost)", code, exitLost)
		}
		runs[0].stdin.Close()
		if code := exitCode(t, runs[0].cmd.Wait()); code != exitLost {
			t.Errorf("the stopped member, continued: exit %d, want %d (its lease ended)", code, exitLost)
		}
	})
}
