package main

import (
	"testing"
)

// --shared holders of the read/write lock run side by side; --exclusive
// and a plain run (the table lock) are refused beside them, and a
// --shared run beside an --exclusive holder.
func TestRunReadWriteLock(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		r1 := b.hold(t, "rw", "-s")
		t1 := r1.waitToken(t)
		r2 := b.hold(t, "rw", "--shared", "-n")
		if t2 := r2.waitToken(t); t2 <= t1 {
			t.Fatalf("second reader's token %d, want > %d", t2, t1)
		}
		for _, flags := range [][]string{{"--exclusive"}, {}} {
			args := append(append([]string{"run", "-n"}, flags...), "rw", "true")
			if out, err := b.cmd(t, args...).CombinedOutput(); exitStatus(err) != exitNotAcquired {
				t.Fatalf("sqllock %q beside readers: %v\n%s", args, err, out)
			}
		}
		r1.stdin.Close()
		r2.stdin.Close()
		<-r1.done
		<-r2.done
		w := b.hold(t, "rw", "--exclusive", "-n")
		w.waitToken(t)
		if out, err := b.cmd(t, "run", "-n", "-s", "rw", "true").CombinedOutput(); exitStatus(err) != exitNotAcquired {
			t.Fatalf("reader beside a writer: %v\n%s", err, out)
		}
		w.stdin.Close()
		<-w.done
		if out, err := b.cmd(t, "run", "-n", "-s", "rw", "true").CombinedOutput(); err != nil {
			t.Fatalf("reader after the writer: %v\n%s", err, out)
		}
	})
}
