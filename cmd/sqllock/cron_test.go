package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqllock/sqllock/ledger"
)

// lockedBuffer is a bytes.Buffer safe for a process's output and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// cronReplica is a running `sqllock cron`.
type cronReplica struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{} // closed once it exited; then code is set
	code   int
}

// startCron starts `sqllock cron -v [flags] FILE` with REPLICA=name in its
// environment.
func (b backend) startCron(t *testing.T, name, file string, flags ...string) *cronReplica {
	t.Helper()
	c := exec.Command(bin, append(append([]string{"cron", "-v"}, flags...), file)...)
	c.Env = append(os.Environ(), "SQLLOCK_DSN="+b.dsn, "REPLICA="+name)
	r := &cronReplica{cmd: c, stderr: &lockedBuffer{}, done: make(chan struct{})}
	c.Stdout, c.Stderr = r.stderr, r.stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := c.Wait()
		r.code = exitOf(t, err)
		close(r.done)
	}()
	t.Cleanup(func() {
		_ = c.Process.Kill()
		<-r.done
		if t.Failed() {
			t.Logf("replica %s:\n%s", name, r.stderr.String())
		}
	})
	return r
}

// stop sends s and waits for the replica's exit status.
func (r *cronReplica) stop(t *testing.T, s syscall.Signal) int {
	t.Helper()
	_ = r.cmd.Process.Signal(s)
	select {
	case <-r.done:
		return r.code
	case <-time.After(time.Minute):
		t.Fatalf("sqllock cron did not exit after %v:\n%s", s, r.stderr.String())
		return -1
	}
}

// says waits until the replica's stderr holds text.
func (r *cronReplica) says(t *testing.T, text string) {
	t.Helper()
	if !waitFor(time.Minute, func() bool { return strings.Contains(r.stderr.String(), text) }) {
		t.Fatalf("sqllock cron never said %q:\n%s", text, r.stderr.String())
	}
}

// attempts returns every recorded attempt of job.
func (b backend) attempts(t *testing.T, job string) []ledger.RunInfo {
	t.Helper()
	l, err := ledger.New(b.d, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := l.Runs(ctxT(t), job, 100000)
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// succeeded counts job's succeeded occurrences, failing t if one
// succeeded twice; manual counts those of them that are manual.
func (b backend) succeeded(t *testing.T, job string) (n, manual int) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range b.attempts(t, job) {
		if r.State != ledger.StateSucceeded {
			continue
		}
		if seen[r.Occurrence] {
			t.Errorf("occurrence %s of %s succeeded twice", r.Occurrence, job)
		}
		seen[r.Occurrence] = true
		n++
		if strings.HasPrefix(r.Occurrence, ledger.ManualPrefix) {
			manual++
		}
	}
	return n, manual
}

// writeFile writes text to path, failing t on an error.
func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Three `sqllock cron` replicas of one file: each occurrence succeeds
// once across them, a manual occurrence asked for runs promptly, once; a
// bad reload keeps the last good table; a reload that drops an entry
// pauses its job, which then runs nothing; a replica killed with SIGKILL
// leaves the others running the table; SIGTERM drains and exits 0.
func TestCronReplicas(t *testing.T) {
	eachLedger(t, func(t *testing.T, b backend) {
		dir := t.TempDir()
		file, log := filepath.Join(dir, "crontab"), filepath.Join(dir, "log")
		table := fmt.Sprintf(`# sqllock: name=tick
@every 1s echo "$SQLLOCK_OCCURRENCE $REPLICA $SQLLOCK_TOKEN" >> %s
# sqllock: name=gone
@every 1s true
`, log)
		writeFile(t, file, table)
		var rs []*cronReplica
		for i := range 3 {
			rs = append(rs, b.startCron(t, fmt.Sprint(i), file, "--poll", "200ms"))
		}
		if !waitFor(time.Minute, func() bool {
			n, _ := b.succeeded(t, "tick")
			g, _ := b.succeeded(t, "gone")
			return n >= 2 && g >= 1
		}) {
			t.Fatal("no occurrence succeeded")
		}

		out, err := b.cmd(t, "runs", "trigger", "tick").CombinedOutput()
		if err != nil {
			t.Fatalf("trigger: %v\n%s", err, out)
		}
		if !waitFor(time.Minute, func() bool { _, m := b.succeeded(t, "tick"); return m == 1 }) {
			t.Fatal("the manual occurrence did not run")
		}

		writeFile(t, file, "61 * * * * echo\n")
		_ = rs[0].cmd.Process.Signal(syscall.SIGHUP)
		rs[0].says(t, "crontab:1: schedule: expression \"61 * * * *\": minute field")
		if err := rs[2].cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-rs[2].done

		writeFile(t, file, strings.SplitAfterN(table, "\n", 3)[0]+strings.SplitAfterN(table, "\n", 3)[1])
		for _, r := range rs[:2] {
			_ = r.cmd.Process.Signal(syscall.SIGHUP)
			r.says(t, "reloaded")
		}
		rs[0].says(t, "gone: removed from")
		before, _ := b.succeeded(t, "tick")
		if !waitFor(time.Minute, func() bool { n, _ := b.succeeded(t, "tick"); return n >= before+3 }) {
			t.Fatal("the two replicas left run nothing")
		}
		for _, r := range rs[:2] {
			if code := r.stop(t, syscall.SIGTERM); code != 0 {
				t.Errorf("SIGTERM: exit %d, want 0", code)
			}
		}

		b.succeeded(t, "tick") // no occurrence twice
		l, err := ledger.New(b.d, ledger.Options{})
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := l.Jobs(ctxT(t), "gone")
		if err != nil || len(jobs) != 1 || !jobs[0].Paused {
			t.Fatalf("the removed entry's job: %+v, %v; want it paused", jobs, err)
		}
		for _, r := range b.attempts(t, "gone") {
			at, err := time.Parse(ledger.TimeFormat, r.Occurrence)
			if err != nil {
				t.Fatal(err)
			}
			// An occurrence due a second after the pause was read paused
			// by every replica (a Run reads the pause before it claims).
			if at.After(jobs[0].PausedAt.Add(time.Second)) {
				t.Errorf("paused job ran occurrence %s (paused at %v)", r.Occurrence, jobs[0].PausedAt)
			}
		}
		data, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), ledger.ManualPrefix) {
			t.Errorf("the command never saw its manual occurrence:\n%s", data)
		}
	})
}

