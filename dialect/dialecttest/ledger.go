package dialecttest

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/internal/testutil"
)

// ledgerChecks are the checks of a sqlrun.RunLedger: attempts recorded,
// finished once and only with their token, abandoned when running; job
// schedules whose history restarts with a new period; occurrences by
// range; reaping by age, in batches.
var ledgerChecks = []struct {
	name  string
	check func(t *testing.T, e *env, rl sqlrun.RunLedger)
}{
	{"Attempts", checkRunAttempts},
	{"Abandon", checkRunAbandon},
	{"Schedules", checkRunSchedules},
	{"Occurrences", checkRunOccurrences},
	{"Reap", checkRunReap},
	{"Lifecycle", checkRunLifecycle},
}

// inTx runs fn in a transaction of e's dialect and commits it.
func (e *env) inTx(fn func(tx *sql.Tx)) {
	e.t.Helper()
	tx, err := e.Dialect.DB().BeginTx(e.ctx, nil)
	e.must(err, "BeginTx")
	defer tx.Rollback()
	fn(tx)
	e.must(tx.Commit(), "Commit")
}

// startRun records attempt a of (job, occ) with token, running.
func (e *env) startRun(rl sqlrun.RunLedger, job, occ string, a int, token int64, s dialect.JobSchedule) {
	e.t.Helper()
	s.Job = job
	e.inTx(func(tx *sql.Tx) {
		rec := dialect.RunRecord{Job: job, Occurrence: occ, Attempt: a, Owner: "owner-" + job, Token: token}
		e.must(rl.Start(e.ctx, tx, rec, s), "Start")
	})
}

// attempts reads the attempts of (job, occ).
func (e *env) attempts(rl sqlrun.RunLedger, job, occ string) []dialect.RunRecord {
	e.t.Helper()
	var rs []dialect.RunRecord
	e.inTx(func(tx *sql.Tx) {
		var err error
		rs, _, err = rl.Attempts(e.ctx, tx, job, occ)
		e.must(err, "Attempts")
	})
	return rs
}

// An attempt is recorded running since the database's now, finished once,
// only under its own token, with its state and error text (byte for byte,
// up to 4 KB of UTF-8); Runs lists attempts the latest first, of one job
// or of all.
func checkRunAttempts(t *testing.T, e *env, rl sqlrun.RunLedger) {
	before, err := rl.Now(e.ctx)
	e.must(err, "Now")
	if before.Location() != time.UTC || before.IsZero() {
		t.Fatalf("Now = %v, not a UTC time", before)
	}
	e.startRun(rl, "job", "occ-1", 1, 7, dialect.JobSchedule{})
	rs := e.attempts(rl, "job", "occ-1")
	if len(rs) != 1 {
		t.Fatalf("Attempts: %+v", rs)
	}
	r := rs[0]
	if r.Job != "job" || r.Occurrence != "occ-1" || r.Attempt != 1 || r.State != "running" || r.Owner != "owner-job" ||
		r.Token != 7 || r.StartedAt.Before(before) || !r.FinishedAt.IsZero() || r.Err != "" {
		t.Fatalf("the running attempt: %+v (Now before: %v)", r, before)
	}
	text := strings.Repeat("é", 2047) + "!!" // 4096 bytes
	finish := func(token int64, want bool) {
		t.Helper()
		e.inTx(func(tx *sql.Tx) {
			ok, err := rl.Finish(e.ctx, tx, dialect.RunRecord{Job: "job", Occurrence: "occ-1", Attempt: 1, Token: token,
				State: "failed", Err: text})
			e.must(err, "Finish")
			if ok != want {
				t.Fatalf("Finish with token %d: %v, want %v", token, ok, want)
			}
		})
	}
	finish(8, false)
	finish(7, true)
	finish(7, false) // not running any more
	r = e.attempts(rl, "job", "occ-1")[0]
	if r.State != "failed" || r.Err != text || r.FinishedAt.Before(r.StartedAt) {
		t.Fatalf("the failed attempt: state %s, finished %v after %v, error of %d bytes", r.State, r.FinishedAt, r.StartedAt, len(r.Err))
	}
	e.startRun(rl, "job", "occ-1", 2, 9, dialect.JobSchedule{})
	e.startRun(rl, "other", "occ-1", 1, 10, dialect.JobSchedule{})
	runs, err := rl.Runs(e.ctx, "job", 10)
	e.must(err, "Runs")
	if len(runs) != 2 || runs[0].Attempt != 2 || runs[1].Attempt != 1 || runs[1].Err != text {
		t.Fatalf("Runs(job): %+v", runs)
	}
	all, err := rl.Runs(e.ctx, "", 10)
	e.must(err, "Runs")
	if len(all) != 3 || all[0].Job != "other" {
		t.Fatalf("Runs of all jobs: %+v", all)
	}
	if one, err := rl.Runs(e.ctx, "", 1); err != nil || len(one) != 1 {
		t.Fatalf("Runs with limit 1: %+v, %v", one, err)
	}
}

