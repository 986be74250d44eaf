package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/ledger"
)

// eachLedger runs fn against PostgreSQL, MariaDB and SQLite (without the
// PgBouncer variants of each), in parallel.
func eachLedger(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Parallel()
	for _, m := range backends {
		if strings.Contains(m.kind, "pgbouncer") {
			continue
		}
		t.Run(m.kind, func(t *testing.T) {
			t.Parallel()
			b := m.make(t)
			if err := sqllock.Migrate(ctxT(t), b.d); err != nil {
				t.Fatal(err)
			}
			fn(t, b)
		})
	}
}

// daily returns the flags of an occurrence a day long whose time is now,
// to the second: --every 24h --phase (now's time of day). Replicas started
// within hours of now agree on it, whatever the clocks' skew.
func daily() []string {
	now := time.Now().UTC()
	phase := now.Sub(now.Truncate(24 * time.Hour)).Truncate(time.Second)
	return []string{"--every", "24h", "--phase", phase.String()}
}

// runsJSON runs `sqllock runs --json [args]` and returns what it printed.
func (b backend) runsJSON(t *testing.T, args ...string) runsView {
	t.Helper()
	out, err := b.cmd(t, append([]string{"runs", "--json"}, args...)...).Output()
	if err != nil {
		t.Fatalf("runs --json %v: %v\n%s", args, err, out)
	}
	var v runsView
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	return v
}

// startHolding starts `run --ttl ttl --occurrence k nightly` whose job
// prints "started" and then sleeps for an hour, and returns once the job
// has started, with the scanner of the run's standard output.
func (b backend) startHolding(t *testing.T, ttl string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	c := b.cmd(t, "run", "--ttl", ttl, "--occurrence", "k", "nightly", "--", "sh", "-c", `echo started; sleep 3600; :`)
	stdout, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "started" {
		t.Fatalf("the first run's job did not start: %q", sc.Text())
	}
	return c, sc
}

// Five replicas start the same `run --every` line at once: the job runs
// exactly once, every replica exits 0, and the others say (with -v) that
// the occurrence was done or running elsewhere. runs lists the one
// attempt, succeeded.
func TestRunEveryOnce(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		runs := filepath.Join(t.TempDir(), "runs")
		every := daily()
		args := append(append([]string{"run", "-v"}, every...), "report", "--", "sh", "-c", `echo "$SQLLOCK_OCCURRENCE $SQLLOCK_ATTEMPT" >> "$RUNS"`)
		cmds := make([]*exec.Cmd, 5)
		outs := make([]*bytes.Buffer, 5)
		for i := range cmds {
			cmds[i] = b.cmd(t, args...)
			cmds[i].Env = append(cmds[i].Env, "RUNS="+runs)
			outs[i] = new(bytes.Buffer)
			cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		skipped := 0
		for i, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Errorf("replica %d: %v\n%s", i, err, outs[i])
			}
			if strings.Contains(outs[i].String(), "not run here") {
				skipped++
			}
		}
		data, err := os.ReadFile(runs)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) != 1 || skipped != 4 {
			t.Fatalf("the job ran %d times (%q), %d replicas said they skipped it; want 1 and 4", len(lines), lines, skipped)
		}
		v := b.runsJSON(t, "report")
		if len(v.Runs) != 1 || v.Runs[0].State != "succeeded" || v.Runs[0].Attempt != 1 || v.Runs[0].Token <= 0 || v.Runs[0].FinishedAt == nil {
			t.Fatalf("runs: %+v, want one succeeded attempt", v.Runs)
		}
		if occ, _, _ := strings.Cut(lines[0], " "); occ != v.Runs[0].Occurrence {
			t.Fatalf("the job saw occurrence %q, runs shows %q", occ, v.Runs[0].Occurrence)
		}
		// A later replica of the same occurrence: not run, 0; 75 with -E.
		out, err := b.cmd(t, append(append([]string{"run", "-E", "75"}, every...), "report", "--", "false")...).CombinedOutput()
		if code := exitStatus(err); code != 75 || len(out) != 0 {
			t.Fatalf("a late replica with -E 75: exit %d, want 75 and nothing printed: %s", code, out)
		}
	})
}

