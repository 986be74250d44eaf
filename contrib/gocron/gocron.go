// Package sqllockgocron runs the jobs of github.com/go-co-op/gocron/v2
// schedulers on one replica of many, through sqllock.
//
// A Locker makes each run of a job run on one replica: pass it to
// gocron.WithDistributedLocker (or to gocron.WithDistributedJobLocker for
// one job). An Elector makes one replica the leader, which alone runs the
// jobs: pass it to gocron.WithDistributedElector and call its Run.
package sqllockgocron

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/sqllock/sqllock"
)

// releaseTimeout bounds a release or a resignation, which run even when
// the scheduler's context has ended.
const releaseTimeout = 10 * time.Second

// campaignRetry is the pause before campaigning again after a failed
// campaign.
const campaignRetry = time.Second

// ErrNotLeader is returned by Elector.IsLeader and Elector.Guard when the
// replica does not lead.
var ErrNotLeader = errors.New("sqllockgocron: not the leader")

// Locker is a gocron.Locker: Lock takes the lock named after the job with
// TryAcquire, so the replicas whose schedulers fire the same run skip it
// while one runs it. The lock is renewed while the job runs, and the job's
// end releases it.
//
// Give the sqllock.Locker a minimum hold (TableOptions.MinHold) a little
// below the job's period: a short job then keeps its lock after its end,
// until MinHold after the grant, and a replica whose scheduler fires the
// same run later (by less than MinHold) skips it instead of running it
// again.
type Locker struct {
	locker sqllock.Locker
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker taking its locks from locker.
func NewLocker(locker sqllock.Locker) *Locker {
	return &Locker{locker: locker}
}

// Lock takes the lock key, or returns an error wrapping sqllock.ErrLocked
// when another replica holds it, which tells gocron to skip the run.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	lock, err := l.locker.TryAcquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return jobLock{lock}, nil
}

// jobLock is the lock of one run of a job.
type jobLock struct {
	lock *sqllock.Lock
}

// Unlock releases the lock, honouring the locker's minimum hold. It runs
// even if ctx has ended (the scheduler shutting down), within a bounded
// time. It returns sqllock.ErrLockLost if the lock was lost during the run.
func (j jobLock) Unlock(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	return j.lock.Release(ctx)
}

// Elector is a gocron.Elector over a sqllock.Election: Run campaigns for
// the election, and IsLeader lets the scheduler run a job only while the
// campaign's leadership is live. IsLeader checks the leadership's trust
// window when called, so a replica that was paused past its lease (or cut
// off from the database) refuses at once, before anyone else can lead.
// A job already running when the leadership is lost runs on; writes it
// makes through Guard are refused from the loss on.
type Elector struct {
	election    *sqllock.Election
	name, value string
	lead        atomic.Pointer[sqllock.Leadership]
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector returns an Elector campaigning in election for the election
// name with value (see sqllock.Election.Campaign). It returns an error if
// name or value is invalid.
func NewElector(election *sqllock.Election, name, value string) (*Elector, error) {
	if err := sqllock.ValidateName(name); err != nil {
		return nil, err
	}
	if err := sqllock.ValidateValue(value); err != nil {
		return nil, err
	}
	return &Elector{election: election, name: name, value: value}, nil
}

// Run campaigns until ctx ends, leads while the leadership lasts and
// campaigns again when it is lost. When ctx ends it resigns a leadership it
// holds and returns the resignation's error, or nil. A campaign that fails
// is retried after a pause, unless the error says that retrying cannot
// help (the schema is missing, or elections are unsupported): Run then
// returns it. Run one Run of an Elector at a time.
func (e *Elector) Run(ctx context.Context) error {
	for {
		lead, err := e.election.Campaign(ctx, e.name, e.value)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, sqllock.ErrSchemaMissing), errors.Is(err, sqllock.ErrUnsupported):
				return err
			}
			t := time.NewTimer(campaignRetry)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		e.lead.Store(lead)
		select {
		case <-lead.Done():
		case <-ctx.Done():
		}
		e.lead.Store(nil)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		err = lead.Resign(rctx)
		cancel()
		if ctx.Err() != nil {
			if errors.Is(err, sqllock.ErrLockLost) || errors.Is(err, sqllock.ErrNotHeld) {
				return nil
			}
			return err
		}
	}
}

// IsLeader returns nil while the replica leads, and an error wrapping
// ErrNotLeader otherwise (wrapping the cause of a loss as well).
func (e *Elector) IsLeader(context.Context) error {
	lead := e.lead.Load()
	if lead == nil {
		return ErrNotLeader
	}
	if lead.Context().Err() != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, context.Cause(lead.Context()))
	}
	return nil
}

// Guard makes tx safe to commit only while the replica leads (see
// sqllock.Leadership.Guard): a job's writes through tx are refused once
// the leadership is lost. It returns an error wrapping ErrNotLeader when
// the replica does not lead.
func (e *Elector) Guard(ctx context.Context, tx *sql.Tx) error {
	lead := e.lead.Load()
	if lead == nil {
		return ErrNotLeader
	}
	if err := lead.Guard(ctx, tx); err != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return nil
}
