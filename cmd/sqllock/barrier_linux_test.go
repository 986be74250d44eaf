package main

import (
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
		runs := startBarrierRuns(t, b, name, 2, "1") // the first is stopped
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
