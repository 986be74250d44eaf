package main

import (
	"bytes"
	"strings"
	"testing"
)

// sqllock latch creates a latch, counts it down from other processes,
// prints its count, wakes a wait once it is 0, times a wait out with -E's
// status, deletes it, and says so when a name has no latch or another
// count.
func TestLatchCommand(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		name := "latch-" + b.kind
		run := func(want int, args ...string) string {
			t.Helper()
			var out, stderr bytes.Buffer
			c := b.cmd(t, append([]string{"latch"}, args...)...)
			c.Stdout, c.Stderr = &out, &stderr
			if code := exitCode(t, c.Run()); code != want {
				t.Fatalf("latch %q: exit %d, want %d; %s", args, code, want, stderr.String())
			}
			return strings.TrimSpace(out.String() + stderr.String())
		}
		run(0, "create", name, "2")
		run(0, "create", name, "2") // the same count again: nothing to do
		if out := run(1, "create", name, "3"); !strings.Contains(out, "created with 2, not 3") {
			t.Errorf("create with another count: %q", out)
		}
		if out := run(0, name); out != "2" {
			t.Errorf("count: %q, want 2", out)
		}
		if out := run(75, "wait", "-w", "0.2", name); !strings.Contains(out, "2 left") {
			t.Errorf("wait -w: %q, want the count left", out)
		}
		if out := run(3, "wait", "-w", "0.2", "-E", "3", name); !strings.Contains(out, "did not reach 0") {
			t.Errorf("wait -w -E 3: %q", out)
		}
		wait := b.cmd(t, "latch", "wait", name)
		var waitErr bytes.Buffer
		wait.Stderr = &waitErr
		if err := wait.Start(); err != nil {
			t.Fatal(err)
		}
		if out := run(0, "count-down", name); out != "1" {
			t.Errorf("count-down: %q, want 1", out)
		}
		if out := run(0, "count-down", name); out != "0" {
			t.Errorf("count-down: %q, want 0", out)
		}
		if code := exitCode(t, wait.Wait()); code != 0 {
			t.Errorf("wait: exit %d; %s", code, waitErr.String())
		}
		if out := run(0, "count-down", name); out != "0" {
			t.Errorf("count-down at 0: %q, want 0", out)
		}
		run(0, "wait", name) // at 0: at once
		run(0, "delete", name)
		for _, args := range [][]string{{"delete", name}, {name}, {"count-down", name}, {"wait", name}} {
			if out := run(1, args...); !strings.Contains(out, `no latch "`+name+`"`) {
				t.Errorf("latch %q of a deleted latch: %q", args, out)
			}
		}
		for _, args := range [][]string{{}, {"create", name}, {"create", name, "0"}, {"create", name, "x"}, {"frob", name}, {"-w", "1", name}, {"wait", "-w", "-1", name}} {
			run(64, args...)
		}
	})
}