// Abandon marks the running attempts of one occurrence, and only them.
func checkRunAbandon(t *testing.T, e *env, rl sqlrun.RunLedger) {
	e.startRun(rl, "job", "a", 1, 1, dialect.JobSchedule{})
	e.startRun(rl, "job", "b", 1, 2, dialect.JobSchedule{})
	e.inTx(func(tx *sql.Tx) {
		n, err := rl.Abandon(e.ctx, tx, "job", "a")
		e.must(err, "Abandon")
		if n != 1 {
			t.Fatalf("Abandon marked %d attempts", n)
		}
		if n, err := rl.Abandon(e.ctx, tx, "job", "a"); err != nil || n != 0 {
			t.Fatalf("Abandon again: %d, %v", n, err)
		}
	})
	if r := e.attempts(rl, "job", "a")[0]; r.State != "abandoned" || r.FinishedAt.IsZero() {
		t.Fatalf("the abandoned attempt: %+v", r)
	}
	if r := e.attempts(rl, "job", "b")[0]; r.State != "running" {
		t.Fatalf("the other occurrence's attempt: %+v", r)
	}
}

// Jobs lists the jobs with a period; a job keeps its first seen time
// while its period and phase stay, and starts again when either changes.
func checkRunSchedules(t *testing.T, e *env, rl sqlrun.RunLedger) {
	hourly := dialect.JobSchedule{Period: time.Hour, Phase: time.Minute, Grace: time.Second}
	e.startRun(rl, "hourly", "1", 1, 1, hourly)
	e.startRun(rl, "adhoc", "1", 1, 2, dialect.JobSchedule{})
	jobs, now, err := rl.Jobs(e.ctx, "")
	e.must(err, "Jobs")
	if len(jobs) != 2 || jobs[0].Job != "adhoc" || jobs[0].Period != 0 || jobs[0].Spec != "" {
		t.Fatalf("Jobs: %+v", jobs)
	}
	j := jobs[1]
	if j.Job != "hourly" || j.Period != time.Hour || j.Phase != time.Minute || j.Grace != time.Second ||
		j.FirstSeen.After(j.LastSeen) || j.LastSeen.After(now) {
		t.Fatalf("the hourly job: %+v at %v", j, now)
	}
	first := j.FirstSeen
	testutil.Eventually(e.ctx, t, "the database's clock moves", func() bool {
		now, err := rl.Now(e.ctx)
		e.must(err, "Now")
		return now.After(first)
	})
	e.startRun(rl, "hourly", "2", 1, 3, hourly)
	jobs, _, err = rl.Jobs(e.ctx, "hourly")
	e.must(err, "Jobs")
	if len(jobs) != 1 || !jobs[0].FirstSeen.Equal(first) || !jobs[0].LastSeen.After(first) {
		t.Fatalf("after another start: %+v (first seen %v)", jobs, first)
	}
	hourly.Phase = 2 * time.Minute
	e.startRun(rl, "hourly", "3", 1, 4, hourly)
	jobs, _, err = rl.Jobs(e.ctx, "hourly")
	e.must(err, "Jobs")
	if len(jobs) != 1 || !jobs[0].FirstSeen.After(first) || jobs[0].Phase != 2*time.Minute {
		t.Fatalf("after a new phase: %+v (first seen %v)", jobs, first)
	}
	// A new spec starts the history again too.
	first = jobs[0].FirstSeen
	testutil.Eventually(e.ctx, t, "the database's clock moves", func() bool {
		now, err := rl.Now(e.ctx)
		e.must(err, "Now")
		return now.After(first)
	})
	cron := dialect.JobSchedule{Spec: "CRON_TZ=Europe/Berlin 0 2 * * *"}
	e.startRun(rl, "hourly", "5", 1, 6, cron)
	jobs, _, err = rl.Jobs(e.ctx, "hourly")
	e.must(err, "Jobs")
	if len(jobs) != 1 || !jobs[0].FirstSeen.After(first) || jobs[0].Spec != cron.Spec || jobs[0].Period != 0 {
		t.Fatalf("after a new spec: %+v (first seen %v)", jobs, first)
	}
	e.startRun(rl, "hourly", "4", 1, 5, dialect.JobSchedule{})
	if jobs, _, err := rl.Jobs(e.ctx, "hourly"); err != nil || len(jobs) != 1 || jobs[0].Period != 0 || jobs[0].Spec != "" {
		t.Fatalf("without a period: %+v, %v", jobs, err)
	}
}

