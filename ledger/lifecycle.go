package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// ErrUnknownJob is returned for a job the ledger has no row of: no Run of
// it has claimed an attempt (or it was forgotten since).
var ErrUnknownJob = errors.New("ledger: unknown job")

// JobInfo is a job as the ledger records it.
type JobInfo struct {
	Job string
	// Period and Phase are those of a job run with Every (0 otherwise);
	// Cron and Zone the expression and time zone of one run with Cron
	// ("" otherwise). A job with neither has occurrences its callers
	// name.
	Period, Phase time.Duration
	Cron, Zone    string
	// Grace is the job's own grace (see Occurrence.Grace; 0 for none).
	Grace time.Duration
	// FirstSeen is the start of its history under this schedule (see
	// Missed), LastSeen its latest claim, on the database clock.
	FirstSeen, LastSeen time.Time
	// Paused says the job is paused, since PausedAt; ResumedAt is when it
	// was resumed after its last pause (zero while paused or if never
	// paused).
	Paused              bool
	PausedAt, ResumedAt time.Time
	// Pending is the key of a manual occurrence asked for (see Trigger)
	// and not run yet ("" for none).
	Pending string
	// Backfill is a backfill asked of the job's replicas (see
	// RequestBackfill) and not run yet (zero for none).
	Backfill Range
}

// Scheduled reports whether the job has a schedule (Every or Cron).
func (j JobInfo) Scheduled() bool { return j.Period > 0 || j.Cron != "" }

// Jobs returns the jobs the ledger records (job alone, if not ""), by
// name. A job's row whose backfill range is unreadable (not written by a
// ledger) is an error naming the job.
func (l *Ledger) Jobs(ctx context.Context, job string) ([]JobInfo, error) {
	if job != "" {
		if err := validateJob(job); err != nil {
			return nil, err
		}
	}
	rows, _, err := l.runs.Jobs(ctx, job)
	if err != nil {
		return nil, fmt.Errorf("ledger: jobs: %w", err)
	}
	infos := make([]JobInfo, 0, len(rows))
	for _, r := range rows {
		j, err := jobInfo(r)
		if err != nil {
			return nil, fmt.Errorf("ledger: jobs: %s: %w", r.Job, err)
		}
		infos = append(infos, j)
	}
	return infos, nil
}

// jobInfo is r as a JobInfo, or an error if its backfill range is not
// one the ledger writes.
func jobInfo(r dialect.JobSchedule) (JobInfo, error) {
	fill, err := parseRange(r.BackfillFrom, r.BackfillTo)
	if err != nil {
		return JobInfo{}, err
	}
	j := JobInfo{Backfill: fill, Job: r.Job, Period: r.Period, Phase: r.Phase, Grace: r.Grace, FirstSeen: r.FirstSeen,
		LastSeen: r.LastSeen, Paused: r.Paused(), PausedAt: r.PausedAt, ResumedAt: r.ResumedAt, Pending: r.Pending}
	if tz, expr, ok := strings.Cut(strings.TrimPrefix(r.Spec, "CRON_TZ="), " "); ok {
		j.Cron, j.Zone = expr, tz
	}
	return j, nil
}

// Now returns the database's time, the clock on which scheduled
// occurrences are named (see Every, Cron).
func (l *Ledger) Now(ctx context.Context) (time.Time, error) {
	now, err := l.runs.Now(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("ledger: read the database's time: %w", err)
	}
	return now, nil
}

// Pause pauses job: until Resume, a Run of its scheduled or keyed
// occurrences makes no attempt (Result.State is StatePaused), and none of
// its occurrences due meanwhile counts as missed. Attempts running go on.
// Manual occurrences still run. It reports false when job was paused
// already, and an error wrapping ErrUnknownJob when the ledger has no row
// of it.
func (l *Ledger) Pause(ctx context.Context, job string) (bool, error) {
	return l.change(ctx, job, "pause", ChangePaused, l.runs.Pause)
}

// Resume resumes paused job: its next due occurrence runs, and the
// occurrences due while it was paused never count as missed. It reports
// false when job was not paused, and an error wrapping ErrUnknownJob when
// the ledger has no row of it.
func (l *Ledger) Resume(ctx context.Context, job string) (bool, error) {
	return l.change(ctx, job, "resume", ChangeResumed, l.runs.Resume)
}

