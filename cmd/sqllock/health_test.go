package main

import (
	"strings"
	"testing"
)

// run --max-runtime stops a job and records its attempt failed, timed
// out; runs shows each job's health with its failing streak, by the
// thresholds of --fail-after and --recover-after.
func TestRunsHealth(t *testing.T) {
	eachLedger(t, func(t *testing.T, b backend) {
		run := func(want int, args ...string) string {
			t.Helper()
			out, err := b.cmd(t, args...).CombinedOutput()
			if got := exitOf(t, err); got != want {
				t.Fatalf("%v: exit %d, want %d\n%s", args, got, want, out)
			}
			return string(out)
		}
		run(exitTimedOut, "run", "--occurrence", "k", "--max-runtime", "0.2", "--grace", "5s", "slow", "--", "sh", "-c", "sleep 3600; :")
		// A command that exits 124 on its own did not time out.
		run(exitTimedOut, "run", "--occurrence", "k2", "--max-runtime", "1h", "slow", "--", "sh", "-c", "exit 124")
		v := b.runsJSON(t, "slow")
		if len(v.Runs) != 2 || !v.Runs[1].TimedOut || v.Runs[1].State != "failed" || !strings.Contains(v.Runs[1].Error, "timed out") ||
			v.Runs[0].TimedOut || v.Runs[0].State != "failed" {
			t.Fatalf("runs: %+v", v.Runs)
		}
		if out := run(0, "runs", "slow"); !strings.Contains(out, "failed (timed out)") {
			t.Fatalf("runs table:\n%s", out)
		}

		job := func(v runsView, name string) jobRow {
			t.Helper()
			for _, j := range v.Jobs {
				if j.Job == name {
					return j
				}
			}
			t.Fatalf("no job %s in %+v", name, v.Jobs)
			return jobRow{}
		}
		for _, k := range []string{"k1", "k2", "k3"} {
			run(1, "run", "--occurrence", k, "batch", "--", "false")
		}
		if j := job(b.runsJSON(t), "batch"); j.Health != "failing" || j.FailingStreak != 3 || j.SuccessStreak != 0 {
			t.Fatalf("three failures: %+v", j)
		}
		if j := job(b.runsJSON(t, "--fail-after", "4"), "batch"); j.Health != "up" || j.FailingStreak != 3 {
			t.Fatalf("three failures, --fail-after 4: %+v", j)
		}
		if out := run(0, "runs"); !strings.Contains(out, "JOBS not up") || !strings.Contains(out, "failing") {
			t.Fatalf("runs table:\n%s", out)
		}
		run(0, "run", "--occurrence", "k4", "batch", "--", "true")
		if j := job(b.runsJSON(t), "batch"); j.Health != "up" || j.FailingStreak != 0 || j.SuccessStreak != 1 {
			t.Fatalf("recovered: %+v", j)
		}
		if j := job(b.runsJSON(t, "--recover-after", "2"), "batch"); j.Health != "failing" {
			t.Fatalf("one success, --recover-after 2: %+v", j)
		}
		run(exitUsage, "runs", "--fail-after", "0")
		run(exitUsage, "runs", "pause", "--fail-after", "2", "batch")
	})
}
