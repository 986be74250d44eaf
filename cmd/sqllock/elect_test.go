package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// leaderOf runs `sqllock leader --json NAME` and returns what it printed
// and its exit status.
func leaderOf(t *testing.T, b backend, name string) (leaderJSON, int) {
	t.Helper()
	out, err := b.cmd(t, "leader", "--json", name).Output()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var j leaderJSON
	if err := json.Unmarshal(out, &j); err != nil {
		t.Fatalf("leader --json printed %q: %v", out, err)
	}
	return j, code
}

// elect runs its command while leader, with the term in SQLLOCK_TOKEN; the
// leader is readable by others meanwhile, and nobody leads after it ends.
func TestElectAndLeader(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		name := "elect-" + b.kind
		if j, code := leaderOf(t, b, name); code != exitNoLeader || j.Leader || j.Name != name {
			t.Fatalf("leader before any election: %+v, exit %d; want no leader, exit %d", j, code, exitNoLeader)
		}
		c := b.cmd(t, "elect", "--ttl", "60s", "--value", "alpha:1", name, "--", "sh", "-c", `echo "$SQLLOCK_TOKEN"; cat`)
		stdin, err := c.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		c.Stdout = &out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		var j leaderJSON
		if !waitFor(time.Minute, func() bool { j, _ = leaderOf(t, b, name); return j.Leader }) {
			t.Fatal("sqllock elect never became leader within a minute")
		}
		if j.Value != "alpha:1" || j.Term <= 0 || j.ExpiresInMS <= 0 || j.ExpiresInMS > 60_000 {
			t.Fatalf("leader --json: %+v", j)
		}
		stdin.Close()
		if err := c.Wait(); err != nil {
			t.Fatalf("elect: %v", err)
		}
		if got := strings.TrimSpace(out.String()); got != strconv.FormatInt(j.Term, 10) {
			t.Fatalf("SQLLOCK_TOKEN %q, want the term %d", got, j.Term)
		}
		if j, code := leaderOf(t, b, name); code != exitNoLeader || j.Leader {
			t.Fatalf("leader after elect ended: %+v, exit %d", j, code)
		}
	})
}

// A leader that loses its lease has its command stopped, and exits 76. The
// TTL is long enough that no renewal of a loaded machine comes too late:
// the lease is lost to the theft alone, found by the next renewal (every
// 5s).
func TestElectLost(t *testing.T) {
	needProc(t)
	each(t, func(t *testing.T, b backend) {
		name := "elost-" + b.kind + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		j := startRunning(t, b.cmd(t, "elect", "--ttl", "15s", "--grace", "5s", name, "--", "sh", "-c", "sleep 3600; echo survived"), name)
		if _, err := b.d.DB().ExecContext(ctxT(t), qualify(b, "UPDATE {sqllock_locks} SET owner = 'thief' WHERE name = '"+name+"'")); err != nil {
			t.Fatal(err)
		}
		if code := j.wait(); code != exitLost {
			t.Fatalf("exit %d, want 76\n%s", code, j.out.String())
		}
		if strings.Contains(j.out.String(), "survived") {
			t.Fatalf("the job went on after the loss:\n%s", j.out.String())
		}
	})
}

func TestElectFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"elect"},
		{"elect", "name"},
		{"elect", "-c", "true", "name", "--", "true"},
		{"elect", "--value", "nul\x00", "name", "--", "true"},
		{"leader"},
		{"leader", "a", "b"},
	} {
		var stdout, stderr bytes.Buffer
		if code := mainCode(t.Context(), args, &stdout, &stderr); code != exitUsage {
			t.Errorf("%q: exit %d, want %d\n%s", args, code, exitUsage, stderr.String())
		}
	}
}
