package main

import (
	"strings"
	"testing"
)

// run --max N: up to N commands at once, the next is busy; a run giving
// another N counts against the holders'; semaphore names are apart from
// lock names.
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
		if code := exitStatus(err); code != exitNotAcquired || !strings.Contains(string(out), "all 2 permits held") {
			t.Fatalf("run with another --max beside the holders' 2: exit %d, want %d naming the holders:\n%s", code, exitNotAcquired, out)
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

// sqllock semaphore shows a run --max semaphore's limit, holders and free
// permits; --set-limit resizes it live: a raise admits a run at once, a
// lower limit none until fewer hold, whatever --max the runs give.
func TestSemaphoreSetLimit(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		h1 := b.hold(t, "pool", "--max", "2")
		h1.waitToken(t)
		h2 := b.hold(t, "pool", "--max", "2", "-n")
		h2.waitToken(t)
		show := func(want string, args ...string) {
			t.Helper()
			out, err := b.cmd(t, append([]string{"semaphore"}, args...)...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), want) {
				t.Fatalf("semaphore %q: %v, want %q:\n%s", args, err, want, out)
			}
		}
		show("pool: limit 2, 2 held, 0 free", "pool")
		if _, err := b.cmd(t, "run", "--max", "2", "-n", "pool", "true").CombinedOutput(); exitStatus(err) != exitNotAcquired {
			t.Fatalf("a third run under 2: exit %d, want %d", exitStatus(err), exitNotAcquired)
		}
		show("pool: limit 3, 2 held, 1 free", "--set-limit", "3", "pool")
		if out, err := b.cmd(t, "run", "--max", "2", "-n", "pool", "true").CombinedOutput(); err != nil {
			t.Fatalf("a third run after the raise: %v\n%s", err, out)
		}
		show("pool: limit 1, 2 held, 0 free", "--set-limit", "1", "pool")
		h1.stdin.Close()
		h1.wait()
		if _, err := b.cmd(t, "run", "--max", "5", "-n", "pool", "true").CombinedOutput(); exitStatus(err) != exitNotAcquired {
			t.Fatalf("a run with one holder of the set 1: exit %d, want %d", exitStatus(err), exitNotAcquired)
		}
		show("pool: limit 1, 1 held, 0 free", "pool")
		for _, args := range [][]string{
			{"semaphore"},
			{"semaphore", "--set-limit", "-1", "pool"},
			{"semaphore", "a", "b"},
		} {
			out, err := b.cmd(t, args...).CombinedOutput()
			if code := exitStatus(err); code != exitUsage || !oneLineUsage(string(out)) {
				t.Errorf("sqllock %q: exit %d, want a one-line usage error (%d):\n%s", args, code, exitUsage, out)
			}
		}
	})
}