// A job is paused and resumed (the pause kept as an interval, first seen
// moving on to the end of the last one when paused again), given one
// pending manual occurrence at a time, cleared by its key alone, and
// forgotten with or without its attempts; Job reads its state with the
// database's time in one row, for a job without a row too.
func checkRunLifecycle(t *testing.T, e *env, rl sqlrun.RunLedger) {
	st, err := rl.Job(e.ctx, "nightly")
	e.must(err, "Job")
	if st.Known || st.Paused || st.Pending != "" || st.Now.IsZero() {
		t.Fatalf("Job of an unknown job: %+v", st)
	}
	for _, op := range []func(context.Context, string) (bool, error){rl.Pause, rl.Resume} {
		if ok, err := op(e.ctx, "nightly"); err != nil || ok {
			t.Fatalf("pause or resume of an unknown job: %v, %v", ok, err)
		}
	}
	e.startRun(rl, "nightly", "1", 1, 1, dialect.JobSchedule{Period: time.Hour})
	if ok, err := rl.Resume(e.ctx, "nightly"); err != nil || ok {
		t.Fatalf("resume of a running job: %v, %v", ok, err)
	}
	if ok, err := rl.Pause(e.ctx, "nightly"); err != nil || !ok {
		t.Fatalf("Pause: %v, %v", ok, err)
	}
	if ok, err := rl.Pause(e.ctx, "nightly"); err != nil || ok {
		t.Fatalf("a second Pause: %v, %v", ok, err)
	}
	st, err = rl.Job(e.ctx, "nightly")
	e.must(err, "Job")
	jobs, _, err := rl.Jobs(e.ctx, "nightly")
	e.must(err, "Jobs")
	if !st.Known || !st.Paused || len(jobs) != 1 || !jobs[0].Paused() || jobs[0].PausedAt.Before(jobs[0].FirstSeen) {
		t.Fatalf("paused: %+v, %+v", st, jobs)
	}
	// A start keeps the pause.
	e.startRun(rl, "nightly", "2", 1, 2, dialect.JobSchedule{Period: time.Hour})
	if ok, err := rl.Resume(e.ctx, "nightly"); err != nil || !ok {
		t.Fatalf("Resume: %v, %v", ok, err)
	}
	jobs, _, err = rl.Jobs(e.ctx, "nightly")
	e.must(err, "Jobs")
	j := jobs[0]
	if j.Paused() || j.ResumedAt.Before(j.PausedAt) {
		t.Fatalf("resumed: %+v", j)
	}
	if ok, err := rl.Pause(e.ctx, "nightly"); err != nil || !ok {
		t.Fatalf("Pause again: %v, %v", ok, err)
	}
	jobs, _, err = rl.Jobs(e.ctx, "nightly")
	e.must(err, "Jobs")
	if !jobs[0].FirstSeen.Equal(j.ResumedAt) || !jobs[0].Paused() {
		t.Fatalf("paused again after %+v: %+v", j, jobs[0])
	}
	// One pending manual occurrence at a time; Clear only by its key.
	e.must(rl.Trigger(e.ctx, "nightly", "manual/a"), "Trigger")
	e.must(rl.Trigger(e.ctx, "nightly", "manual/b"), "Trigger")
	if st, err := rl.Job(e.ctx, "nightly"); err != nil || st.Pending != "manual/a" {
		t.Fatalf("pending: %+v, %v", st, err)
	}
	e.inTx(func(tx *sql.Tx) { e.must(rl.Clear(e.ctx, tx, "nightly", "manual/b"), "Clear") })
	if st, err := rl.Job(e.ctx, "nightly"); err != nil || st.Pending != "manual/a" {
		t.Fatalf("after clearing another key: %+v, %v", st, err)
	}
	e.inTx(func(tx *sql.Tx) { e.must(rl.Clear(e.ctx, tx, "nightly", "manual/a"), "Clear") })
	if st, err := rl.Job(e.ctx, "nightly"); err != nil || st.Pending != "" {
		t.Fatalf("after Clear: %+v, %v", st, err)
	}
	// Forget: the row goes, the attempts stay unless asked.
	if had, n, err := rl.Forget(e.ctx, "nightly", false); err != nil || !had || n != 0 {
		t.Fatalf("Forget: %v, %d, %v", had, n, err)
	}
	if st, err := rl.Job(e.ctx, "nightly"); err != nil || st.Known {
		t.Fatalf("after Forget: %+v, %v", st, err)
	}
	if rs, err := rl.Runs(e.ctx, "nightly", 10); err != nil || len(rs) != 2 {
		t.Fatalf("attempts after Forget: %+v, %v", rs, err)
	}
	if had, n, err := rl.Forget(e.ctx, "nightly", true); err != nil || had || n != 2 {
		t.Fatalf("Forget with attempts: %v, %d, %v", had, n, err)
	}
	if rs, err := rl.Runs(e.ctx, "nightly", 10); err != nil || len(rs) != 0 {
		t.Fatalf("attempts after Forget with attempts: %+v, %v", rs, err)
	}
}