// change makes a change of job's row, telling an unknown job from one
// that needed no change.
func (l *Ledger) change(ctx context.Context, job, what string, c Change, fn func(context.Context, string) (bool, error)) (bool, error) {
	if err := validateJob(job); err != nil {
		return false, err
	}
	ok, err := fn(ctx, job)
	if err != nil {
		return false, fmt.Errorf("ledger: %s %s: %w", what, job, err)
	}
	if ok {
		l.changed(ctx, JobChange{Job: job, Change: c})
		return true, nil
	}
	st, err := l.runs.Job(ctx, job)
	if err != nil {
		return false, fmt.Errorf("ledger: %s %s: %w", what, job, err)
	}
	if !st.Known {
		return false, fmt.Errorf("%w %q", ErrUnknownJob, job)
	}
	return false, nil
}

// Forget removes job's row: its schedule, its pause, its pending manual
// occurrence and backfill, and so every occurrence Missed would report of it. Its
// attempts stay (Runs lists them) unless attempts is true; it returns how
// many it deleted. A Run of the job afterwards starts its history anew,
// from then. It returns an error wrapping ErrUnknownJob when the ledger
// had nothing of job to forget.
func (l *Ledger) Forget(ctx context.Context, job string, attempts bool) (int, error) {
	if err := validateJob(job); err != nil {
		return 0, err
	}
	had, n, err := l.runs.Forget(ctx, job, attempts)
	if err != nil {
		return n, fmt.Errorf("ledger: forget %s: %w", job, err)
	}
	if !had && n == 0 {
		return 0, fmt.Errorf("%w %q", ErrUnknownJob, job)
	}
	l.changed(ctx, JobChange{Job: job, Change: ChangeForgotten, Attempts: n})
	return n, nil
}

// Trigger asks for a manual occurrence of job, to be run by one of the
// job's replicas, exactly once across them: the next Run of a scheduled
// occurrence of the job reports it (Result.Pending), and RunPending runs
// it. It consumes no scheduled occurrence, and runs even while the job is
// paused. It returns the occurrence's key (ManualPrefix and the
// database's time); if one is pending already, that one's key, as one
// manual occurrence is pending at a time. It returns an error wrapping
// ErrUnknownJob when the ledger has no row of job.
func (l *Ledger) Trigger(ctx context.Context, job string) (string, error) {
	if err := validateJob(job); err != nil {
		return "", err
	}
	st, err := l.runs.Job(ctx, job)
	if err != nil {
		return "", fmt.Errorf("ledger: trigger %s: %w", job, err)
	}
	switch {
	case !st.Known:
		return "", fmt.Errorf("%w %q", ErrUnknownJob, job)
	case st.Pending != "":
		return st.Pending, nil
	}
	if err := l.runs.Trigger(ctx, job, ManualPrefix+st.Now.Format(TimeFormat)); err != nil {
		return "", fmt.Errorf("ledger: trigger %s: %w", job, err)
	}
	if st, err = l.runs.Job(ctx, job); err != nil {
		return "", fmt.Errorf("ledger: trigger %s: %w", job, err)
	}
	if st.Pending == "" { // forgotten, or run, meanwhile
		return "", fmt.Errorf("%w %q", ErrUnknownJob, job)
	}
	l.changed(ctx, JobChange{Job: job, Change: ChangeTriggered, Occurrence: st.Pending})
	return st.Pending, nil
}

// RunPending runs fn for job's pending manual occurrence (see Trigger), as
// Run runs an occurrence: once across the replicas that call it, recorded
// under its key; the occurrence is pending no more once an attempt's
// outcome is recorded (a failed one is retried by the Run that made it,
// as Options.Retries allow). With none pending, it returns a Result with
// an empty Occurrence and Ran false.
func (l *Ledger) RunPending(ctx context.Context, job string, fn func(ctx context.Context, r *Run) error) (Result, error) {
	if err := validateJob(job); err != nil {
		return Result{}, err
	}
	st, err := l.runs.Job(ctx, job)
	if err != nil {
		return Result{}, fmt.Errorf("ledger: %s: read the job: %w", job, err)
	}
	if st.Pending == "" {
		return Result{}, nil
	}
	return l.Run(ctx, job, Occurrence{key: st.Pending, manual: true}, fn)
}
