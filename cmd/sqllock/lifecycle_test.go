package main

import (
	"strings"
	"testing"
)

// A job's life through the CLI: paused (its runs say so in one line and run
// nothing), triggered (the next run of the line runs the manual occurrence
// too, once), resumed, forgotten (no missed occurrence left); bad schedules
// exit 64 and write nothing.
func TestRunsLifecycle(t *testing.T) {
	eachLedger(t, func(t *testing.T, b backend) {
		run := func(want int, args ...string) string {
			t.Helper()
			out, err := b.cmd(t, args...).CombinedOutput()
			if got := exitOf(t, err); got != want {
				t.Fatalf("%v: exit %d, want %d\n%s", args, got, want, out)
			}
			return string(out)
		}
		for _, bad := range [][]string{
			{"--cron", "0 25 * * *"},
			{"--cron", "0 2 * * *", "--tz", "Mars/Base"},
			{"--cron", "0 2 * * *", "--every", "1h"},
			{"--tz", "Europe/Berlin", "--every", "1h"},
		} {
			out := run(exitUsage, append(append([]string{"run"}, bad...), "job", "--", "true")...)
			if want := strings.TrimPrefix(bad[len(bad)-2], "-"); !strings.Contains(out, want) {
				t.Errorf("%v: %q does not name %s", bad, out, want)
			}
		}
		if v := b.runsJSON(t); len(v.Runs) != 0 || len(v.Jobs) != 0 {
			t.Fatalf("refused runs wrote %+v", v)
		}
		cron := []string{"run", "--cron", "* * * * * *", "--tz", "Europe/Berlin", "job", "--", "sh", "-c", `echo "ran $SQLLOCK_OCCURRENCE"`}
		if out := run(0, cron...); !strings.Contains(out, "ran 20") {
			t.Fatalf("first run: %q", out)
		}
		run(1, "runs", "pause", "nosuch")
		if out := run(0, "runs", "pause", "job"); !strings.Contains(out, "paused") {
			t.Fatalf("pause: %q", out)
		}
		if out := run(0, cron...); strings.Contains(out, "ran ") || !strings.Contains(out, `job "job" is paused`) {
			t.Fatalf("a paused run: %q", out)
		}
		key := strings.SplitN(run(0, "runs", "trigger", "job"), "\n", 2)[0]
		if !strings.HasPrefix(key, "manual/") {
			t.Fatalf("trigger printed %q", key)
		}
		if out := run(0, cron...); !strings.Contains(out, "ran "+key) {
			t.Fatalf("the run after trigger: %q", out)
		}
		v := b.runsJSON(t)
		if len(v.Jobs) != 1 || !v.Jobs[0].Paused || v.Jobs[0].Pending != "" || v.Jobs[0].Schedule != "cron * * * * * * Europe/Berlin" {
			t.Fatalf("jobs: %+v", v.Jobs)
		}
		if out := run(0, cron...); strings.Contains(out, "ran ") {
			t.Fatalf("the manual occurrence ran twice: %q", out)
		}
		run(0, "runs", "resume", "job")
		run(0, "runs", "forget", "job")
		if v := b.runsJSON(t); len(v.Jobs) != 0 || len(v.MissedJobs) != 0 || len(v.Runs) != 2 {
			t.Fatalf("after forget: %+v", v)
		}
		run(0, "runs", "forget", "--attempts", "job")
		if v := b.runsJSON(t); len(v.Runs) != 0 {
			t.Fatalf("after forget --attempts: %+v", v.Runs)
		}
		run(exitUsage, "runs", "--attempts", "job")
	})
}
