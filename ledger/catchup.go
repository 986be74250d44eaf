package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqllock/sqllock"
)

// CatchUp is what a Run of a scheduled occurrence does with the job's
// occurrences missed before it, after downtime (see Occurrence.CatchUp).
type CatchUp string

// The catch-up policies. Quartz calls them misfire instructions "do
// nothing", "fire once now" and "fire all"; Temporal runs missed actions
// within its catch-up window.
const (
	// CatchUpSkip, the default: missed occurrences are not run; Missed
	// reports them (and the shipped alert fires).
	CatchUpSkip CatchUp = "skip"
	// CatchUpLatest: the occurrence just before the due one, if it was
	// missed (and within the catch-up window), runs once, before the due
	// one; earlier ones stay missed, and a later Run catches none of them
	// up.
	CatchUpLatest CatchUp = "latest"
	// CatchUpAll: each missed occurrence within the catch-up window runs
	// once, oldest first, before the due one: at most MaxCatchUp of them
	// (the latest), per Run; earlier ones stay missed.
	CatchUpAll CatchUp = "all"
)

// DefaultCatchUpWindow is how far back, by default, CatchUpLatest and
// CatchUpAll look for missed occurrences (see Occurrence.CatchUpWindow).
const DefaultCatchUpWindow = 24 * time.Hour

// MaxCatchUp is the most missed occurrences one Run catches up.
const MaxCatchUp = 100

// ParseCatchUp returns the catch-up policy named s ("skip", "latest" or
// "all"), or an error wrapping sqllock.ErrInvalidOptions.
func ParseCatchUp(s string) (CatchUp, error) {
	switch p := CatchUp(s); p {
	case CatchUpSkip, CatchUpLatest, CatchUpAll:
		return p, nil
	}
	return "", fmt.Errorf("%w: ledger: catch-up policy %q is not skip, latest or all", sqllock.ErrInvalidOptions, s)
}

// CatchUp returns the scheduled occurrence (of Every or Cron) whose Run
// first runs the job's missed occurrences as p says (default
// CatchUpSkip): those of the job's current schedule, since it was first
// seen with it, within the catch-up window before the due occurrence (or,
// when none is due, before the next), with no attempt, and not due while
// the job was paused: what Missed reports. Each runs as the due one does
// (its overlap policy, retries, exactly once across replicas: a replica
// that finds one decided skips it); Result.CaughtUp holds their results,
// and Run's error joins their functions' errors. The catch-up reads the
// job's row and its attempts in the window: two statements more per Run.
func (o Occurrence) CatchUp(p CatchUp) Occurrence {
	o.catchUp = p
	return o
}

// CatchUpWindow returns the scheduled occurrence whose catch-up (see
// CatchUp; CatchUpLatest or CatchUpAll) looks back d before the due
// occurrence (default DefaultCatchUpWindow).
func (o Occurrence) CatchUpWindow(d time.Duration) Occurrence {
	o.window = d
	return o
}

// validCatchUp reports whether o's catch-up settings are usable.
func (o Occurrence) validCatchUp() error {
	if o.catchUp != "" {
		if _, err := ParseCatchUp(string(o.catchUp)); err != nil {
			return err
		}
	}
	switch {
	case o.window < 0:
		return fmt.Errorf("%w: ledger: catch-up window %v is negative", sqllock.ErrInvalidOptions, o.window)
	case o.window > 0 && o.catchUp != CatchUpLatest && o.catchUp != CatchUpAll:
		return fmt.Errorf("%w: ledger: a catch-up window goes with CatchUpLatest or CatchUpAll", sqllock.ErrInvalidOptions)
	}
	return nil
}

// catchUp runs the missed occurrences of job before o under o's catch-up
// policy, oldest first. It returns their results, the errors of their
// functions (recorded), and an error that stopped it.
func (l *Ledger) catchUp(ctx context.Context, job string, o resolved, fn func(context.Context, *Run) error) ([]Result, error, error) {
	if o.catchUp != CatchUpLatest && o.catchUp != CatchUpAll {
		return nil, nil, nil
	}
	ts, err := l.missedBefore(ctx, job, o)
	if err != nil || len(ts) == 0 {
		return nil, nil, err
	}
	var (
		results []Result
		fnErrs  []error
	)
	for _, t := range ts {
		m := o
		m.key, m.early, m.pending, m.backfill = t.Format(TimeFormat), 0, "", Range{}
		res, err := l.runResolved(ctx, job, m, fn)
		results = append(results, res)
		switch {
		case err != nil && res.Ran && res.State == StateFailed:
			fnErrs = append(fnErrs, err)
		case err != nil:
			return results, errors.Join(fnErrs...), err
		}
	}
	return results, errors.Join(fnErrs...), nil
}

// missedBefore returns the times of job's occurrences that o's catch-up
// runs, oldest first: those of o's schedule before the due (or next)
// occurrence, within the window, since the job was first seen with that
// schedule, not due while it was paused, with no attempt; at most
// MaxCatchUp, the latest. Under CatchUpLatest it is at most the one just
// before the due occurrence.
func (l *Ledger) missedBefore(ctx context.Context, job string, o resolved) ([]time.Time, error) {
	jobs, _, err := l.runs.Jobs(ctx, job)
	if err != nil {
		return nil, fmt.Errorf("ledger: %s: catch up: %w", job, err)
	}
	if len(jobs) != 1 {
		return nil, nil // a new job has no history
	}
	j := jobs[0]
	if j.Period != o.sched.Period || j.Phase != o.sched.Phase || j.Spec != o.sched.Spec {
		return nil, nil // a changed schedule starts its history anew
	}
	before, err := time.Parse(TimeFormat, o.key)
	if err != nil {
		return nil, nil // no occurrence due or next
	}
	last := o.s.atOrBefore(before.Add(-time.Microsecond))
	window := o.window
	if window == 0 {
		window = DefaultCatchUpWindow
	}
	from := before.Add(-window)
	// The first occurrence of the job's history, as Missed reckons it:
	// the one nearest its first claim.
	first := o.s.atOrBefore(j.FirstSeen)
	if next := o.s.after(j.FirstSeen); first.IsZero() || (!next.IsZero() && next.Sub(j.FirstSeen) < j.FirstSeen.Sub(first)) {
		first = next
	}
	if first.After(from) {
		from = first
	}
	if last.IsZero() || last.Before(from) {
		return nil, nil
	}
	ts := between(o.s, from, last, MaxCatchUp)
	if len(ts) == 0 {
		return nil, nil
	}
	if o.catchUp == CatchUpLatest {
		// Only the latest occurrence is a candidate: were the latest one
		// without an attempt taken instead, each Run after a catch-up (on
		// any replica) would run one more of the earlier ones.
		ts = ts[len(ts)-1:]
	}
	seen, err := l.runs.Occurrences(ctx, job, ts[0].Format(TimeFormat), last.Format(TimeFormat))
	if err != nil {
		return nil, fmt.Errorf("ledger: %s: catch up: %w", job, err)
	}
	have := make(map[string]bool, len(seen))
	for _, k := range seen {
		have[k] = true
	}
	var missed []time.Time
	for _, t := range ts {
		paused := !j.PausedAt.IsZero() && !t.Before(j.PausedAt) && (j.ResumedAt.IsZero() || t.Before(j.ResumedAt))
		if !have[t.Format(TimeFormat)] && !paused {
			missed = append(missed, t)
		}
	}
	return missed, nil
}
