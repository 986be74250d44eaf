package main

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

// unlock --ask asks the holder of a lock to release it: a sqllock run
// holder (or elect leader) sends its command the --on-revoke signal
// (SIGTERM by default) at its next renewal, and exits with the command's
// status; nothing is broken. A name nobody holds exits 1.
func TestUnlockAsk(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		for _, c := range []struct {
			verb       string
			flags      []string
			trap, said string
			code       int
			runSays    string
		}{
			{"run", nil, "TERM", "got-TERM", 7, "SIGTERM to its process group, SIGKILL after"},
			{"run", []string{"--on-revoke", "usr1"}, "USR1", "got-USR1", 7, "sending SIGUSR1"},
			{"elect", nil, "TERM", "got-TERM", 7, "SIGTERM to its process group, SIGKILL after"},
		} {
			args := append(append([]string{c.verb, "--ttl", "6s"}, c.flags...), "asked", "--", "sh", "-c",
				`trap 'echo got-`+c.trap+`; exit 7' `+c.trap+`; echo ready; while :; do sleep 0.05; done`)
			run := b.cmd(t, args...)
			out, err := run.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			run.Stderr = &stderr
			if err := run.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(out)
			if !sc.Scan() || sc.Text() != "ready" {
				t.Fatalf("the command did not start: %q", sc.Text())
			}
			said, code := b.unlock(t, "--ask", "--reason", "deploy v2", "asked")
			if code != 0 || !strings.Contains(said, `asked lock "asked"`) || !strings.Contains(said, "deploy v2") {
				t.Fatalf("unlock --ask: exit %d, printed %q; want 0 and the lock asked", code, said)
			}
			if !sc.Scan() || sc.Text() != c.said {
				t.Fatalf("the command did not get SIG%s: %q", c.trap, sc.Text())
			}
			if code := exitStatus(run.Wait()); code != c.code {
				t.Fatalf("%s: exit %d, want the command's %d\n%s", c.verb, code, c.code, stderr.String())
			}
			if s := stderr.String(); !strings.Contains(s, `release of lock "asked" requested (deploy v2)`) || !strings.Contains(s, c.runSays) {
				t.Fatalf("%s said %q; want the request, its reason and %q", c.verb, s, c.runSays)
			}
		}
		if _, code := b.unlock(t, "--ask", "asked"); code != exitFailure {
			t.Fatalf("unlock --ask of a free name: exit %d, want 1", code)
		}
		if _, code := b.unlock(t, "--ask", "--force", "asked"); code != exitUsage {
			t.Fatalf("unlock --ask --force: exit %d, want 64", code)
		}
	})
}
