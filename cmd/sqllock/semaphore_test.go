package main

import (
	"strings"
	"testing"
)

// run --max N: up to N commands at once, the next is busy; every run of a
// name gives the same N; semaphore names are apart from lock names.
func TestRunMax(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		lock := b.hold(t, "sem", "--ttl", "60s")
		lock.waitToken(t)
		h1 := b.hold(t, "sem", "--max", "2")
		t1 := h1.waitToken(t)
		h2 := b.hold(t, "sem", "--max", "2", "-n")
		if t2 := h2.waitToken(t); t2 <= t1 {
			t.Fatalf("second permit's token %d, want > %d", t2, t1)
		}
		// Operators see both holders.
		out, err := b.cmd(t, "locks", "--json").Output()
		if err != nil || strings.Count(string(out), `"strategy": "semaphore"`) != 2 {
			t.Fatalf("locks --json: %v, want two semaphore holders:\n%s", err, out)
		}
		out, err = b.cmd(t, "run", "--max", "2", "-n", "sem", "true").CombinedOutput()
		if code := exitStatus(err); code != exitNotAcquired || !strings.Contains(string(out), "all 2 permits held") {
			t.Fatalf("third run: exit %d, want %d naming the holders:\n%s", code, exitNotAcquired, out)
		}
		out, err = b.cmd(t, "run", "--max", "3", "-n", "sem", "true").CombinedOutput()
		if code := exitStatus(err); code == 0 || !strings.Contains(string(out), "limit") {
			t.Fatalf("run with another --max: exit %d, want a failure naming the limit:\n%s", code, out)
		}
		h1.stdin.Close()
		h1.wait()
		if out, err := b.cmd(t, "run", "--max", "2", "-n", "sem", "true").CombinedOutput(); err != nil {
			t.Fatalf("run after a holder ended: %v\n%s", err, out)
		}
		for _, args := range [][]string{
			{"run", "--max", "-1", "sem", "true"},
			{"run", "--max", "2", "--strategy", "optimistic", "sem", "true"},
			{"run", "--max", "2", "-s", "sem", "true"},
		} {
			out, err := b.cmd(t, args...).CombinedOutput()
			if code := exitStatus(err); code != exitUsage || !oneLineUsage(string(out)) {
				t.Errorf("sqllock %q: exit %d, want a one-line usage error (%d):\n%s", args, code, exitUsage, out)
			}
		}
	})
}