// SIGTERM drains: no new claim, the running job gets SIGTERM (it may
// finish), the daemon exits 0 once its outcome is recorded.
func TestCronDrain(t *testing.T) {
	eachLedger(t, func(t *testing.T, b backend) {
		dir := t.TempDir()
		file, log := filepath.Join(dir, "crontab"), filepath.Join(dir, "log")
		writeFile(t, file, fmt.Sprintf(`# sqllock: name=long
@every 1s trap 'echo term >> %[1]s; exit 0' TERM; echo start >> %[1]s; sleep 60 & wait
`, log))
		r := b.startCron(t, "0", file, "--grace", "30s")
		if !waitFor(time.Minute, func() bool { data, _ := os.ReadFile(log); return strings.Contains(string(data), "start") }) {
			t.Fatalf("the job never started:\n%s", r.stderr.String())
		}
		if code := r.stop(t, syscall.SIGTERM); code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
		data, _ := os.ReadFile(log)
		if string(data) != "start\nterm\n" {
			t.Errorf("the job's log %q: want it started once and given SIGTERM", data)
		}
		if n, _ := b.succeeded(t, "long"); n != 1 {
			t.Errorf("%d occurrences succeeded, want the one drained", n)
		}
		if !strings.Contains(r.stderr.String(), "SIGTERM: draining") {
			t.Errorf("no drain said:\n%s", r.stderr.String())
		}
	})
}

// A bad file exits 64 naming its line and field, before the database is
// opened: nothing is written.
func TestCronCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "crontab")
	db := filepath.Join(dir, "never.db")
	writeFile(t, file, "# sqllock: name=a tz=Europe/Nowhere\n0 2 * * * echo\n")
	for _, args := range [][]string{{"cron", "--check", file}, {"cron", file}} {
		c := exec.CommandContext(context.Background(), bin, args...)
		c.Env = append(os.Environ(), "SQLLOCK_DSN=sqlite:"+db)
		out, err := c.CombinedOutput()
		if code := exitOf(t, err); code != exitUsage || !strings.Contains(string(out), file+":1: tz:") {
			t.Errorf("%v: exit %d, %q; want 64 naming line 1's tz", args, code, out)
		}
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("a refused file opened the database: %v", err)
	}
	writeFile(t, file, "CRON_TZ=Europe/Berlin\n# sqllock: name=report retries=1\n0 2 * * * /usr/local/bin/report\n")
	out, err := exec.Command(bin, "cron", "--check", file).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "1 entry, ok") || !strings.Contains(string(out), "report  0 2 * * * Europe/Berlin") {
		t.Errorf("--check of a good file: %v\n%s", err, out)
	}
}

