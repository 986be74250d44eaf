package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// runToken runs `sqllock run flags NAME` with a command that prints its
// token, and returns the token and run's exit status.
func (b backend) runToken(t *testing.T, name string, flags ...string) (int64, int) {
	t.Helper()
	args := append(append([]string{"run"}, flags...), name, "--", "sh", "-c", `echo "$SQLLOCK_TOKEN"`)
	out, err := b.cmd(t, args...).Output()
	code := exitStatus(err)
	if code != 0 {
		return 0, code
	}
	tok, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatalf("run printed %q, want its token", out)
	}
	return tok, code
}

// unlock runs `sqllock unlock args...` with standard input not a terminal,
// and returns its standard output and exit status.
func (b backend) unlock(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, _, code := b.unlockStderr(t, args...)
	return out, code
}

// unlockStderr is unlock, returning its standard error too.
func (b backend) unlockStderr(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	c := b.cmd(t, append([]string{"unlock"}, args...)...)
	var errb bytes.Buffer
	c.Stderr = &errb
	out, err := c.Output()
	if errb.Len() > 0 {
		t.Logf("unlock %v: %s", args, errb.String())
	}
	return string(out), errb.String(), exitStatus(err)
}

// A mistaken --min-hold 1h leaves the name taken after its job ended;
// unlock --force frees it, and the next run's token is larger; --token of
// another lease breaks nothing. Without a terminal unlock needs --force; a
// name nobody holds exits 1.
func TestUnlockMinHold(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		first, code := b.runToken(t, "nightly", "--min-hold", "1h")
		if code != 0 {
			t.Fatalf("run --min-hold 1h: exit %d", code)
		}
		if _, code := b.runToken(t, "nightly", "-n"); code != exitNotAcquired {
			t.Fatalf("run -n within the minimum hold: exit %d, want 75", code)
		}
		if _, code := b.unlock(t, "nightly"); code != exitUsage {
			t.Fatalf("unlock without a terminal or --force: exit %d, want 64", code)
		}
		wrong := strconv.FormatInt(first+1, 10)
		if _, note, code := b.unlockStderr(t, "--force", "--token", wrong, "nightly"); code != exitFailure || !strings.Contains(note, "nothing was broken") {
			t.Fatalf("unlock --token %s of token %d's lease: exit %d, said %q; want 1 and nothing broken", wrong, first, code, note)
		}
		if _, code := b.runToken(t, "nightly", "-n"); code != exitNotAcquired {
			t.Fatalf("run -n after an unlock of another token: exit %d, want 75 (the lease kept)", code)
		}
		out, code := b.unlock(t, "--force", "--token", strconv.FormatInt(first, 10), "nightly")
		if code != 0 || !strings.Contains(out, "--min-hold") || !strings.Contains(out, "token "+strconv.FormatInt(first, 10)) {
			t.Fatalf("unlock --force: exit %d, printed %q; want 0 and the broken lease of token %d", code, out, first)
		}
		if _, code := b.unlock(t, "--force", "nightly"); code != exitFailure {
			t.Fatalf("unlock of a free name: exit %d, want 1", code)
		}
		next, code := b.runToken(t, "nightly", "-n")
		if code != 0 || next <= first {
			t.Fatalf("run after unlock: exit %d, token %d; want 0 and a token > %d", code, next, first)
		}
		if _, code := b.unlock(t, "--force", ""); code != exitUsage {
			t.Fatalf("unlock of an empty name: exit %d, want 64", code)
		}
	})
}

// A running holder whose lock is broken learns of it at its next renewal:
// its command is stopped as for any lost lock, and run exits 76.
// Its TTL is long enough that a busy machine (load 11, through
// PgBouncer) renews it in time: a lapse of its own would be a lost lock
// before the break, and the test would see no lease to break.
func TestUnlockRunningHolder(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		h := b.hold(t, "busy", "--ttl", "15s", "--grace", "5s")
		tok := h.waitToken(t)
		out, note, code := b.unlockStderr(t, "-f", "busy")
		if !strings.Contains(note, "may run until then") || !strings.Contains(note, "--grace") {
			t.Errorf("unlock of a running holder did not say how long it may still run: %q", note)
		}
		if code != 0 || !strings.Contains(out, "token "+strconv.FormatInt(tok, 10)) {
			t.Fatalf("unlock -f: exit %d, printed %q; want 0 and the lease of token %d", code, out, tok)
		}
		if code := h.wait(); code != exitLost {
			t.Fatalf("broken holder: exit %d, want 76", code)
		}
		if next, code := b.runToken(t, "busy", "-n"); code != 0 || next <= tok {
			t.Fatalf("run after unlock: exit %d, token %d; want 0 and a token > %d", code, next, tok)
		}
	})
}
