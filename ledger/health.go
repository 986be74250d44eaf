package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

// ErrTimedOut is the cause with which an attempt's function's ctx ends
// when it has run for Options.MaxRuntime. An attempt that ran past it, or
// whose function returned an error wrapping ErrTimedOut (a supervisor
// that enforces its own limit), is recorded failed with an error text
// that contains ErrTimedOut's (see RunInfo.TimedOut).
var ErrTimedOut = errors.New("timed out: ran past its max runtime")

// timedOut returns fn's error err as the attempt records it: wrapping
// ErrTimedOut if the attempt's ctx ended with it, even if fn returned nil.
func timedOut(err error, fctx context.Context, maxRuntime time.Duration) error {
	switch {
	case errors.Is(err, ErrTimedOut) || !errors.Is(context.Cause(fctx), ErrTimedOut):
		return err
	case err == nil:
		return fmt.Errorf("%w (%v)", ErrTimedOut, maxRuntime)
	default:
		return fmt.Errorf("%w (%v): %w", ErrTimedOut, maxRuntime, err)
	}
}

// isTimedOut reports whether a recorded attempt timed out.
func isTimedOut(state State, errText string) bool {
	return state == StateFailed && strings.Contains(errText, ErrTimedOut.Error())
}

// Health is a job's state of health, as Ledger.Health judges it.
type Health string

// The states of health of a job, each taking precedence over the next.
const (
	// HealthPaused: the job is paused (see Ledger.Pause).
	HealthPaused Health = "paused"
	// HealthFailing: its latest finished attempts failed (or were
	// abandoned) HealthOptions.FailAfter times in a row, and fewer than
	// RecoverAfter succeeded since.
	HealthFailing Health = "failing"
	// HealthMissed: an occurrence of its schedule passed its grace
	// unclaimed (see Ledger.Missed) after its latest attempt started.
	HealthMissed Health = "missed"
	// HealthLate: its latest due occurrence is unclaimed, inside its
	// grace (see Ledger.Late).
	HealthLate Health = "late"
	// HealthNew: no attempt of it has finished.
	HealthNew Health = "new"
	// HealthUp: none of the above.
	HealthUp Health = "up"
)

// HealthOptions configure Ledger.Health. The zero value is usable.
type HealthOptions struct {
	// Grace is Missed's grace (0: each job's own, see Missed).
	Grace time.Duration
	// FailAfter is how many failed attempts in a row make a job failing
	// (default 3); RecoverAfter how many succeeded ones in a row then
	// make it recover (default 1).
	FailAfter, RecoverAfter int
	// Attempts is how many of a job's latest attempts are read (default
	// 100; at least FailAfter+RecoverAfter).
	Attempts int
}

// withDefaults returns o with its defaults, or an error wrapping
// sqllock.ErrInvalidOptions.
func (o HealthOptions) withDefaults() (HealthOptions, error) {
	if o.Grace < 0 || o.FailAfter < 0 || o.RecoverAfter < 0 || o.Attempts < 0 {
		return o, fmt.Errorf("%w: ledger: health options must not be negative", sqllock.ErrInvalidOptions)
	}
	if o.FailAfter == 0 {
		o.FailAfter = 3
	}
	if o.RecoverAfter == 0 {
		o.RecoverAfter = 1
	}
	if o.Attempts == 0 {
		o.Attempts = 100
	}
	o.Attempts = max(o.Attempts, o.FailAfter+o.RecoverAfter)
	return o, nil
}

// Streak is what a job's latest finished attempts say of its failures.
type Streak struct {
	// Failed counts its latest finished attempts that failed or were
	// abandoned, in a row; Succeeded those that succeeded, in a row (one
	// of the two is 0).
	Failed, Succeeded int
	// Failing says the job is failing: the latest run of at least
	// failAfter failed attempts is not followed by recoverAfter
	// succeeded ones in a row.
	Failing bool
}

// StreakOf returns the streak of attempts (a job's, the latest first, as
// Runs returns them; those running are passed over) for the thresholds
// failAfter and recoverAfter (a value below 1 counts as 1). A job whose
// attempts given decide neither way (no run of failAfter failures or of
// recoverAfter successes) is not failing.
func StreakOf(attempts []RunInfo, failAfter, recoverAfter int) Streak {
	var (
		s       Streak
		run     int  // the length of the current run of like outcomes
		failed  bool // the current run's outcome
		decided bool
	)
	for _, a := range attempts {
		if a.State == StateRunning {
			continue
		}
		f := a.State == StateFailed || a.State == StateAbandoned
		if run > 0 && f != failed {
			if s.Failed == 0 && s.Succeeded == 0 {
				s.Failed, s.Succeeded = run*b2i(failed), run*b2i(!failed)
			}
			run = 0
		}
		failed = f
		run++
		switch {
		case decided:
		case failed && run >= failAfter:
			s.Failing, decided = true, true
		case !failed && run >= recoverAfter:
			decided = true
		}
	}
	if s.Failed == 0 && s.Succeeded == 0 {
		s.Failed, s.Succeeded = run*b2i(failed), run*b2i(!failed)
	}
	return s
}

// b2i is 1 for true, 0 for false.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// JobHealth is a job's health (see Ledger.Health).
type JobHealth struct {
	Job    string
	Health Health
	Streak
	// Missed counts its missed occurrences (see Missed), LastMissed is
	// the time of the latest (zero if none); Late is its late occurrence
	// (see Late), nil if none.
	Missed     int
	LastMissed time.Time
	Late       *MissedRun
}

