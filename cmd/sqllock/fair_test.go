package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sqllock/sqllock/internal/testutil"
)

// run --fair: the runs waiting for a lock or a semaphore are served in the
// order they started waiting. Each waiter is started once the ticket of
// the one before is in the database.
func TestRunFair(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		for _, c := range []struct {
			kind, table string
			flags       []string
		}{
			{"lock", "sqllock_tickets", []string{"--fair"}},
			{"semaphore", "sqllock_semaphore_tickets", []string{"--fair", "--max", "1"}},
		} {
			name := "fair-" + c.kind
			h := b.hold(t, name, c.flags...)
			last := h.waitToken(t)
			const waiters = 3
			type grant struct {
				i     int
				token int64
			}
			granted := make(chan grant, waiters)
			var ws []*holder
			for i := range waiters {
				w := b.hold(t, name, c.flags...)
				go func() {
					select {
					case tok := <-w.token:
						granted <- grant{i, tok}
					case <-w.done:
						// Ended without the lock: token 0 fails the test below.
						granted <- grant{i, 0}
					}
				}()
				testutil.Eventually(ctxT(t), t, fmt.Sprintf("%s waiter %d's ticket", c.kind, i),
					func() bool { return b.count(t, c.table, name) == i+1 })
				ws = append(ws, w)
			}
			h.stdin.Close()
			h.wait()
			for want := range waiters {
				g := <-granted
				if g.token == 0 {
					w := ws[g.i]
					code := w.wait()
					t.Fatalf("%s: waiter %d ended (exit %d) without the lock:\n%s", c.kind, g.i, code, w.stderr)
				}
				if g.i != want || g.token <= last {
					t.Fatalf("%s: granted to waiter %d (token %d), want waiter %d with a token above %d", c.kind, g.i, g.token, want, last)
				}
				last = g.token
				ws[g.i].stdin.Close()
				ws[g.i].wait()
			}
		}
		for _, args := range [][]string{
			{"run", "--fair", "--strategy", "optimistic", "fq", "true"},
			{"run", "--fair", "-s", "fq", "true"},
			{"run", "--fair", "--strategy", "pessimistic", "fq", "true"},
		} {
			out, err := b.cmd(t, args...).CombinedOutput()
			if code := exitStatus(err); code != exitUsage || !oneLineUsage(string(out)) || !strings.Contains(string(out), "--fair") {
				t.Errorf("sqllock %q: exit %d, want a one-line usage error (%d) naming --fair:\n%s", args, code, exitUsage, out)
			}
		}
	})
}
