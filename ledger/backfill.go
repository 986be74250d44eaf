package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqllock/sqllock"
)

// MaxBackfill is the most occurrences one Backfill runs.
const MaxBackfill = 1000

// Backfill runs fn for each occurrence of occ's schedule (Every or Cron)
// from from to to, both included, oldest first, each under the claim of
// Run: exactly once across replicas and with Backfill's of other
// replicas, so an occurrence that succeeded (or was skipped or replaced)
// is not run again, and a failed one is tried again as Options.Retries
// allow. It runs them whether the job is paused or not, leaves the job's
// recorded schedule as it is, and takes no job lease (occ's overlap and
// catch-up policies do not apply). It returns their results, in order,
// and the errors of their functions, joined; an error of the ledger stops
// it. to must not be after the database's time (a backfill does not use
// up an occurrence to come), and the range must hold at most MaxBackfill
// occurrences: otherwise the error wraps sqllock.ErrInvalidOptions.
func (l *Ledger) Backfill(ctx context.Context, job string, occ Occurrence, from, to time.Time, fn func(ctx context.Context, r *Run) error) ([]Result, error) {
	results, fnErr, err := l.backfill(ctx, job, occ, from, to, fn)
	return results, errors.Join(fnErr, err)
}

// backfill is Backfill, with the errors of the functions (fnErr) apart
// from the one that stopped it (err).
func (l *Ledger) backfill(ctx context.Context, job string, occ Occurrence, from, to time.Time,
	fn func(ctx context.Context, r *Run) error) (results []Result, fnErr, err error) {
	if err := validateJob(job); err != nil {
		return nil, nil, err
	}
	if fn == nil {
		return nil, nil, fmt.Errorf("%w: ledger: nil function", sqllock.ErrInvalidOptions)
	}
	if err := occ.Validate(); err != nil {
		return nil, nil, err
	}
	switch {
	case !occ.every:
		return nil, nil, fmt.Errorf("%w: ledger: backfill needs a schedule (Every or Cron)", sqllock.ErrInvalidOptions)
	case to.Before(from):
		return nil, nil, fmt.Errorf("%w: ledger: backfill from %v to %v: the range ends before it starts", sqllock.ErrInvalidOptions, from, to)
	}
	now, err := l.runs.Now(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("ledger: %s: backfill: read the database's time: %w", job, err)
	}
	if to.After(now) {
		return nil, nil, fmt.Errorf("%w: ledger: backfill to %v: after the database's time %v", sqllock.ErrInvalidOptions,
			to.UTC().Format(TimeFormat), now.Format(TimeFormat))
	}
	ts := between(occ.schedule(), from, to, MaxBackfill+1)
	if len(ts) > MaxBackfill {
		return nil, nil, fmt.Errorf("%w: ledger: backfill from %v to %v: more than %d occurrences", sqllock.ErrInvalidOptions,
			from.UTC().Format(TimeFormat), to.UTC().Format(TimeFormat), MaxBackfill)
	}
	var fnErrs []error
	for _, t := range ts {
		res, err := l.runResolved(ctx, job, resolved{key: t.Format(TimeFormat)}, fn)
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

// ErrBackfillPending is returned by RequestBackfill while an earlier
// request of the job has not run yet.
var ErrBackfillPending = errors.New("ledger: a backfill is pending")

// Range is a range of a job's occurrence times, From to To, both
// included, on the database's clock.
type Range struct {
	From, To time.Time
}

// IsZero reports whether r is the zero Range: no range.
func (r Range) IsZero() bool { return r.From.IsZero() && r.To.IsZero() }

// String returns r's occurrence keys, "FROM to TO", or "" for none.
func (r Range) String() string {
	if r.IsZero() {
		return ""
	}
	return r.From.UTC().Format(TimeFormat) + " to " + r.To.UTC().Format(TimeFormat)
}

// parseRange parses a backfill range recorded as two occurrence keys
// ("" and "" for none).
func parseRange(from, to string) (Range, error) {
	if from == "" && to == "" {
		return Range{}, nil
	}
	f, err := time.Parse(TimeFormat, from)
	if err != nil {
		return Range{}, err
	}
	t, err := time.Parse(TimeFormat, to)
	return Range{From: f.UTC(), To: t.UTC()}, err
}

// RequestBackfill asks job's replicas to backfill the occurrences of its
// recorded schedule from from to to, both included, for when the caller
// cannot run the job itself (an operator's console, a script): the next
// Run of a scheduled occurrence of job, on any replica, reports the
// request (Result.Backfill; Jobs shows it too), and RunBackfill runs it
// there as Backfill would, each occurrence exactly once across replicas.
// It returns the number of occurrences the range holds.
//
// One request is pending at a time: while one is, it returns an error
// wrapping ErrBackfillPending. job must have a recorded schedule (Every
// or Cron), else the error wraps ErrUnknownJob (no row) or
// sqllock.ErrInvalidOptions; so must the range meet Backfill's terms (to
// not after the database's time, at most MaxBackfill occurrences, and
// at least one).
func (l *Ledger) RequestBackfill(ctx context.Context, job string, from, to time.Time) (int, error) {
	if err := validateJob(job); err != nil {
		return 0, err
	}
	if to.Before(from) {
		return 0, fmt.Errorf("%w: ledger: backfill from %v to %v: the range ends before it starts", sqllock.ErrInvalidOptions, from, to)
	}
	rows, now, err := l.runs.Jobs(ctx, job)
	if err != nil {
		return 0, fmt.Errorf("ledger: request a backfill of %s: %w", job, err)
	}
	if len(rows) == 0 {
		return 0, fmt.Errorf("%w %q", ErrUnknownJob, job)
	}
	j := rows[0]
	s, _, err := jobSchedule(j)
	switch {
	case err != nil:
		return 0, fmt.Errorf("ledger: request a backfill of %s: its recorded schedule: %w", job, err)
	case s == nil:
		return 0, fmt.Errorf("%w: ledger: backfill of %s: it has no recorded schedule (Every or Cron)", sqllock.ErrInvalidOptions, job)
	case to.After(now):
		return 0, fmt.Errorf("%w: ledger: backfill to %v: after the database's time %v", sqllock.ErrInvalidOptions,
			to.UTC().Format(TimeFormat), now.Format(TimeFormat))
	}
	ts := between(s, from, to, MaxBackfill+1)
	switch {
	case len(ts) > MaxBackfill:
		return 0, fmt.Errorf("%w: ledger: backfill from %v to %v: more than %d occurrences", sqllock.ErrInvalidOptions,
			from.UTC().Format(TimeFormat), to.UTC().Format(TimeFormat), MaxBackfill)
	case len(ts) == 0:
		return 0, fmt.Errorf("%w: ledger: backfill from %v to %v: no occurrence of %s's schedule in the range", sqllock.ErrInvalidOptions,
			from.UTC().Format(TimeFormat), to.UTC().Format(TimeFormat), job)
	}
	r := Range{From: ts[0], To: ts[len(ts)-1]}
	set, err := l.runs.Backfill(ctx, job, r.From.Format(TimeFormat), r.To.Format(TimeFormat))
	if err != nil {
		return 0, fmt.Errorf("ledger: request a backfill of %s: %w", job, err)
	}
	if !set {
		st, err := l.runs.Job(ctx, job)
		switch {
		case err != nil:
			return 0, fmt.Errorf("ledger: request a backfill of %s: %w", job, err)
		case !st.Known:
			return 0, fmt.Errorf("%w %q", ErrUnknownJob, job)
		}
		return 0, fmt.Errorf("%w: %s: from %s to %s", ErrBackfillPending, job, st.BackfillFrom, st.BackfillTo)
	}
	l.changed(ctx, JobChange{Job: job, Change: ChangeBackfillRequested, Backfill: r})
	return len(ts), nil
}

// RunBackfill runs the backfill asked of job's replicas (see
// RequestBackfill) with occ's schedule and fn, as Backfill runs a range,
// and then ends the request. It returns the range it ran (zero with none
// asked for) and the occurrences' results. An error of fn is recorded and
// returned, and ends the request all the same (Runs shows the failed
// occurrences, which a new request or Backfill tries again, as
// Options.Retries allow); an error of the ledger (or of ctx) leaves the
// request for the next replica, which runs what is not done yet.
func (l *Ledger) RunBackfill(ctx context.Context, job string, occ Occurrence, fn func(ctx context.Context, r *Run) error) (Range, []Result, error) {
	if err := validateJob(job); err != nil {
		return Range{}, nil, err
	}
	st, err := l.runs.Job(ctx, job)
	if err != nil {
		return Range{}, nil, fmt.Errorf("ledger: %s: read the job: %w", job, err)
	}
	r, err := parseRange(st.BackfillFrom, st.BackfillTo)
	if err != nil || r.IsZero() {
		return Range{}, nil, err
	}
	results, fnErr, err := l.backfill(ctx, job, occ, r.From, r.To, fn)
	if err != nil {
		return r, results, errors.Join(fnErr, err)
	}
	if err := l.runs.EndBackfill(ctx, job, st.BackfillFrom, st.BackfillTo); err != nil {
		return r, results, errors.Join(fnErr, fmt.Errorf("ledger: %s: end the backfill request: %w", job, err))
	}
	return r, results, fnErr
}
