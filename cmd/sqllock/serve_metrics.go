package main

import (
	"bufio"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sqllock/sqllock/ledger"
)

// metrics writes the latest read in the Prometheus text format (0.0.4). A
// failed last read answers 503, so that Prometheus marks the target down
// (up == 0) instead of keeping old values; the series of sqllockotel's
// runs_missed, runs_failing_streak, runs_failing and runs_late keep their
// names and label, so that the shipped alerts SqllockRunsMissed,
// SqllockRunsFailing and SqllockRunsLate fire on the console's series
// unchanged.
func (c *console) metrics(w http.ResponseWriter, r *http.Request) {
	s := c.hub.snapshot()
	if !s.ok() {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "sqllock serve cannot read the database: %s\n", s.Err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	b := bufio.NewWriter(w)
	defer b.Flush()
	metric := func(name, kind, help string) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
	}
	sample := func(name, label, value string, v float64) {
		if label == "" {
			fmt.Fprintf(b, "%s %s\n", name, strconv.FormatFloat(v, 'g', -1, 64))
			return
		}
		fmt.Fprintf(b, "%s{%s=\"%s\"} %s\n", name, label, labelValue(value), strconv.FormatFloat(v, 'g', -1, 64))
	}
	bool01 := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}

	metric("sqllock_console_job_last_success_timestamp_seconds", "gauge", "End of the job's latest succeeded attempt among its latest --per-job, Unix seconds (absent: none).")
	for _, j := range s.Jobs {
		if j.LastSuccess != nil {
			sample("sqllock_console_job_last_success_timestamp_seconds", "sqllock_job", j.Job, float64(j.LastSuccess.UnixMilli())/1000)
		}
	}
	metric("sqllock_console_job_running", "gauge", "1 while an attempt of the job runs.")
	for _, j := range s.Jobs {
		sample("sqllock_console_job_running", "sqllock_job", j.Job, bool01(j.State == "running"))
	}
	metric("sqllock_console_job_late", "gauge", "1 while the job has occurrences that no replica claimed within their grace.")
	for _, j := range s.Jobs {
		sample("sqllock_console_job_late", "sqllock_job", j.Job, bool01(j.Missed > 0 && !j.Paused))
	}
	metric("sqllock_console_job_paused", "gauge", "1 while the job is paused (sqllock runs pause).")
	for _, j := range s.Jobs {
		sample("sqllock_console_job_paused", "sqllock_job", j.Job, bool01(j.Paused))
	}
	metric("sqllock_console_job_failing_streak", "gauge", "The job's latest finished attempts that failed or were abandoned, in a row (at most --per-job).")
	for _, j := range s.Jobs {
		sample("sqllock_console_job_failing_streak", "sqllock_job", j.Job, float64(j.FailingStreak))
	}
	metric("sqllock_runs_missed", "gauge", "Occurrences of the job that no replica claimed within their grace (as sqllockotel's gauge of the same name).")
	for _, j := range s.Jobs {
		sample("sqllock_runs_missed", "sqllock_job", j.Job, float64(j.Missed))
	}
	metric("sqllock_runs_failing_streak", "gauge", "The job's latest finished attempts that failed or were abandoned, in a row (as sqllockotel's gauge of the same name).")
	for _, j := range s.Jobs {
		sample("sqllock_runs_failing_streak", "sqllock_job", j.Job, float64(j.FailingStreak))
	}
	metric("sqllock_runs_failing", "gauge", "1 while the job is failing: 3 failed attempts in a row, not followed by a success (as sqllockotel's gauge of the same name).")
	for _, j := range s.Jobs {
		sample("sqllock_runs_failing", "sqllock_job", j.Job, bool01(j.Health == string(ledger.HealthFailing)))
	}
	metric("sqllock_runs_late", "gauge", "1 while the job's latest due occurrence is unclaimed inside its grace (as sqllockotel's gauge of the same name).")
	for _, j := range s.Jobs {
		sample("sqllock_runs_late", "sqllock_job", j.Job, bool01(j.Late != nil))
	}

	held, waiters := map[string]int{}, map[string]int{}
	for _, l := range s.Locks {
		if l.live() && l.Holds > 0 {
			held[l.Strategy]++
		}
		if l.Waiters != nil {
			waiters[l.Strategy] += *l.Waiters
		}
	}
	metric("sqllock_console_locks_held", "gauge", "Locks held in the database, by kind (each holder of a shared lock counts).")
	for _, k := range lockKinds {
		sample("sqllock_console_locks_held", "sqllock_kind", k, float64(held[k]))
	}
	metric("sqllock_console_lock_waiters", "gauge", "Waiters the database shows (tickets of fair and woken waits; row-lock waits), by kind.")
	for _, k := range lockKinds {
		sample("sqllock_console_lock_waiters", "sqllock_kind", k, float64(waiters[k]))
	}
	metric("sqllock_console_election_leader", "gauge", "1 while the election has a leader, 0 once it has none (for the elections seen since the console started).")
	names := make([]string, 0, len(s.Elections))
	for name := range s.Elections {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		sample("sqllock_console_election_leader", "sqllock_election", name, bool01(s.Elections[name]))
	}

	metric("sqllock_console_read_duration_seconds", "gauge", "How long the console's latest read of the database took.")
	sample("sqllock_console_read_duration_seconds", "", "", s.ReadTime.Seconds())
	metric("sqllock_console_read_timestamp_seconds", "gauge", "When the console's latest successful read of the database started, Unix seconds.")
	sample("sqllock_console_read_timestamp_seconds", "", "", float64(s.At.UnixMilli())/1000)
	metric("sqllock_console_reads_total", "counter", "The console's reads of the database, by outcome.")
	fmt.Fprintf(b, "sqllock_console_reads_total{sqllock_outcome=\"ok\"} %d\nsqllock_console_reads_total{sqllock_outcome=\"error\"} %d\n", s.Reads, s.Failures)
	done, refused := c.audit.counts()
	metric("sqllock_console_actions_total", "counter", "Actions done through the console since it started, by what they did: broken (a lease), asked (a lease's release), paused, resumed, triggered, forgotten, backfill-requested (a job).")
	for _, a := range []string{"broken", "asked", "paused", "resumed", "triggered", "forgotten", "backfill-requested"} {
		sample("sqllock_console_actions_total", "sqllock_action", a, float64(done[a]))
	}
	metric("sqllock_console_actions_refused_total", "counter", "Actions the console refused since it started (writes off, another site, a wrong or missing token).")
	sample("sqllock_console_actions_refused_total", "", "", float64(refused))
}

// labelValue escapes v for a label value of the text format.
func labelValue(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}
