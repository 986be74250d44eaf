package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/ledger"
)

// runsFlags is "sqllock runs [NAME]": the recent attempts of the run
// ledger's occurrences, and the occurrences no replica claimed.
func runsFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := dsnFlag(fs), schemaFlag(fs)
	asJSON := fs.Bool("json", false, "print a JSON object: {\"runs\": [...], \"missed\": [...]}, times in RFC 3339, durations in milliseconds")
	watch := durationFlag(fs, "watch", 0, "show the runs again every `SECONDS` until interrupted (0: once)")
	limit := fs.Int("limit", 20, "show the latest `N` attempts")
	grace := durationFlag(fs, "missed-after", 0, "an occurrence of a job run with --every or --cron is missed when no replica claimed it within `SECONDS` (or a duration) of its time (0: until the next occurrence's time); --grace, its old name, still works, deprecated (run's --grace is the time between SIGTERM and SIGKILL)")
	deprecatedFlag(fs, "grace", "missed-after")
	attempts := fs.Bool("attempts", false, "with forget, delete the job's recorded attempts too")
	failAfter := fs.Int("fail-after", 3, "a job is failing after `N` failed attempts in a row")
	recoverAfter := fs.Int("recover-after", 1, "a failing job has recovered after `M` succeeded attempts in a row")
	from := fs.String("from", "", "with backfill, the first `TIME` of the range (RFC 3339: 2026-11-30T00:00:00Z)")
	to := fs.String("to", "", "with backfill, the last `TIME` of the range (RFC 3339), not after the database's time")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) > 0 && args[0] == "backfill" {
			return runsBackfill(ctx, fs, *dsn, *schema, *from, *to, args[1:], stdout)
		}
		if isSet(fs, "from", "to") {
			return usageError{msg: "--from and --to go with runs backfill JOB -- COMMAND"}
		}
		var job, verb string
		switch len(args) {
		case 0:
		case 1:
			job = args[0]
		case 2:
			verb, job = args[0], args[1]
			if !runsVerbs[verb] {
				return usageError{msg: fmt.Sprintf("runs %s: want runs [JOB], runs forget|pause|resume|trigger JOB, or runs backfill JOB --from TIME --to TIME -- COMMAND", verb)}
			}
		default:
			return usageError{msg: "runs takes at most one job name, or one of forget, pause, resume, trigger and a job name"}
		}
		if job != "" {
			if err := sqllock.ValidateName(job); err != nil {
				return usageError{msg: err.Error()}
			}
		}
		switch {
		case *attempts && verb != "forget":
			return usageError{msg: "--attempts goes with runs forget JOB"}
		case verb != "" && isSet(fs, "json", "watch", "limit", "missed-after", "grace", "fail-after", "recover-after"):
			return usageError{msg: "--json, --watch, --limit, --missed-after, --fail-after and --recover-after go with the list, not with runs " + verb}
		}
		switch {
		case *watch < 0 || *grace < 0:
			return usageError{msg: "--watch and --missed-after must not be negative"}
		case *limit <= 0 || *failAfter <= 0 || *recoverAfter <= 0:
			return usageError{msg: "--limit, --fail-after and --recover-after must be positive"}
		}
		if isSet(fs, "grace") {
			fmt.Fprintln(os.Stderr, "sqllock: runs --grace is deprecated: say --missed-after (run's --grace is the time between SIGTERM and SIGKILL)")
		}
		t, err := openReady(ctx, *dsn, *schema)
		if err != nil {
			return err
		}
		defer t.Close()
		l, err := ledger.New(t.d, ledger.Options{})
		if errors.Is(err, sqllock.ErrUnsupported) {
			return usageError{msg: err.Error()}
		}
		if err != nil {
			return err
		}
		if verb != "" {
			if err := runsAction(ctx, l, verb, job, *attempts, stdout); err != nil {
				if errors.Is(err, ledger.ErrUnknownJob) {
					return exitError{exitFailure, err}
				}
				return t.fail(err)
			}
			return nil
		}
		show := func(ctx context.Context, stamped bool) error {
			v, err := readRuns(ctx, l, job, *limit, ledger.HealthOptions{Grace: *grace, FailAfter: *failAfter, RecoverAfter: *recoverAfter})
			if err != nil {
				return t.fail(err)
			}
			if *asJSON {
				return v.writeJSON(stdout, !stamped)
			}
			if stamped {
				fmt.Fprintf(stdout, "%s  %s\n\n", time.Now().Format("2006-01-02 15:04:05 MST"), t.dsn)
			}
			return v.writeTable(stdout)
		}
		if *watch == 0 {
			return show(ctx, false)
		}
		return watchView(ctx, *watch, stdout, !*asJSON, func(ctx context.Context) error { return show(ctx, true) })
	}
}

