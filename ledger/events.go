package ledger

import (
	"context"
	"fmt"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/observe"
)

// Event describes an attempt of an occurrence, as observers see it.
type Event struct {
	Job        string
	Occurrence string
	Attempt    int
	Owner      string
	Token      int64
	// State is the attempt's state: StateRunning when claimed, its
	// outcome when finished; for a skip, why Run made no attempt (see
	// Result.State).
	State State
	// Err is a failed attempt's error.
	Err error
}

// ClaimedObserver is told of each attempt a Ledger claims, before its
// function runs.
type ClaimedObserver interface {
	RunClaimed(ctx context.Context, e Event)
}

// SkippedObserver is told of each Run that made no attempt, with the state
// that says why; Attempt and Token are those of the attempt that decided
// it (0 when another runner's attempt holds the occurrence).
type SkippedObserver interface {
	RunSkipped(ctx context.Context, e Event)
}

// AbandonedObserver is told of each attempt a claim marked abandoned:
// e names the abandoned attempt (its runner's Owner and Token); by is the
// claiming attempt's event.
type AbandonedObserver interface {
	RunAbandoned(ctx context.Context, e Event, by Event)
}

// FinishedObserver is told of each attempt whose outcome was recorded
// (StateSucceeded or StateFailed).
type FinishedObserver interface {
	RunFinished(ctx context.Context, e Event)
}

// MissedObserver is told, for each periodic job that Missed checks, of the
// job's missed occurrences: an empty slice when it has none, so that a
// gauge of them falls back to 0.
type MissedObserver interface {
	RunsMissed(ctx context.Context, job string, missed []MissedRun)
}

// HealthObserver is told, for each job that Health judges, of its health.
type HealthObserver interface {
	JobHealth(ctx context.Context, h JobHealth)
}

// Change names what an operator's call did to a job (see JobChange).
type Change string

// The changes a ChangedObserver hears of.
const (
	ChangePaused    Change = "paused"    // Pause
	ChangeResumed   Change = "resumed"   // Resume
	ChangeTriggered Change = "triggered" // Trigger asked for a manual occurrence
	ChangeForgotten Change = "forgotten" // Forget
	// ChangeBackfillRequested is RequestBackfill's.
	ChangeBackfillRequested Change = "backfill-requested"
)

// JobChange is a change an operator's call made to a job.
type JobChange struct {
	Job    string
	Change Change
	// Occurrence is the manual occurrence a trigger asked for.
	Occurrence string
	// Backfill is the range a backfill request asked for.
	Backfill Range
	// Attempts counts the attempts a forget deleted.
	Attempts int
}

// ChangedObserver is told of each change Pause, Resume, Trigger, Forget
// and RequestBackfill make to a job: an operator's act, worth an audit trail. A call that
// changed nothing (a pause of a paused job, a trigger while one is
// pending) is not a change.
type ChangedObserver interface {
	JobChanged(ctx context.Context, c JobChange)
}

// checkObserver returns the part of obs the ledger's lock table hears: obs
// if it implements an interface of package observe, else nil; and an error
// if obs implements neither those nor the ledger's.
func checkObserver(obs any) (observe.Observer, error) {
	if observe.Check(obs) == nil {
		return obs, nil
	}
	switch obs.(type) {
	case ClaimedObserver, SkippedObserver, AbandonedObserver, FinishedObserver, MissedObserver, HealthObserver, ChangedObserver:
		return nil, nil
	}
	return nil, fmt.Errorf("%w: ledger: Options.Observer: %w (nor of package ledger)", sqllock.ErrInvalidOptions, observe.Check(obs))
}

func (l *Ledger) claimed(ctx context.Context, r *Run, owner string) {
	e := Event{Job: r.Job, Occurrence: r.Occurrence, Attempt: r.Attempt, Owner: owner, Token: r.Token, State: StateRunning}
	l.log.Debug("ledger: claimed", "job", e.Job, "occurrence", e.Occurrence, "attempt", e.Attempt, "token", e.Token)
	if o, ok := l.opts.Observer.(ClaimedObserver); ok {
		o.RunClaimed(ctx, e)
	}
}

func (l *Ledger) skipped(ctx context.Context, job string, res Result) {
	e := Event{Job: job, Occurrence: res.Occurrence, Attempt: res.Attempt, Token: res.Token, State: res.State}
	l.log.Debug("ledger: skipped", "job", job, "occurrence", e.Occurrence, "state", e.State)
	if o, ok := l.opts.Observer.(SkippedObserver); ok {
		o.RunSkipped(ctx, e)
	}
}

func (l *Ledger) abandoned(ctx context.Context, gone []dialect.RunRecord, r *Run, owner string) {
	by := Event{Job: r.Job, Occurrence: r.Occurrence, Attempt: r.Attempt, Owner: owner, Token: r.Token, State: StateRunning}
	o, _ := l.opts.Observer.(AbandonedObserver)
	for _, g := range gone {
		l.log.Warn("ledger: took over an attempt whose lease ended", "job", g.Job, "occurrence", g.Occurrence,
			"attempt", g.Attempt, "owner", g.Owner, "token", g.Token, "started_at", g.StartedAt)
		if o != nil {
			o.RunAbandoned(ctx, Event{Job: g.Job, Occurrence: g.Occurrence, Attempt: g.Attempt, Owner: g.Owner,
				Token: g.Token, State: StateAbandoned}, by)
		}
	}
}

func (l *Ledger) finished(ctx context.Context, r *Run, owner string, state State, err error) {
	e := Event{Job: r.Job, Occurrence: r.Occurrence, Attempt: r.Attempt, Owner: owner, Token: r.Token, State: state, Err: err}
	if err != nil {
		l.log.Warn("ledger: attempt failed", "job", e.Job, "occurrence", e.Occurrence, "attempt", e.Attempt, "err", err)
	} else {
		l.log.Debug("ledger: attempt succeeded", "job", e.Job, "occurrence", e.Occurrence, "attempt", e.Attempt)
	}
	if o, ok := l.opts.Observer.(FinishedObserver); ok {
		o.RunFinished(ctx, e)
	}
}

func (l *Ledger) checkedMissed(ctx context.Context, job string, missed []MissedRun) {
	if o, ok := l.opts.Observer.(MissedObserver); ok {
		o.RunsMissed(ctx, job, missed)
	}
}

func (l *Ledger) checkedHealth(ctx context.Context, h JobHealth) {
	if o, ok := l.opts.Observer.(HealthObserver); ok {
		o.JobHealth(ctx, h)
	}
}

func (l *Ledger) changed(ctx context.Context, c JobChange) {
	l.log.Info("ledger: job "+string(c.Change), "job", c.Job, "occurrence", c.Occurrence, "attempts_deleted", c.Attempts)
	if o, ok := l.opts.Observer.(ChangedObserver); ok {
		o.JobChanged(ctx, c)
	}
}