// A failing job is recorded failed with its status and run again with
// --retries; a job that fails once and then succeeds exits 0 on its second
// attempt. With no attempt left, later runs of the occurrence run nothing.
func TestRunOccurrenceRetries(t *testing.T) {
	eachLedger(t, func(t *testing.T, b backend) {
		out, err := b.cmd(t, "run", "--occurrence", "2026-11-26", "--retries", "1", "--retry-backoff", "0.1", "broken", "--", "sh", "-c", "exit 3").CombinedOutput()
		if code := exitStatus(err); code != 3 {
			t.Fatalf("failing job: exit %d, want 3\n%s", code, out)
		}
		v := b.runsJSON(t, "broken")
		if len(v.Runs) != 2 {
			t.Fatalf("runs: %+v, want two attempts", v.Runs)
		}
		for i, r := range v.Runs {
			if r.State != "failed" || r.Attempt != 2-i || !strings.Contains(r.Error, "status 3") || r.Occurrence != "2026-11-26" {
				t.Errorf("attempt %+v, want failed with status 3, newest first", r)
			}
		}
		if v.Runs[0].Token <= v.Runs[1].Token {
			t.Errorf("tokens %d then %d, want growing", v.Runs[1].Token, v.Runs[0].Token)
		}
		out, err = b.cmd(t, "run", "-v", "-E", "75", "--occurrence", "2026-11-26", "--retries", "1", "broken", "--", "true").CombinedOutput()
		if code := exitStatus(err); code != 75 || !strings.Contains(string(out), "no attempt is left") {
			t.Fatalf("a run with no attempt left: exit %d, want 75 and why:\n%s", code, out)
		}

		marker := filepath.Join(t.TempDir(), "failed-once")
		script := `if [ -e "$MARKER" ]; then exit 0; fi; touch "$MARKER"; exit 4`
		c := b.cmd(t, "run", "--occurrence", "2026-11-26", "--retries", "2", "flaky", "--", "sh", "-c", script)
		c.Env = append(c.Env, "MARKER="+marker)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("flaky job: %v\n%s", err, out)
		}
		v = b.runsJSON(t, "flaky")
		if len(v.Runs) != 2 || v.Runs[0].State != "succeeded" || v.Runs[1].State != "failed" || !strings.Contains(v.Runs[1].Error, "status 4") {
			t.Fatalf("runs: %+v, want a failed attempt, then a succeeded one", v.Runs)
		}
	})
}

// A runner killed with SIGKILL mid-run leaves its attempt running; once
// its lease ended the next run of the occurrence takes it over: the dead
// attempt is recorded abandoned, the new one runs with a larger token.
// Until then, runs of the occurrence say it runs elsewhere.
func TestRunOccurrenceTakeover(t *testing.T) {
	eachLedger(t, func(t *testing.T, b backend) {
		// A lease long enough to outlive a stall of a loaded machine
		// before the job starts (1 s lapsed there), short enough to wait out.
		first, sc := b.startHolding(t, "4s")
		if err := first.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Fatal(err) // done: it lost its lease already, on a starved machine
		}
		for sc.Scan() { // until the supervisor has ended the job
		}
		_ = first.Wait()
		v := b.runsJSON(t, "nightly")
		if len(v.Runs) != 1 || v.Runs[0].State != "running" {
			t.Fatalf("runs after the kill: %+v, want one running attempt", v.Runs)
		}
		var (
			out []byte
			err error
		)
		if !waitFor(time.Minute, func() bool {
			out, err = b.cmd(t, "run", "-E", "75", "--occurrence", "k", "nightly", "--", "true").CombinedOutput()
			if code := exitStatus(err); code != 75 {
				return true
			}
			time.Sleep(200 * time.Millisecond) // a run a while, not a busy loop
			return false
		}) {
			t.Fatal("no run took the occurrence over within a minute")
		}
		if err != nil {
			t.Fatalf("the run that took over: %v\n%s", err, out)
		}
		v = b.runsJSON(t, "nightly")
		if len(v.Runs) != 2 || v.Runs[0].State != "succeeded" || v.Runs[1].State != "abandoned" || v.Runs[0].Token <= v.Runs[1].Token {
			t.Fatalf("runs after the takeover: %+v, want the first attempt abandoned, the second succeeded with a larger token", v.Runs)
		}
	})
}

