package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

// RunInfo is a recorded attempt of an occurrence.
type RunInfo struct {
	Job        string
	Occurrence string
	Attempt    int
	State      State
	Owner      string
	Token      int64
	// StartedAt is when the attempt was claimed, FinishedAt when its
	// outcome was recorded or it was marked abandoned (zero while
	// running), both on the database clock, in UTC.
	StartedAt  time.Time
	FinishedAt time.Time
	// Err is a failed attempt's error text (at most MaxErrLen bytes).
	Err string
	// TimedOut says the attempt failed because it ran past its max
	// runtime (see ErrTimedOut).
	TimedOut bool
}

// Runs returns up to limit recorded attempts of job ("" for every job),
// the latest started first. An attempt shown running may belong to a
// runner that died: the next claimer of its occurrence marks it abandoned.
func (l *Ledger) Runs(ctx context.Context, job string, limit int) ([]RunInfo, error) {
	if job != "" {
		if err := validateJob(job); err != nil {
			return nil, err
		}
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: ledger: limit %d is not positive", sqllock.ErrInvalidOptions, limit)
	}
	recs, err := l.runs.Runs(ctx, job, limit)
	if err != nil {
		return nil, fmt.Errorf("ledger: runs: %w", err)
	}
	infos := make([]RunInfo, len(recs))
	for i, r := range recs {
		infos[i] = RunInfo{Job: r.Job, Occurrence: r.Occurrence, Attempt: r.Attempt, State: State(r.State),
			Owner: r.Owner, Token: r.Token, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, Err: r.Err,
			TimedOut: isTimedOut(State(r.State), r.Err)}
	}
	return infos, nil
}

// MissedRun is an occurrence of a scheduled job that no runner claimed.
type MissedRun struct {
	Job        string
	Occurrence string
	// At is the occurrence's time; Period the job's (0 for a job run
	// with Cron, whose expression Cron is).
	At     time.Time
	Period time.Duration
	Cron   string
}

// MaxMissedWindow is the most occurrences of a job, back from the latest
// one past its grace, that Missed looks at.
const MaxMissedWindow = 10000

// Missed returns the occurrences of job ("" for every job) with a schedule
// (see Every, Cron) that have no attempt although their time plus grace
// has passed on the database clock, the earliest first. Only occurrences
// since the job was first seen with its current schedule count (the
// ledger's Reap moves that on; a changed schedule starts it again), none
// due while the job was paused (its last pause: see Pause), and at most
// the last MaxMissedWindow of a job. With grace 0, each job's own grace
// applies (see Occurrence.Grace), and for a job that has none, the time to
// its next occurrence. A forgotten job has none (see Forget).
//
// A Run takes a scheduled occurrence only until half the way to the next
// (see Cron), so an occurrence unclaimed by then stays missed.
func (l *Ledger) Missed(ctx context.Context, job string, grace time.Duration) ([]MissedRun, error) {
	jobs, now, err := l.scheduled(ctx, "missed", job, grace)
	if err != nil {
		return nil, err
	}
	return l.missed(ctx, jobs, now, grace)
}

// scheduled validates the arguments of Missed and Late (what names the
// call) and reads the rows of job ("" for every job), with the database's
// time.
func (l *Ledger) scheduled(ctx context.Context, what, job string, grace time.Duration) ([]dialect.JobSchedule, time.Time, error) {
	if job != "" {
		if err := validateJob(job); err != nil {
			return nil, time.Time{}, err
		}
	}
	if grace < 0 {
		return nil, time.Time{}, fmt.Errorf("%w: ledger: grace %v is negative", sqllock.ErrInvalidOptions, grace)
	}
	jobs, now, err := l.runs.Jobs(ctx, job)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("ledger: %s: %w", what, err)
	}
	return jobs, now, nil
}

// missed is Missed of the job rows jobs, read at now.
func (l *Ledger) missed(ctx context.Context, jobs []dialect.JobSchedule, now time.Time, grace time.Duration) ([]MissedRun, error) {
	var missed []MissedRun
	for _, j := range jobs {
		s, expr, err := jobSchedule(j)
		if err != nil {
			return nil, fmt.Errorf("ledger: missed: %s: %w", j.Job, err)
		}
		if s == nil {
			continue
		}
		g := grace
		if g == 0 {
			g = j.Grace
		}
		// The latest occurrence past its grace (by default: one whose
		// next occurrence has come).
		var last time.Time
		if g > 0 {
			last = s.atOrBefore(now.Add(-g))
		} else if latest := s.atOrBefore(now); !latest.IsZero() {
			last = s.atOrBefore(latest.Add(-time.Microsecond))
		}
		// The first occurrence of the job's history: the one nearest its
		// first claim.
		first := firstOccurrence(s, j.FirstSeen)
		if last.IsZero() || first.IsZero() || last.Before(first) {
			l.checkedMissed(ctx, j.Job, nil)
			continue
		}
		ts := between(s, first, last, MaxMissedWindow)
		seen, err := l.runs.Occurrences(ctx, j.Job, ts[0].Format(TimeFormat), last.Format(TimeFormat))
		if err != nil {
			return nil, fmt.Errorf("ledger: missed: %w", err)
		}
		have := make(map[string]bool, len(seen))
		for _, o := range seen {
			have[o] = true
		}
		n := len(missed)
		for _, t := range ts {
			if k := t.Format(TimeFormat); !have[k] && !pausedAt(j, t) {
				missed = append(missed, MissedRun{Job: j.Job, Occurrence: k, At: t, Period: j.Period, Cron: expr})
			}
		}
		l.checkedMissed(ctx, j.Job, missed[n:])
	}
	return missed, nil
}

// MissedJob sums up a job's missed occurrences (see Missed).
type MissedJob struct {
	Job string
	// Count is how many (at most MaxMissedWindow); First and Last the
	// times of the earliest and the latest.
	Count       int
	First, Last time.Time
}

// SumMissed sums up missed (as Missed returns it) per job, in the order of
// the jobs' first missed occurrences.
func SumMissed(missed []MissedRun) []MissedJob {
	var (
		sums []MissedJob
		at   = map[string]int{}
	)
	for _, m := range missed {
		i, ok := at[m.Job]
		if !ok {
			i = len(sums)
			at[m.Job] = i
			sums = append(sums, MissedJob{Job: m.Job, First: m.At})
		}
		s := &sums[i]
		s.Count++
		if m.At.Before(s.First) {
			s.First = m.At
		}
		if m.At.After(s.Last) {
			s.Last = m.At
		}
	}
	return sums
}

// reapBatch is the most attempts one statement of Reap deletes.
const reapBatch = 1000

// Reap deletes the attempts that finished (or, still marked running,
// started) more than olderThan ago on the database clock, in batches, and
// moves the start of each scheduled job's history (see Missed) on to then.
// It returns the number of attempts deleted. olderThan must exceed the
// longest run, or a running attempt's row could go (its runner would then
// fail to record its outcome, and its occurrence could run again). The
// lock table's leases of the attempts are reaped with the lock table (see
// sqllock.Reaper).
func (l *Ledger) Reap(ctx context.Context, olderThan time.Duration) (int, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("%w: ledger: reap age %v is not positive", sqllock.ErrInvalidOptions, olderThan)
	}
	total := 0
	for {
		n, err := l.runs.Reap(ctx, olderThan, reapBatch)
		total += n
		if err != nil {
			return total, fmt.Errorf("ledger: reap: %w", err)
		}
		if n < reapBatch {
			return total, nil
		}
	}
}
