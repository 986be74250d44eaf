package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

// Overlap is what a Run of a scheduled occurrence does while another
// occurrence of its job runs (see Occurrence.Overlap).
type Overlap string

// The overlap policies. Kubernetes CronJob calls them concurrencyPolicy
// Forbid, Allow and Replace; Temporal's schedules SKIP, ALLOW_ALL and
// TERMINATE_OTHER.
const (
	// OverlapSkip, the default: the occurrence is not run but recorded
	// skipped (StateSkipped), and is not missed.
	OverlapSkip Overlap = "skip"
	// OverlapAllow: the occurrence runs beside the other one (each
	// occurrence has a lease of its own).
	OverlapAllow Overlap = "allow"
	// OverlapReplace: the other occurrence's lease on the job is broken
	// (its token superseded: its guarded writes are refused), its attempt
	// is recorded replaced (StateReplaced), its function's context ends
	// with sqllock.ErrLockLost at its next renewal, and the occurrence
	// runs.
	OverlapReplace Overlap = "replace"
)

// ParseOverlap returns the overlap policy named s ("skip", "allow" or
// "replace"), or an error wrapping sqllock.ErrInvalidOptions.
func ParseOverlap(s string) (Overlap, error) {
	switch p := Overlap(s); p {
	case OverlapSkip, OverlapAllow, OverlapReplace:
		return p, nil
	}
	return "", fmt.Errorf("%w: ledger: overlap policy %q is not skip, allow or replace", sqllock.ErrInvalidOptions, s)
}

// Overlap returns the scheduled occurrence (of Every or Cron) run under
// the overlap policy p (default OverlapSkip) when another occurrence of
// its job runs. Under OverlapSkip and OverlapReplace each attempt holds,
// beside its occurrence's lease, a lease on its job (named "run-job/"
// and the job), which tells a running occurrence: an occurrence whose
// runner died holds it until its lease ends (one TTL), and overlaps until
// then. The job's lease costs a statement at the claim, one in each of
// the claim's and the outcome's transactions, one at the release, and
// its renewals (which the locker batches with the occurrence's).
//
// An occurrence of At, Key or Manual takes no job lease: it runs beside
// the job's other occurrences, and is never replaced.
func (o Occurrence) Overlap(p Overlap) Occurrence {
	o.overlap = p
	return o
}

// overlapped is what a claim learnt of the job's other occurrences.
type overlapped struct {
	// skip says one ran, under OverlapSkip: skip this occurrence.
	skip bool
	// replaced are the owners of the job leases broken under
	// OverlapReplace: their running attempts are replaced.
	replaced []string
}

// maxReplace is how many times a claim under OverlapReplace breaks the
// job's lease before it gives up: another runner took it again each time.
const maxReplace = 3

// overlap takes r's job lease under the policies OverlapSkip and
// OverlapReplace (setting r.job), breaking another attempt's under
// OverlapReplace; it reports skip, without a lease, when another attempt
// holds it under OverlapSkip.
func (l *Ledger) overlap(ctx context.Context, r *Run, p Overlap) (overlapped, error) {
	if p != OverlapSkip && p != OverlapReplace {
		return overlapped{}, nil
	}
	name := jobLeaseName(r.Job)
	var over overlapped
	for i := 0; ; i++ {
		lock, err := l.locks.TryAcquire(ctx, name)
		switch {
		case err == nil:
			r.job = lock
			return over, nil
		case !errors.Is(err, sqllock.ErrLocked):
			return over, fmt.Errorf("ledger: %s %s: take the job's lease: %w", r.Job, r.Occurrence, err)
		case i == maxReplace:
			return over, fmt.Errorf("ledger: %s %s: replace the running occurrence: the job's lease was taken again %d times: %w",
				r.Job, r.Occurrence, maxReplace, err)
		}
		if i == 0 {
			dead, err := l.breakDeadRunners(ctx, r, name)
			if err != nil {
				return over, err
			}
			if dead {
				continue // no overlap: this occurrence's own runner died
			}
		}
		if p == OverlapSkip {
			return overlapped{skip: true}, nil
		}
		if i == 0 {
			// Break nothing for an occurrence decided already, or whose
			// retry is not due: the claim (without the job's lease) says
			// so. r holds the occurrence: no other runner decides it
			// meanwhile.
			if settled, err := l.settled(ctx, r); err != nil || settled {
				return over, err
			}
		}
		broken, ok, err := l.locks.Break(ctx, name)
		if err != nil {
			return over, fmt.Errorf("ledger: %s %s: break the running occurrence's lease: %w", r.Job, r.Occurrence, err)
		}
		if ok {
			over.replaced = append(over.replaced, broken.Owner)
			l.log.Info("ledger: broke the job's lease of the running occurrence (overlap replace)",
				"job", r.Job, "occurrence", r.Occurrence, "owner", broken.Owner, "token", broken.Token)
		}
	}
}