// runsBackfill is runs backfill JOB -- COMMAND: it runs COMMAND once for
// each occurrence of JOB's recorded schedule from --from to --to, oldest
// first, exactly once across replicas (ledger.Ledger.Backfill), under
// run's supervisor.
//
// Without COMMAND it asks the job's replicas for the backfill
// (ledger.Ledger.RequestBackfill): the next sqllock run or sqllock cron
// of the job to run an occurrence runs the range too.
func runsBackfill(ctx context.Context, fs *flag.FlagSet, dsn, schema, from, to string, args []string, stdout io.Writer) error {
	var (
		job  string
		argv []string
		err  error
	)
	if len(args) == 1 && args[0] != "--" {
		job = args[0]
		if err := sqllock.ValidateName(job); err != nil {
			return usageError{msg: err.Error()}
		}
	} else if job, argv, err = commandLine(fs, "runs backfill", "job name", args, ""); err != nil {
		return err
	}
	o := &occurrenceOptions{}
	for _, f := range []struct {
		name, value string
		t           *time.Time
	}{{"from", from, &o.fillFrom}, {"to", to, &o.fillTo}} {
		if *f.t, err = time.Parse(time.RFC3339, f.value); err != nil {
			return usageError{msg: fmt.Sprintf("runs backfill needs --%s TIME in RFC 3339 (2026-11-30T00:00:00Z), not %q", f.name, f.value)}
		}
	}
	if o.fillTo.Before(o.fillFrom) {
		return usageError{msg: "runs backfill: --to is before --from"}
	}
	t, err := openReady(ctx, dsn, schema)
	if err != nil {
		return err
	}
	l, err := ledger.New(t.d, ledger.Options{})
	if err != nil {
		t.Close()
		return usageError{msg: err.Error()}
	}
	if argv == nil {
		defer t.Close()
		return requestBackfill(ctx, l, job, o.fillFrom, o.fillTo, stdout)
	}
	jobs, err := l.Jobs(ctx, job)
	t.Close()
	switch {
	case err != nil:
		return err
	case len(jobs) == 0 || (jobs[0].Period == 0 && jobs[0].Cron == ""):
		return exitError{exitFailure, fmt.Errorf("job %q has no recorded schedule: its occurrences are those of sqllock run --every or --cron", job)}
	}
	j := jobs[0]
	o.every, o.phase, o.cron, o.tz = j.Period, j.Phase, j.Cron, j.Zone
	r := &runner{name: job, argv: argv, strategy: "table", ttl: 30 * time.Second, grace: 10 * time.Second}
	return r.runOccurrence(ctx, dsn, schema, o)
}

