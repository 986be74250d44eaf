package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock/ledger"
)

// TestRunOverlap runs a job whose command outlasts its period: the
// occurrence due meanwhile is skipped, said and recorded (--overlap skip,
// the default); then one run with --overlap replace stops the first
// command as a lost lock (exit 76) and runs its own.
func TestRunOverlap(t *testing.T) {
	needProc(t)
	eachLedger(t, func(t *testing.T, b backend) {
		name := "overlap-" + b.kind
		every := []string{"run", "--every", "2s", "--ttl", "3s"}
		first := startRunning(t, b.cmd(t, append(every, name, "--", "sh", "-c", "sleep 3600; :")...), name)
		// Until the next occurrence is due, a run finds the first one
		// running; then it skips the next one, and says so.
		if !waitFor(time.Minute, func() bool {
			out, err := b.cmd(t, append(every, name, "--", "echo", "ran")...).CombinedOutput()
			if got := exitOf(t, err); got != 0 || strings.Contains(string(out), "ran") {
				t.Fatalf("a run beside the first: exit %d\n%s", got, out)
			}
			return strings.Contains(string(out), "skipped: another occurrence of the job was running (--overlap skip")
		}) {
			t.Fatal("no run skipped an occurrence within a minute")
		}
		// --overlap replace: the next occurrence breaks the first's lease
		// and runs; the first's command is stopped as a lost lock.
		if !waitFor(time.Minute, func() bool {
			out, err := b.cmd(t, append(every, "--overlap", "replace", name, "--", "echo", "replacer ran")...).CombinedOutput()
			if got := exitOf(t, err); got != 0 {
				t.Fatalf("a replacing run: exit %d\n%s", got, out)
			}
			return strings.Contains(string(out), "replacer ran")
		}) {
			t.Fatal("no replacing run ran within a minute")
		}
		if code := first.wait(); code != exitLost {
			t.Fatalf("the replaced run exited %d, want %d (a lost lock)\n%s", code, exitLost, first.out.String())
		}
		states := map[string]int{}
		for _, r := range b.runsJSON(t, name).Runs {
			states[r.State]++
		}
		if states["replaced"] != 1 || states["skipped"] == 0 || states["succeeded"] != 1 {
			t.Fatalf("recorded states %v: want 1 replaced, 1 succeeded, skipped ones", states)
		}
		for _, bad := range [][]string{{"--overlap", "forbid", "--every", "1m"}, {"--overlap", "skip", "--occurrence", "k"}, {"--overlap", "skip"}} {
			out, err := b.cmd(t, append(append([]string{"run"}, bad...), name, "--", "true")...).CombinedOutput()
			if got := exitOf(t, err); got != exitUsage || !strings.Contains(string(out), "overlap") {
				t.Errorf("run %v: exit %d, want %d naming --overlap\n%s", bad, got, exitUsage, out)
			}
		}
	})
}

