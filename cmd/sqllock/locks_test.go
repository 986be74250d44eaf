package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
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
		var lines []string // without the footnotes
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if !strings.HasPrefix(l, "(") {
				lines = append(lines, l)
			}
		}
		if len(lines) != 2 || !strings.Contains(lines[1], ` "a\nb\tc" `) {
			t.Fatalf("locks: want a header and one row holding the quoted name:\n%s", out)
		}
	})
}

// Read/write locks, semaphores and elections are listed with their kind:
// a reader as shared, a semaphore's holders as N of its limit, a leader
// with the value it proclaimed.
func TestLocksEveryKind(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		b.hold(t, "rw", "--shared").waitToken(t)
		b.hold(t, "sem", "--max", "3").waitToken(t)
		c := b.cmd(t, "elect", "--ttl", "60s", "--value", "alpha:1", "boss", "--", "sh", "-c", "cat")
		stdin, err := c.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stdin.Close(); _ = c.Wait() })
		if !waitFor(time.Minute, func() bool { j, _ := leaderOf(t, b, "boss"); return j.Leader }) {
			t.Fatal("sqllock elect never became leader within a minute")
		}
		kinds := map[string]lockRow{}
		for _, r := range b.locksJSON(t) {
			kinds[r.Strategy] = r
		}
		if r := kinds["rwlock"]; r.Name != "rw" || r.Mode != "shared" {
			t.Errorf("read lock: %+v, want rw, shared", r)
		}
		if r := kinds["semaphore"]; r.Name != "sem" || r.Limit != 3 {
			t.Errorf("semaphore: %+v, want sem with limit 3", r)
		}
		if r := kinds["election"]; r.Name != "boss" || r.Value == nil || *r.Value != "alpha:1" {
			t.Errorf("election: %+v, want boss with value alpha:1", r)
		}
		if _, ok := kinds["table"]; ok {
			t.Errorf("the election is listed as a table lock too: %+v", kinds["table"])
		}
		out, err := b.cmd(t, "locks").Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"rwlock     shared", " 1 of 3 ", " = alpha:1 "} {
			if !strings.Contains(string(out), want) {
				t.Errorf("locks: no %q in\n%s", want, out)
			}
		}
		if !strings.HasPrefix(string(out), "KIND ") {
			t.Errorf("locks: want the KIND column first:\n%s", out)
		}
	})
}

// A PostgreSQL pessimistic lock held shared is listed as shared, one held
// exclusively as exclusive, also once their keep-alive pings (every
// second) replaced the locking statement as their sessions' last.
func TestLocksPessimisticMode(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		if b.kind != "postgres" {
			return
		}
		b.hold(t, "shr", "--strategy", "pessimistic", "--shared").waitToken(t)
		b.hold(t, "exc", "--strategy", "pessimistic").waitToken(t)
		// Both sessions of this test's row-lock table have pinged.
		q := `SELECT count(DISTINCT a.pid) FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
	AND l.locktype = 'relation' AND l.relation = $1::regclass WHERE a.query LIKE '-- sqllock_rowlocks %'`
		pinged := func() bool {
			var n int
			err := b.d.DB().QueryRowContext(ctxT(t), q, `"`+b.ns+`".sqllock_rowlocks`).Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			return n == 2
		}
		if !waitFor(time.Minute, pinged) {
			t.Fatal("the holders' keep-alives never ran")
		}
		modes := map[string]string{}
		for _, r := range b.locksJSON(t) {
			if r.Strategy == "pessimistic" {
				modes[r.Name] = r.Mode
			}
		}
		if modes["shr"] != "shared" || modes["exc"] != "exclusive" {
			t.Fatalf("pessimistic modes after a keep-alive %v, want shr shared and exc exclusive", modes)
		}
		out, err := b.cmd(t, "locks").Output()
		if err != nil || !strings.Contains(string(out), "its mode read from its session's last statement") {
			t.Fatalf("locks: %v, want the footnote on pessimistic modes:\n%s", err, out)
		}
	})
}

// A run waiting for a table lock (`run -w`) is counted in the lock's
// WAITERS by its ticket: on every database for a fair lock, and on
// PostgreSQL and MySQL, whose unfair waiters take tickets to be woken, for
// a plain one.
func TestLocksCountsWaiters(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		var flags []string
		if b.kind == "sqlite" {
			flags = []string{"--fair"}
		}
		h := b.hold(t, "queued", flags...)
		h.waitToken(t)
		w := b.hold(t, "queued", append(flags, "-w", "50")...)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			rows := b.locksJSON(t)
			if len(rows) == 1 && rows[0].Waiters != nil && *rows[0].Waiters == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("locks --json never counted the waiting run: %+v", rows)
			}
		}
		h.stdin.Close()
		w.waitToken(t)
		w.stdin.Close()
	})
}

// run --value keeps its text on the lock while the command runs: locks
// shows it after the owner, as a table lock (not an election); --value
// with a strategy that keeps none is a usage error.
func TestLocksRunValue(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		h := b.hold(t, "migrate", "--value", "host-a, schema v42")
		tok := h.waitToken(t)
		rows := b.locksJSON(t)
		if len(rows) != 1 || rows[0].Strategy != "table" || rows[0].Token != tok || rows[0].Value == nil || *rows[0].Value != "host-a, schema v42" {
			t.Fatalf("locks --json: %+v, want migrate as a table lock with token %d and its value", rows, tok)
		}
		out, err := b.cmd(t, "locks").Output()
		if err != nil || !strings.Contains(string(out), " = host-a, schema v42") {
			t.Fatalf("locks: %v, want the value after the owner:\n%s", err, out)
		}
		out, err = b.cmd(t, "run", "--max", "2", "--value", "x", "sem", "--", "true").CombinedOutput()
		if code := exitStatus(err); code != exitUsage || !strings.Contains(string(out), "--value needs --strategy table") {
			t.Fatalf("run --max --value: exit %d, want %d and why:\n%s", code, exitUsage, out)
		}
	})
}