// requestBackfill asks job's replicas for the backfill from from to to,
// and says so.
func requestBackfill(ctx context.Context, l *ledger.Ledger, job string, from, to time.Time, stdout io.Writer) error {
	n, err := l.RequestBackfill(ctx, job, from, to)
	switch {
	case errors.Is(err, sqllock.ErrInvalidOptions):
		return exitError{exitUsage, err}
	case errors.Is(err, ledger.ErrUnknownJob), errors.Is(err, ledger.ErrBackfillPending):
		return exitError{exitFailure, err}
	case err != nil:
		return err
	}
	fmt.Fprintf(stdout, "sqllock: asked the replicas of %q to backfill %d occurrences from %s to %s: the next sqllock run or sqllock cron of the job runs them, each once (sqllock runs %s shows the request until then)\n",
		job, n, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), job)
	return nil
}

// runsVerbs are the actions of runs on a job.
var runsVerbs = map[string]bool{"forget": true, "pause": true, "resume": true, "trigger": true}

// runsAction does verb to job and says what it did.
func runsAction(ctx context.Context, l *ledger.Ledger, verb, job string, attempts bool, stdout io.Writer) error {
	switch verb {
	case "pause", "resume":
		fn, done, already := l.Pause, "paused: its replicas run none of its occurrences, and none counts as missed, until sqllock runs resume "+job, "was paused already"
		if verb == "resume" {
			fn, done, already = l.Resume, "resumed: its next due occurrence runs", "was not paused"
		}
		changed, err := fn(ctx, job)
		if err != nil {
			return err
		}
		if changed {
			fmt.Fprintf(stdout, "job %q %s\n", job, done)
		} else {
			fmt.Fprintf(stdout, "job %q %s\n", job, already)
		}
	case "forget":
		n, err := l.Forget(ctx, job, attempts)
		if err != nil {
			return err
		}
		what := "its attempts stay (runs forget --attempts deletes them)"
		if attempts {
			what = "and " + count(n, "attempt", "attempts") + " deleted"
		}
		fmt.Fprintf(stdout, "job %q forgotten: its schedule, pause and missed occurrences are gone; %s\n", job, what)
	case "trigger":
		key, err := l.Trigger(ctx, job)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\nmanual occurrence %s of %q pending: the next sqllock run of the job (or a sqllock cron replica) runs it, once across replicas\n", key, key, job)
	}
	return nil
}

// runRow is one attempt of an occurrence, as sqllock runs shows it.
type runRow struct {
	Job        string     `json:"job"`
	Occurrence string     `json:"occurrence"`
	Attempt    int        `json:"attempt"`
	State      string     `json:"state"` // running, succeeded, failed, abandoned, skipped or replaced
	Owner      string     `json:"owner"`
	Token      int64      `json:"token"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"` // nil while it runs
	// DurationMS runs from the start to the end, or to now while it runs.
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error,omitempty"`
	// TimedOut says a failed attempt ran past its --max-time.
	TimedOut bool `json:"timed_out"`
}

// missedRow is an occurrence no replica claimed within the grace time.
type missedRow struct {
	Job        string    `json:"job"`
	Occurrence string    `json:"occurrence"`
	Due        time.Time `json:"due"` // the occurrence's time
}

// missedJobRow sums up a job's missed occurrences.
type missedJobRow struct {
	Job   string    `json:"job"`
	Count int       `json:"count"`
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
}

// backfillRow is the range of a backfill asked for (sqllock runs
// backfill JOB without a command).
type backfillRow struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// jobRow is a job the ledger records.
type jobRow struct {
	Job      string     `json:"job"`
	Schedule string     `json:"schedule"` // "every 1h", "cron 0 2 * * * Europe/Berlin", or "" for keyed occurrences
	Paused   bool       `json:"paused"`
	PausedAt *time.Time `json:"paused_at,omitempty"` // while paused
	Pending  string     `json:"pending,omitempty"`   // a manual occurrence asked for
	// Backfill is a backfill asked of the job's replicas and not run yet.
	Backfill *backfillRow `json:"backfill,omitempty"`
	// Health is paused, failing, missed, late, new or up (see
	// ledger.Health); FailingStreak and SuccessStreak count its latest
	// finished attempts that failed (or were abandoned), or succeeded, in
	// a row; Late is its occurrence unclaimed inside its grace.
	Health        string     `json:"health"`
	FailingStreak int        `json:"failing_streak"`
	SuccessStreak int        `json:"success_streak"`
	Late          *missedRow `json:"late,omitempty"`
	// period and phase are a job's run with --every (serve's next
	// occurrence); 0 otherwise.
	period, phase time.Duration
}