// TestRunCatchUp runs a job once, lets occurrences pass unclaimed, and
// runs it again with --catch-up all: each occurrence missed by then runs
// once, said on stderr, and none that ran is missed.
func TestRunCatchUp(t *testing.T) {
	eachLedger(t, func(t *testing.T, b backend) {
		name := "catchup-" + b.kind
		every := []string{"run", "--every", "1s", "--catch-up", "all", name, "--", "sh", "-c", `echo "ran $SQLLOCK_OCCURRENCE"`}
		if out, err := b.cmd(t, every...).CombinedOutput(); exitOf(t, err) != 0 {
			t.Fatalf("the first run: %v\n%s", err, out)
		}
		l, err := ledger.New(b.d, ledger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var missed []ledger.MissedRun
		if !waitFor(time.Minute, func() bool {
			if missed, err = l.Missed(ctxT(t), name, 0); err != nil {
				t.Fatal(err)
			}
			return len(missed) >= 2
		}) {
			t.Fatal("no two occurrences missed within a minute")
		}
		out, err := b.cmd(t, every...).CombinedOutput()
		if exitOf(t, err) != 0 {
			t.Fatalf("the catch-up run: %v\n%s", err, out)
		}
		for _, m := range missed {
			if !strings.Contains(string(out), "caught up the missed occurrence "+m.Occurrence) || !strings.Contains(string(out), "ran "+m.Occurrence) {
				t.Errorf("%s, missed before, not caught up:\n%s", m.Occurrence, out)
			}
		}
		after, err := l.Missed(ctxT(t), name, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range after {
			if strings.Contains(string(out), "ran "+m.Occurrence) {
				t.Errorf("%s is caught up and missed", m.Occurrence)
			}
		}
		for _, bad := range [][]string{{"--catch-up", "some", "--every", "1m"}, {"--catch-up-window", "1h", "--every", "1m"}, {"--catch-up", "all", "--occurrence", "k"}} {
			out, err := b.cmd(t, append(append([]string{"run"}, bad...), name, "--", "true")...).CombinedOutput()
			if got := exitOf(t, err); got != exitUsage || !strings.Contains(string(out), "catch-up") {
				t.Errorf("run %v: exit %d, want %d naming --catch-up\n%s", bad, got, exitUsage, out)
			}
		}
	})
}

// TestRunsBackfill backfills a range of a job's recorded schedule: each
// occurrence runs once; a second backfill runs none.
func TestRunsBackfill(t *testing.T) {
	eachLedger(t, func(t *testing.T, b backend) {
		name := "backfill-" + b.kind
		if out, err := b.cmd(t, "run", "--every", "1s", name, "--", "true").CombinedOutput(); exitOf(t, err) != 0 {
			t.Fatalf("the first run: %v\n%s", err, out)
		}
		to := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
		from := to.Add(-4 * time.Second)
		fill := []string{"runs", "backfill", name, "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--", "sh", "-c", `echo "ran $SQLLOCK_OCCURRENCE"`}
		out, err := b.cmd(t, fill...).CombinedOutput()
		if exitOf(t, err) != 0 || strings.Count(string(out), "ran 20") != 5 || !strings.Contains(string(out), "5 occurrences") {
			t.Fatalf("backfill: %v\n%s", err, out)
		}
		out, err = b.cmd(t, fill...).CombinedOutput()
		if exitOf(t, err) != 0 || strings.Contains(string(out), "ran 20") {
			t.Fatalf("a second backfill: %v\n%s", err, out)
		}
		for _, bad := range [][]string{
			{"runs", "backfill", name, "--from", "yesterday", "--to", to.Format(time.RFC3339), "--", "true"},
			{"runs", "backfill", name, "--from", to.Format(time.RFC3339), "--to", from.Format(time.RFC3339), "--", "true"},
			{"runs", "backfill", name, "--from", from.Format(time.RFC3339), "--to", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "--", "true"},
			{"runs", "--from", from.Format(time.RFC3339), name},
		} {
			out, err := b.cmd(t, bad...).CombinedOutput()
			if got := exitOf(t, err); got != exitUsage {
				t.Errorf("%v: exit %d, want %d\n%s", bad, got, exitUsage, out)
			}
		}
		if out, err := b.cmd(t, "runs", "backfill", "nosuch", "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--", "true").CombinedOutput(); exitOf(t, err) != exitFailure {
			t.Errorf("backfill of an unknown job: %v\n%s", err, out)
		}
	})
}

// TestRunsBackfillRequested asks the replicas for a backfill (runs
// backfill without a command): runs shows it, a second request is
// refused while it is pending, and the job's next run runs each
// occurrence of the range once, beside its own.
func TestRunsBackfillRequested(t *testing.T) {
	eachLedger(t, func(t *testing.T, b backend) {
		name := "asked-" + b.kind
		if out, err := b.cmd(t, "run", "--every", "1s", name, "--", "true").CombinedOutput(); exitOf(t, err) != 0 {
			t.Fatalf("the first run: %v\n%s", err, out)
		}
		to := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
		from := to.Add(-4 * time.Second)
		ask := []string{"runs", "backfill", name, "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339)}
		out, err := b.cmd(t, ask...).CombinedOutput()
		if exitOf(t, err) != 0 || !strings.Contains(string(out), "backfill 5 occurrences") {
			t.Fatalf("the request: %v\n%s", err, out)
		}
		if out, err := b.cmd(t, ask...).CombinedOutput(); exitOf(t, err) != exitFailure || !strings.Contains(string(out), "pending") {
			t.Fatalf("a second request: %v\n%s", err, out)
		}
		out, err = b.cmd(t, "runs", "--json", name).Output()
		if err != nil || !strings.Contains(string(out), `"backfill": {`) || !strings.Contains(string(out), `"from": "`+from.Format(time.RFC3339)) {
			t.Fatalf("runs --json: %v\n%s", err, out)
		}
		out, err = b.cmd(t, "run", "--every", "1s", name, "--", "sh", "-c", `echo "ran $SQLLOCK_OCCURRENCE"`).CombinedOutput()
		if exitOf(t, err) != 0 || !strings.Contains(string(out), "ran the backfill") {
			t.Fatalf("the run after the request: %v\n%s", err, out)
		}
		for at := from; !at.After(to); at = at.Add(time.Second) {
			if n := strings.Count(string(out), "ran "+at.Format(ledger.TimeFormat)+"\n"); n != 1 {
				t.Errorf("occurrence %s ran %d times\n%s", at.Format(ledger.TimeFormat), n, out)
			}
		}
		if out, err := b.cmd(t, "runs", "--json", name).Output(); err != nil || strings.Contains(string(out), `"backfill"`) {
			t.Fatalf("runs --json after the backfill: %v\n%s", err, out)
		}
		if out, err := b.cmd(t, "runs", "backfill", "nosuch", "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339)).CombinedOutput(); exitOf(t, err) != exitFailure {
			t.Errorf("a request for an unknown job: %v\n%s", err, out)
		}
	})
}