// A replica started with --wait while another's attempt runs waits for
// it, and says so (-v): when that replica dies, the waiting one takes the
// occurrence over once the lease ends, runs it as attempt 2 and exits 0; a
// --wait run of an occurrence done meanwhile exits 0 without running it.
func TestRunOccurrenceWait(t *testing.T) {
	eachLedger(t, func(t *testing.T, b backend) {
		// The first replica's lease must outlive a stall of the loaded
		// machine until the second one waits: a lapse would let the second
		// run without waiting.
		first, sc := b.startHolding(t, "10s")
		second := b.cmd(t, "run", "-v", "--wait", "--occurrence", "k", "nightly", "--", "sh", "-c", `echo "attempt $SQLLOCK_ATTEMPT"`)
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		second.Stdout, second.Stderr = w, w
		err = second.Start()
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		lines := make(chan string)
		go func() {
			defer close(lines)
			lsc := bufio.NewScanner(r)
			for lsc.Scan() {
				lines <- lsc.Text()
			}
		}()
		var out strings.Builder
		for line := range lines {
			out.WriteString(line + "\n")
			if strings.Contains(line, "waiting for") {
				break
			}
		}
		if !strings.Contains(out.String(), "waiting for") {
			t.Fatalf("the waiting run did not say that it waits:\n%s", out.String())
		}
		if err := first.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Fatal(err)
		}
		for sc.Scan() {
		}
		_ = first.Wait()
		for line := range lines {
			out.WriteString(line + "\n")
		}
		if err := second.Wait(); err != nil {
			t.Fatalf("the waiting run: %v\n%s", err, out.String())
		}
		if !strings.Contains(out.String(), "attempt 2") {
			t.Fatalf("the waiting run did not run attempt 2:\n%s", out.String())
		}
		v := b.runsJSON(t, "nightly")
		if len(v.Runs) != 2 || v.Runs[0].State != "succeeded" || v.Runs[1].State != "abandoned" {
			t.Fatalf("runs: %+v, want the first attempt abandoned, the second succeeded", v.Runs)
		}
		again, err := b.cmd(t, "run", "-v", "--wait", "--occurrence", "k", "nightly", "--", "false").CombinedOutput()
		if err != nil || !strings.Contains(string(again), "done already") {
			t.Fatalf("a --wait run of the done occurrence: %v\n%s", err, again)
		}
	})
}

// runs shows the attempts in a table, and the occurrences of a periodic
// job that no replica claimed under MISSED, summed up per job in the
// table, listed (the latest --limit) and summed up in JSON.
func TestRunsMissed(t *testing.T) {
	eachLedger(t, func(t *testing.T, b backend) {
		if out, err := b.cmd(t, "run", "--every", "0.25", "tick", "--", "true").CombinedOutput(); err != nil {
			t.Fatalf("run --every 0.25: %v\n%s", err, out)
		}
		var v runsView
		if !waitFor(time.Minute, func() bool {
			v = b.runsJSON(t, "--missed-after", "0.25", "tick")
			return len(v.Missed) > 0
		}) {
			t.Fatalf("no occurrence of an idle 250 ms job reported missed within a minute: %+v", v)
		}
		if m := v.Missed[0]; m.Job != "tick" || m.Occurrence == v.Runs[0].Occurrence || m.Due.Before(v.Runs[0].StartedAt.Add(-time.Second)) {
			t.Fatalf("missed %+v, want later occurrences of tick than the run %+v", m, v.Runs[0])
		}
		if len(v.MissedJobs) != 1 || v.MissedJobs[0].Job != "tick" || v.MissedJobs[0].Count < len(v.Missed) ||
			v.MissedJobs[0].Last.Before(v.Missed[len(v.Missed)-1].Due) {
			t.Fatalf("missed_jobs %+v of missed %+v", v.MissedJobs, v.Missed)
		}
		if v := b.runsJSON(t, "--missed-after", "0.25", "--limit", "1", "tick"); len(v.Missed) != 1 {
			t.Fatalf("--limit 1: %d missed listed", len(v.Missed))
		}
		// --grace, the old name of --missed-after, still works, with a
		// deprecation note.
		c := b.cmd(t, "runs", "--grace", "0.25")
		var stderr bytes.Buffer
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stderr.String(), "--grace is deprecated: say --missed-after") {
			t.Errorf("runs --grace: no deprecation note in %q", stderr.String())
		}
		s := string(out)
		for _, want := range []string{"JOB", "OCCURRENCE", "ATTEMPT", "STATE", "succeeded", "MISSED: ", "within --missed-after 250ms", "FIRST (", "LAST ("} {
			if !strings.Contains(s, want) {
				t.Errorf("runs: no %q in\n%s", want, s)
			}
		}
	})
}