// runsView is what sqllock runs shows.
type runsView struct {
	Runs []runRow `json:"runs"`
	// Missed lists the latest --limit missed occurrences; MissedJobs
	// sums them all up per job.
	Missed     []missedRow    `json:"missed"`
	MissedJobs []missedJobRow `json:"missed_jobs"`
	Jobs       []jobRow       `json:"jobs"`
	grace      time.Duration
}

// readRuns reads the latest limit attempts of job ("": every job), the
// jobs' health and the occurrences missed beyond health's grace.
func readRuns(ctx context.Context, l *ledger.Ledger, job string, limit int, health ledger.HealthOptions) (runsView, error) {
	v := runsView{Runs: []runRow{}, Missed: []missedRow{}, MissedJobs: []missedJobRow{}, Jobs: []jobRow{}, grace: health.Grace}
	infos, err := l.Runs(ctx, job, limit)
	if err != nil {
		return v, err
	}
	v.Runs = appendRunRows(v.Runs, infos, time.Now())
	jobs, err := l.Jobs(ctx, job)
	if err != nil {
		return v, err
	}
	healths, missed, err := l.Health(ctx, job, health)
	if err != nil {
		return v, err
	}
	healthOf := make(map[string]ledger.JobHealth, len(healths))
	for _, h := range healths {
		healthOf[h.Job] = h
	}
	for _, j := range jobs {
		row := jobRow{Job: j.Job, Paused: j.Paused, Pending: j.Pending, period: j.Period, phase: j.Phase}
		if !j.Backfill.IsZero() {
			row.Backfill = &backfillRow{From: j.Backfill.From, To: j.Backfill.To}
		}
		switch {
		case j.Cron != "":
			row.Schedule = "cron " + j.Cron + " " + j.Zone
		case j.Period > 0 && j.Phase > 0:
			row.Schedule = fmt.Sprintf("every %v phase %v", j.Period, j.Phase)
		case j.Period > 0:
			row.Schedule = fmt.Sprintf("every %v", j.Period)
		}
		if j.Paused {
			row.PausedAt = &j.PausedAt
		}
		setHealth(&row, healthOf[j.Job])
		v.Jobs = append(v.Jobs, row)
	}
	for _, m := range ledger.SumMissed(missed) {
		v.MissedJobs = append(v.MissedJobs, missedJobRow{Job: m.Job, Count: m.Count, First: m.First, Last: m.Last})
	}
	for _, m := range missed[max(len(missed)-limit, 0):] {
		v.Missed = append(v.Missed, missedRow{Job: m.Job, Occurrence: m.Occurrence, Due: m.At})
	}
	return v, nil
}

// setHealth sets row's health fields from h (a job that h does not know,
// new since the jobs were read, is new).
func setHealth(row *jobRow, h ledger.JobHealth) {
	row.Health = cmp.Or(string(h.Health), string(ledger.HealthNew))
	row.FailingStreak, row.SuccessStreak = h.Failed, h.Succeeded
	if h.Late != nil {
		row.Late = &missedRow{Job: h.Job, Occurrence: h.Late.Occurrence, Due: h.Late.At}
	}
}