// Occurrences lists a job's distinct occurrences within a range, both ends
// included.
func checkRunOccurrences(t *testing.T, e *env, rl sqlrun.RunLedger) {
	for i, o := range []string{"2026-01-01T00:00:01.000000Z", "2026-01-01T00:00:02.000000Z", "2026-01-01T00:00:03.000000Z"} {
		e.startRun(rl, "job", o, 1, int64(2*i+1), dialect.JobSchedule{})
		e.startRun(rl, "job", o, 2, int64(2*i+2), dialect.JobSchedule{})
	}
	e.startRun(rl, "other", "2026-01-01T00:00:02.500000Z", 1, 9, dialect.JobSchedule{})
	got, err := rl.Occurrences(e.ctx, "job", "2026-01-01T00:00:01.000000Z", "2026-01-01T00:00:02.000000Z")
	e.must(err, "Occurrences")
	if strings.Join(got, " ") != "2026-01-01T00:00:01.000000Z 2026-01-01T00:00:02.000000Z" {
		t.Fatalf("Occurrences: %q", got)
	}
}

// Reap deletes attempts older than the age given, at most limit at a time.
func checkRunReap(t *testing.T, e *env, rl sqlrun.RunLedger) {
	for i := range 3 {
		e.startRun(rl, "job", string(rune('a'+i)), 1, int64(i+1), dialect.JobSchedule{Period: time.Second})
	}
	if n, err := rl.Reap(e.ctx, time.Hour, 10); err != nil || n != 0 {
		t.Fatalf("Reap of an hour's age: %d, %v", n, err)
	}
	total := 0
	testutil.Eventually(e.ctx, t, "three attempts reaped", func() bool {
		n, err := rl.Reap(e.ctx, time.Microsecond, 2)
		e.must(err, "Reap")
		if n > 2 {
			t.Fatalf("Reap with limit 2 deleted %d", n)
		}
		total += n
		return total == 3
	})
	if runs, err := rl.Runs(e.ctx, "", 10); err != nil || len(runs) != 0 {
		t.Fatalf("after the reap: %+v, %v", runs, err)
	}
}
