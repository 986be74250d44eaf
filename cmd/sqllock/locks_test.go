package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// locksJSON runs `sqllock locks --json` and returns its rows.
func (b backend) locksJSON(t *testing.T) []lockRow {
	t.Helper()
	out, err := b.cmd(t, "locks", "--json").Output()
	if err != nil {
		t.Fatalf("locks --json: %v", err)
	}
	var rows []lockRow
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	return rows
}

// A lock kept by a finished run's --min-hold is listed as such, never as
// expired, and a refused run says whose minimum hold it is and until when.
func TestLocksMinHold(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		if out, err := b.cmd(t, "run", "--min-hold", "1h", "nightly", "--", "true").CombinedOutput(); err != nil {
			t.Fatalf("run: %v\n%s", err, out)
		}
		rows := b.locksJSON(t)
		if len(rows) != 1 || rows[0].Name != "nightly" || rows[0].Holds != 0 || rows[0].MinHoldUntil == nil {
			t.Fatalf("locks --json: %+v, want nightly with no holds and min_hold_until", rows)
		}
		out, err := b.cmd(t, "locks").Output()
		if err != nil || !strings.Contains(string(out), "min-hold 59m") || strings.Contains(string(out), "expired") {
			t.Fatalf("locks: %v, want nightly as min-hold 59m…, not expired:\n%s", err, out)
		}
		out, err = b.cmd(t, "run", "-n", "nightly", "--", "true").CombinedOutput()
		if code := exitStatus(err); code != exitNotAcquired {
			t.Fatalf("run -n: exit %d, want %d\n%s", code, exitNotAcquired, out)
		}
		if msg := string(out); !strings.Contains(msg, "minimum hold (--min-hold) of a finished run") || !strings.Contains(msg, " until ") || !strings.Contains(msg, rows[0].Owner) {
			t.Fatalf("run -n: %q, want the finished run's minimum hold, its owner %q and its end", msg, rows[0].Owner)
		}
	})
}

// Names with newlines or other control characters are quoted in the table,
// which keeps one line per lock.
func TestLocksEscapesNames(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		if out, err := b.cmd(t, "run", "--min-hold", "1h", "a\nb\tc", "--", "true").CombinedOutput(); err != nil {
			t.Fatalf("run: %v\n%s", err, out)
		}
		out, err := b.cmd(t, "locks").Output()
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[1], `"a\nb\tc"`) {
			t.Fatalf("locks: want a header and one row starting with the quoted name:\n%s", out)
		}
	})
}