// appendRunRows appends the attempts infos to rows as sqllock runs shows
// them, the duration of a running one up to now.
func appendRunRows(rows []runRow, infos []ledger.RunInfo, now time.Time) []runRow {
	for _, in := range infos {
		row := runRow{Job: in.Job, Occurrence: in.Occurrence, Attempt: in.Attempt, State: string(in.State),
			Owner: in.Owner, Token: in.Token, StartedAt: in.StartedAt, Error: in.Err, TimedOut: in.TimedOut}
		end := now
		if !in.FinishedAt.IsZero() {
			end = in.FinishedAt
			row.FinishedAt = &in.FinishedAt
		}
		row.DurationMS = max(end.Sub(in.StartedAt), 0).Milliseconds()
		rows = append(rows, row)
	}
	return rows
}

// writeJSON writes v as one JSON object, indented unless for --watch.
func (v runsView) writeJSON(w io.Writer, indent bool) error {
	enc := json.NewEncoder(w)
	if indent {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}

// writeTable writes v as tables: the attempts, the jobs paused or with a
// manual occurrence pending, then the missed occurrences summed up per job
// under a MISSED heading.
func (v runsView) writeTable(w io.Writer) error {
	zone, _ := time.Now().Zone()
	if len(v.Runs) == 0 {
		fmt.Fprintln(w, "no runs recorded")
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "JOB\tOCCURRENCE\tATTEMPT\tSTATE\tOWNER\tTOKEN\tSTARTED (%s)\tDURATION\tERROR\n", zone)
		for _, r := range v.Runs {
			d := (time.Duration(r.DurationMS) * time.Millisecond).String()
			if r.FinishedAt == nil {
				d += " so far"
			}
			errText, state := "-", r.State
			if r.Error != "" {
				errText = cell(r.Error)
			}
			if r.TimedOut {
				state += " (timed out)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(r.Job), cell(r.Occurrence), r.Attempt, state,
				cell(r.Owner), strconv.FormatInt(r.Token, 10), r.StartedAt.Local().Format("2006-01-02 15:04:05"), d, errText)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	var marked []jobRow // the jobs not up, or with a manual occurrence pending
	for _, j := range v.Jobs {
		if j.Health != string(ledger.HealthUp) || j.Pending != "" || j.Backfill != nil {
			marked = append(marked, j)
		}
	}
	if len(marked) > 0 {
		fmt.Fprintln(w, "\nJOBS not up (paused, failing, missed, late or new) or with a manual occurrence or backfill pending:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "JOB\tSCHEDULE\tSTATE\tFAILED IN A ROW\tPENDING\n")
		for _, j := range marked {
			state, sched, pending := j.Health, j.Schedule, j.Pending
			switch {
			case j.Paused:
				state = "paused since " + j.PausedAt.Local().Format("2006-01-02 15:04:05")
			case j.Late != nil:
				state = "late: " + j.Late.Occurrence + " unclaimed"
			}
			if sched == "" {
				sched = "-"
			}
			if j.Backfill != nil {
				pending = strings.TrimPrefix(pending+", ", ", ") + "backfill " + j.Backfill.From.UTC().Format(time.RFC3339) +
					" to " + j.Backfill.To.UTC().Format(time.RFC3339)
			}
			if pending == "" {
				pending = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", cell(j.Job), cell(sched), state, j.FailingStreak, cell(pending))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(v.MissedJobs) == 0 {
		return nil
	}
	within := "before their next occurrence's time"
	if v.grace > 0 {
		within = "within --missed-after " + v.grace.String()
	}
	total := 0
	for _, m := range v.MissedJobs {
		total += m.Count
	}
	fmt.Fprintf(w, "\nMISSED: %s of %s no replica claimed %s (sqllock runs forget JOB retires a job)\n",
		count(total, "occurrence", "occurrences"), count(len(v.MissedJobs), "job", "jobs"), within)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "JOB\tMISSED\tFIRST (%s)\tLAST (%s)\n", zone, zone)
	for _, m := range v.MissedJobs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", cell(m.Job), m.Count, m.First.Local().Format("2006-01-02 15:04:05"),
			m.Last.Local().Format("2006-01-02 15:04:05"))
	}
	return tw.Flush()
}
