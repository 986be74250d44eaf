package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/sqllock/sqllock"
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
			Owner: r.Owner, Token: r.Token, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, Err: r.Err}
	}
	return infos, nil
}

// MissedRun is an occurrence of a periodic job that no runner claimed.
type MissedRun struct {
	Job        string
	Occurrence string
	// At is the occurrence's time; Period the job's.
	At     time.Time
	Period time.Duration
}

// MaxMissedWindow is the most periods of a job, back from the latest
// occurrence past its grace, that Missed looks at.
const MaxMissedWindow = 10000

// Missed returns the occurrences of job ("" for every job) with a period
// (see Every) that have no attempt although their time plus grace has
// passed on the database clock, the earliest first. Only occurrences since
// the job was first seen with its current period and phase count (the
// ledger's Reap moves that on), and at most the last MaxMissedWindow
// periods. With grace 0, each job's own grace applies (see
// Occurrence.Grace), and one period for a job that has none.
//
// Every derives an occurrence from the database's time only within half a
// period of it, so an occurrence unclaimed by then stays missed.
func (l *Ledger) Missed(ctx context.Context, job string, grace time.Duration) ([]MissedRun, error) {
	if job != "" {
		if err := validateJob(job); err != nil {
			return nil, err
		}
	}
	if grace < 0 {
		return nil, fmt.Errorf("%w: ledger: grace %v is negative", sqllock.ErrInvalidOptions, grace)
	}
	jobs, now, err := l.runs.Jobs(ctx, job)
	if err != nil {
		return nil, fmt.Errorf("ledger: missed: %w", err)
	}
	var missed []MissedRun
	for _, j := range jobs {
		if j.Period <= 0 {
			continue
		}
		g := grace
		if g == 0 {
			g = j.Grace
		}
		if g == 0 {
			g = j.Period
		}
		first := nearest(j.FirstSeen, j.Period, j.Phase)
		last := nearest(now.Add(-g), j.Period, j.Phase)
		if last.Add(g).After(now) {
			last = last.Add(-j.Period)
		}
		if last.Before(first) {
			l.checkedMissed(ctx, j.Job, nil)
			continue
		}
		if n := int64(last.Sub(first) / j.Period); n >= MaxMissedWindow {
			first = last.Add(-(MaxMissedWindow - 1) * j.Period)
		}
		seen, err := l.runs.Occurrences(ctx, j.Job, first.Format(TimeFormat), last.Format(TimeFormat))
		if err != nil {
			return nil, fmt.Errorf("ledger: missed: %w", err)
		}
		have := make(map[string]bool, len(seen))
		for _, o := range seen {
			have[o] = true
		}
		n := len(missed)
		for t := first; !t.After(last); t = t.Add(j.Period) {
			if k := t.Format(TimeFormat); !have[k] {
				missed = append(missed, MissedRun{Job: j.Job, Occurrence: k, At: t, Period: j.Period})
			}
		}
		l.checkedMissed(ctx, j.Job, missed[n:])
	}
	return missed, nil
}

// reapBatch is the most attempts one statement of Reap deletes.
const reapBatch = 1000

// Reap deletes the attempts that finished (or, still marked running,
// started) more than olderThan ago on the database clock, in batches, and
// moves the start of each periodic job's history (see Missed) on to then.
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