// The flags of a run of the ledger that contradict it or each other are
// usage errors (64), before any database is opened.
func TestRunOccurrenceUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--every", "1h", "--occurrence", "k"},
		{"--every", "0"},
		{"--every", "1h", "-n"},
		{"--every", "1h", "-w", "5"},
		{"--every", "1h", "--min-hold", "5m"},
		{"--every", "1h", "--strategy", "optimistic"},
		{"--every", "1h", "--max", "2"},
		{"--every", "1h", "--phase", "1h"},
		{"--phase", "1m", "--occurrence", "k"},
		{"--occurrence", ""},
		{"--occurrence", "k", "--retries", "-1"},
		{"--occurrence", "k", "--retry-backoff", "1s"},
		{"--occurrence", "k", "-E", "256"},
		{"--retries", "2"},
		{"--retry-backoff", "1s"},
		{"--wait"},
	} {
		full := append(append([]string{"run"}, args...), "job", "--", "true")
		c := exec.CommandContext(ctxT(t), bin, full...)
		c.Env = append(os.Environ(), "SQLLOCK_DSN=sqlite:"+filepath.Join(t.TempDir(), "missing", "l.db"))
		out, err := c.CombinedOutput()
		if code := exitStatus(err); code != exitUsage || !oneLineUsage(string(out)) {
			t.Errorf("%v: exit %d, want 64 with one line of usage: %s", args, code, out)
		}
	}
}

// SIGINT while the job runs goes to the job and ends the run: the attempt
// is recorded failed with the job's status (130), and no retry follows,
// whatever --retries allows. (On SQLite alone: nothing here depends on the
// database.)
func TestRunOccurrenceInterrupted(t *testing.T) {
	needProc(t)
	t.Parallel()
	for _, m := range backends {
		if m.kind != "sqlite" {
			continue
		}
		b := m.make(t)
		name := "interrupted" // the job's processes are found by name
		c := b.cmd(t, "run", "--occurrence", "k", "--retries", "3", "--retry-backoff", "0.1", name, "--", "sh", "-c", "sleep 3600; :")
		j := startRunning(t, c, name)
		if err := c.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if code := j.wait(); code != 130 {
			t.Fatalf("exit %d, want 130:\n%s", code, j.out.String())
		}
		v := b.runsJSON(t, name)
		if len(v.Runs) != 1 || v.Runs[0].State != "failed" || !strings.Contains(v.Runs[0].Error, "status 130") {
			t.Fatalf("runs: %+v, want one attempt, failed with status 130", v.Runs)
		}
	}
}

// runs --watch shows the runs again until interrupted, then exits 0.
func TestRunsWatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := exec.CommandContext(ctxT(t), bin, "runs", "--watch", "0.1")
	c.Env = append(os.Environ(), "SQLLOCK_DSN=sqlite:"+filepath.Join(dir, "l.db"))
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	seen := 0
	for seen < 2 && sc.Scan() {
		if sc.Text() == "no runs recorded" {
			seen++
		}
	}
	if seen < 2 {
		t.Fatal("runs --watch did not refresh")
	}
	if err := c.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("runs --watch after SIGINT: %v", err)
	}
}

// reap --runs-older-than deletes the records of runs that ended before
// AGE; without it, reap keeps them.
func TestReapRuns(t *testing.T) {
	t.Parallel()
	dsn := "SQLLOCK_DSN=sqlite:" + filepath.Join(t.TempDir(), "l.db")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctxT(t), bin, args...)
		cmd.Env = append(os.Environ(), dsn)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("run", "--occurrence", "k", "job", "--", "true")
	if out := run("reap"); strings.Contains(out, "run record") {
		t.Fatalf("reap without --runs-older-than: %q", out)
	}
	if out := run("runs", "--json"); !strings.Contains(out, `"job": "job"`) {
		t.Fatalf("runs after reap: %s, want the run kept", out)
	}
	if out := run("reap", "--runs-older-than", "1us"); !strings.Contains(out, "reaped 1 run record\n") {
		t.Fatalf("reap --runs-older-than 1us: %q, want 1 run record", out)
	}
	if out := run("runs", "--json"); !strings.Contains(out, `"runs": []`) {
		t.Fatalf("runs after reap --runs-older-than: %s, want none", out)
	}
}

// -v names only the attempt and token the ledger told: none for another
// replica's attempt holding the occurrence's lease.
func TestSkipReason(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		res  ledger.Result
		want string
	}{
		{ledger.Result{State: ledger.StateRunning}, "running elsewhere"},
		{ledger.Result{State: ledger.StateRunning, Attempt: 2, Token: 9}, "running elsewhere (attempt 2, token 9)"},
		{ledger.Result{State: ledger.StateSucceeded, Attempt: 1, Token: 4}, "done already (attempt 1, token 4)"},
		{ledger.Result{State: ledger.StateSucceeded, Attempt: 1}, "done already (attempt 1)"},
		{ledger.Result{State: ledger.StateFailed, Attempt: 3, Token: 4}, "attempt 3 failed, and no attempt is left for now"},
		{ledger.Result{State: ledger.StateFailed}, "its attempts failed, and no attempt is left for now"},
	} {
		if got := skipReason(c.res); got != c.want {
			t.Errorf("%+v: %q, want %q", c.res, got, c.want)
		}
	}
}