// breakDeadRunners breaks the job's lease (named name) if a runner of
// r's own occurrence holds it: r holds the occurrence's lease, so that
// runner's lease on the occurrence ended (it died, or stopped), and its
// lease on the job, renewed beside it, ends a moment later. Until then it
// is no other occurrence running, and skipping would decide r's occurrence
// for a runner that will never finish it. It reports whether it broke one.
// It reads the occurrence's attempts, and only when one is still running
// the lock table's leases, to find the job lease's holder.
func (l *Ledger) breakDeadRunners(ctx context.Context, r *Run, name string) (bool, error) {
	tx, err := l.d.DB().BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	prev, _, err := l.runs.Attempts(ctx, tx, r.Job, r.Occurrence)
	_ = tx.Rollback()
	if err != nil {
		return false, fmt.Errorf("ledger: %s %s: read the attempts: %w", r.Job, r.Occurrence, err)
	}
	// The owners of the running attempts, and when each started: the
	// job's lease of such an attempt was taken before it started.
	dead := map[string]time.Time{}
	for _, p := range prev {
		if State(p.State) == StateRunning && p.StartedAt.After(dead[p.Owner]) {
			dead[p.Owner] = p.StartedAt
		}
	}
	if len(dead) == 0 {
		return false, nil
	}
	leases, err := l.locks.List(ctx)
	if err != nil {
		return false, fmt.Errorf("ledger: %s %s: read the job's lease: %w", r.Job, r.Occurrence, err)
	}
	for _, li := range leases {
		started, ok := dead[li.Owner]
		if li.Name != name || !ok || li.AcquiredAt.After(started) {
			continue // not the lease of a dead runner's attempt
		}
		_, ok, err := l.locks.BreakToken(ctx, name, li.Token)
		if err != nil {
			return false, fmt.Errorf("ledger: %s %s: break the dead runner's lease on the job: %w", r.Job, r.Occurrence, err)
		}
		if ok {
			l.log.Info("ledger: broke the job's lease of a dead runner of the same occurrence",
				"job", r.Job, "occurrence", r.Occurrence, "owner", li.Owner, "token", li.Token)
		}
		return true, nil
	}
	return false, nil
}

// settled reports whether r's occurrence is decided (an attempt
// succeeded, was skipped or replaced, or the failed ones leave no retry)
// or its next retry is not due yet, as the claim would find.
func (l *Ledger) settled(ctx context.Context, r *Run) (bool, error) {
	tx, err := l.d.DB().BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	prev, now, err := l.runs.Attempts(ctx, tx, r.Job, r.Occurrence)
	if err != nil {
		return false, fmt.Errorf("ledger: %s %s: read the attempts: %w", r.Job, r.Occurrence, err)
	}
	failed := 0
	for _, p := range prev {
		switch State(p.State) {
		case StateSucceeded, StateSkipped, StateReplaced:
			return true, nil
		case StateFailed:
			failed++
			if p.FinishedAt.Add(l.opts.RetryBackoff).After(now) {
				return true, nil
			}
		}
	}
	return failed > l.opts.Retries, nil
}

// skip records, inside tx, the attempt rec (just started) skipped for
// overlap, and sets res to say so.
func (l *Ledger) skip(ctx context.Context, tx *sql.Tx, rec dialect.RunRecord, res *attempt) error {
	rec.State, rec.Err = string(StateSkipped), "skipped: another occurrence of the job was running (overlap skip)"
	if _, err := l.runs.Finish(ctx, tx, rec); err != nil {
		return err
	}
	res.State, res.Attempt, res.Token = StateSkipped, rec.Attempt, rec.Token
	return nil
}