// An entry's max-runtime= stops its job and records the attempt failed,
// timed out.
func TestCronMaxRuntime(t *testing.T) {
	eachLedger(t, func(t *testing.T, b backend) {
		file := filepath.Join(t.TempDir(), "crontab")
		writeFile(t, file, "# sqllock: name=slow max-runtime=200ms\n@every 2s sleep 3600\n")
		r := b.startCron(t, "0", file, "--grace", "5s")
		var runs []ledger.RunInfo
		if !waitFor(time.Minute, func() bool {
			runs = b.attempts(t, "slow")
			return len(runs) > 0 && runs[0].State != ledger.StateRunning
		}) {
			t.Fatalf("no attempt finished: %+v\n%s", runs, r.stderr.String())
		}
		if !runs[0].TimedOut || runs[0].State != ledger.StateFailed || !strings.Contains(runs[0].Err, "timed out") {
			t.Fatalf("attempt %+v, want failed, timed out", runs[0])
		}
		r.stop(t, syscall.SIGTERM)
	})
}

// A replica killed with SIGKILL mid-run is taken over: another replica,
// which found the occurrence running, waits for it and, once the dead
// attempt's lease ends, runs the occurrence again with a larger token.
func TestCronTakeOver(t *testing.T) {
	eachLedger(t, func(t *testing.T, b backend) {
		dir := t.TempDir()
		file, log, marker := filepath.Join(dir, "crontab"), filepath.Join(dir, "log"), filepath.Join(dir, "marker")
		// The first run ever hangs; the rest are quick. Overlap allow:
		// under skip, a takeover after the next occurrence began would be
		// skipped for overlap.
		writeFile(t, file, fmt.Sprintf(`# sqllock: name=job overlap=allow
@every 5s echo "$REPLICA $SQLLOCK_OCCURRENCE $SQLLOCK_ATTEMPT" >> %[1]s; if [ ! -e %[2]s ]; then touch %[2]s; sleep 600; fi
`, log, marker))
		rs := map[string]*cronReplica{}
		for _, n := range []string{"a", "b"} {
			rs[n] = b.startCron(t, n, file, "--ttl", "5s")
		}
		var first []string
		if !waitFor(time.Minute, func() bool {
			data, _ := os.ReadFile(log)
			first = strings.Fields(string(data))
			return len(first) >= 3
		}) {
			t.Fatal("the job never ran")
		}
		victim := rs[first[0]]
		if err := victim.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-victim.done
		occ := first[1]
		var runs []ledger.RunInfo
		if !waitFor(time.Minute, func() bool {
			runs = nil
			for _, r := range b.attempts(t, "job") {
				if r.Occurrence == occ {
					runs = append(runs, r)
				}
			}
			return len(runs) == 2 && runs[0].State == ledger.StateSucceeded
		}) {
			t.Fatalf("occurrence %s was not taken over: %+v", occ, runs)
		}
		// Runs lists the latest first.
		if runs[1].State != ledger.StateAbandoned || runs[0].Token <= runs[1].Token || runs[0].Attempt != 2 {
			t.Fatalf("attempts of %s: %+v; want the first abandoned, the second succeeded with a larger token", occ, runs)
		}
	})
}

// A backfill asked of a job's replicas (sqllock runs backfill without a
// command) is found by the `sqllock cron` replicas at their next poll and
// run once across them: each occurrence of the range once, beside the
// job's own occurrences.
func TestCronBackfill(t *testing.T) {
	eachLedger(t, func(t *testing.T, b backend) {
		dir := t.TempDir()
		file, log := filepath.Join(dir, "crontab"), filepath.Join(dir, "log")
		writeFile(t, file, fmt.Sprintf("# sqllock: name=fill\n@every 1s echo \"$SQLLOCK_OCCURRENCE\" >> %s\n", log))
		for _, n := range []string{"a", "b"} {
			b.startCron(t, n, file, "--poll", "200ms")
		}
		if !waitFor(time.Minute, func() bool { n, _ := b.succeeded(t, "fill"); return n > 0 }) {
			t.Fatal("the job never ran")
		}
		to := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
		from := to.Add(-4 * time.Second)
		out, err := b.cmd(t, "runs", "backfill", "fill", "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339)).CombinedOutput()
		if exitOf(t, err) != 0 || !strings.Contains(string(out), "backfill 5 occurrences") {
			t.Fatalf("the request: %v\n%s", err, out)
		}
		var data []byte
		if !waitFor(time.Minute, func() bool {
			out, err := b.cmd(t, "runs", "--json", "fill").Output()
			data, _ = os.ReadFile(log)
			return err == nil && !strings.Contains(string(out), `"backfill"`) && strings.Contains(string(data), to.Format(ledger.TimeFormat))
		}) {
			t.Fatalf("the backfill did not end; the command ran:\n%s", data)
		}
		for at := from; !at.After(to); at = at.Add(time.Second) {
			if n := strings.Count(string(data), at.Format(ledger.TimeFormat)+"\n"); n != 1 {
				t.Errorf("occurrence %s ran %d times:\n%s", at.Format(ledger.TimeFormat), n, data)
			}
		}
		b.succeeded(t, "fill") // none twice
	})
}
