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
	if err := validateJob(job); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, fmt.Errorf("%w: ledger: nil function", sqllock.ErrInvalidOptions)
	}
	if err := occ.Validate(); err != nil {
		return nil, err
	}
	switch {
	case !occ.every:
		return nil, fmt.Errorf("%w: ledger: backfill needs a schedule (Every or Cron)", sqllock.ErrInvalidOptions)
	case to.Before(from):
		return nil, fmt.Errorf("%w: ledger: backfill from %v to %v: the range ends before it starts", sqllock.ErrInvalidOptions, from, to)
	}
	now, err := l.runs.Now(ctx)
	if err != nil {
		return nil, fmt.Errorf("ledger: %s: backfill: read the database's time: %w", job, err)
	}
	if to.After(now) {
		return nil, fmt.Errorf("%w: ledger: backfill to %v: after the database's time %v", sqllock.ErrInvalidOptions,
			to.UTC().Format(TimeFormat), now.Format(TimeFormat))
	}
	ts := between(occ.schedule(), from, to, MaxBackfill+1)
	if len(ts) > MaxBackfill {
		return nil, fmt.Errorf("%w: ledger: backfill from %v to %v: more than %d occurrences", sqllock.ErrInvalidOptions,
			from.UTC().Format(TimeFormat), to.UTC().Format(TimeFormat), MaxBackfill)
	}
	var (
		results []Result
		fnErrs  []error
	)
	for _, t := range ts {
		res, err := l.runResolved(ctx, job, resolved{key: t.Format(TimeFormat)}, fn)
		results = append(results, res)
		switch {
		case err != nil && res.Ran && res.State == StateFailed:
			fnErrs = append(fnErrs, err)
		case err != nil:
			return results, errors.Join(append(fnErrs, err)...)
		}
	}
	return results, errors.Join(fnErrs...)
}