// Health returns the health of job ("" for every job), by name, with the
// missed occurrences it found (as Missed returns them, and told to a
// MissedObserver), all on one read of the jobs and the database's clock.
// It reads each job's latest opts.Attempts attempts, and tells a
// HealthObserver of each job's health: 1 statement, 1 per job, and at
// most 2 more per scheduled job.
func (l *Ledger) Health(ctx context.Context, job string, opts HealthOptions) ([]JobHealth, []MissedRun, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, nil, err
	}
	if job != "" {
		if err := validateJob(job); err != nil {
			return nil, nil, err
		}
	}
	jobs, now, err := l.runs.Jobs(ctx, job)
	if err != nil {
		return nil, nil, fmt.Errorf("ledger: health: %w", err)
	}
	missed, err := l.missed(ctx, jobs, now, opts.Grace)
	if err != nil {
		return nil, nil, err
	}
	late, err := l.late(ctx, jobs, now, opts.Grace)
	if err != nil {
		return nil, nil, err
	}
	sums := map[string]MissedJob{}
	for _, m := range SumMissed(missed) {
		sums[m.Job] = m
	}
	lateOf := map[string]*MissedRun{}
	for i := range late {
		lateOf[late[i].Job] = &late[i]
	}
	hs := make([]JobHealth, 0, len(jobs))
	for _, row := range jobs {
		j, err := jobInfo(row)
		if err != nil {
			return nil, nil, fmt.Errorf("ledger: health: %s: %w", row.Job, err)
		}
		attempts, err := l.Runs(ctx, j.Job, opts.Attempts)
		if err != nil {
			return nil, nil, err
		}
		h := JobHealth{Job: j.Job, Streak: StreakOf(attempts, opts.FailAfter, opts.RecoverAfter),
			Missed: sums[j.Job].Count, LastMissed: sums[j.Job].Last, Late: lateOf[j.Job]}
		h.Health = judge(j, h, attempts)
		hs = append(hs, h)
		l.checkedHealth(ctx, h)
	}
	return hs, missed, nil
}

// judge returns the health of job j from h's streak, missed occurrences
// and late occurrence, and its latest attempts.
func judge(j JobInfo, h JobHealth, attempts []RunInfo) Health {
	finished := false
	for _, a := range attempts {
		finished = finished || a.State != StateRunning
	}
	switch {
	case j.Paused:
		return HealthPaused
	case h.Failing:
		return HealthFailing
	case h.Missed > 0 && (len(attempts) == 0 || h.LastMissed.After(attempts[0].StartedAt)):
		return HealthMissed
	case h.Late != nil:
		return HealthLate
	case !finished:
		return HealthNew
	}
	return HealthUp
}

// Late returns the late occurrences of job ("" for every job), by job:
// for each job with a schedule, its latest occurrence whose time has come
// on the database clock, not due while the job was paused, if no attempt
// of it was made and its grace has not passed. grace is Missed's (0: the
// job's own, or the time to its next occurrence): a late occurrence is
// missed once its grace has passed.
func (l *Ledger) Late(ctx context.Context, job string, grace time.Duration) ([]MissedRun, error) {
	jobs, now, err := l.scheduled(ctx, "late", job, grace)
	if err != nil {
		return nil, err
	}
	return l.late(ctx, jobs, now, grace)
}

// late is Late of the job rows jobs, read at now.
func (l *Ledger) late(ctx context.Context, jobs []dialect.JobSchedule, now time.Time, grace time.Duration) ([]MissedRun, error) {
	var late []MissedRun
	for _, j := range jobs {
		s, expr, err := jobSchedule(j)
		if err != nil {
			return nil, fmt.Errorf("ledger: late: %s: %w", j.Job, err)
		}
		if s == nil {
			continue
		}
		at := s.atOrBefore(now)
		if at.IsZero() || at.Before(firstOccurrence(s, j.FirstSeen)) || pausedAt(j, at) {
			continue
		}
		end := s.after(at)
		if g := cmp.Or(grace, j.Grace); g > 0 {
			end = at.Add(g)
		}
		if !now.Before(end) {
			continue
		}
		k := at.Format(TimeFormat)
		seen, err := l.runs.Occurrences(ctx, j.Job, k, k)
		if err != nil {
			return nil, fmt.Errorf("ledger: late: %w", err)
		}
		if len(seen) == 0 {
			late = append(late, MissedRun{Job: j.Job, Occurrence: k, At: at, Period: j.Period, Cron: expr})
		}
	}
	return late, nil
}

// jobSchedule returns the schedule of job row j (nil for a job without
// one) and its cron expression ("" for none).
func jobSchedule(j dialect.JobSchedule) (schedule, string, error) {
	switch {
	case j.Spec != "":
		c, err := parseSpec(j.Spec)
		if err != nil {
			return nil, "", err
		}
		return c, c.expr, nil
	case j.Period > 0:
		return periodic{j.Period, j.Phase}, "", nil
	}
	return nil, "", nil
}

// firstOccurrence returns the first occurrence of s's in a job's history
// that starts at firstSeen: the one nearest it.
func firstOccurrence(s schedule, firstSeen time.Time) time.Time {
	first := s.atOrBefore(firstSeen)
	if next := s.after(firstSeen); first.IsZero() || (!next.IsZero() && next.Sub(firstSeen) < firstSeen.Sub(first)) {
		first = next
	}
	return first
}

// pausedAt reports whether job row j was paused at t (its last pause).
func pausedAt(j dialect.JobSchedule, t time.Time) bool {
	return !j.PausedAt.IsZero() && !t.Before(j.PausedAt) && (j.ResumedAt.IsZero() || t.Before(j.ResumedAt))
}
