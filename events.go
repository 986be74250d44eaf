package sqllock

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/observe"
)

// events hands one locker's events to its logger and observer. With
// neither, each event costs a nil check and a call to a disabled handler's
// Enabled at most. A nil *events does nothing (lockers that tests build
// piecemeal).
//
// Log records use these keys throughout (documented in
// docs/observability.md):
// strategy, name, owner, token, wait, held, reentered, freed, margin,
// cause, reason, holds, expires_in, err.
type events struct {
	strategy string
	dialect  string
	log      *slog.Logger
	obs      observers
}

// observers are the interfaces of package observe that a locker's observer
// implements, each nil unless it does.
type observers struct {
	acquired   observe.AcquiredObserver
	released   observe.ReleasedObserver
	lost       observe.LostObserver
	acquire    observe.AcquireTracer
	release    observe.ReleaseTracer
	guard      observe.GuardTracer
	handoff    observe.HandoffObserver
	waiting    observe.WaitingObserver
	renewed    observe.RenewedObserver
	renewBatch observe.RenewBatchTracer
	listener   observe.ListenerObserver
	broken     observe.BreakObserver
}

func newEvents(strategy string, d dialect.Dialect, log *slog.Logger, obs observe.Observer) *events {
	e := &events{strategy: strategy, log: log}
	if d != nil {
		e.dialect = d.Name()
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.obs.acquired, _ = obs.(observe.AcquiredObserver)
	e.obs.released, _ = obs.(observe.ReleasedObserver)
	e.obs.lost, _ = obs.(observe.LostObserver)
	e.obs.acquire, _ = obs.(observe.AcquireTracer)
	e.obs.release, _ = obs.(observe.ReleaseTracer)
	e.obs.guard, _ = obs.(observe.GuardTracer)
	e.obs.handoff, _ = obs.(observe.HandoffObserver)
	e.obs.waiting, _ = obs.(observe.WaitingObserver)
	e.obs.renewed, _ = obs.(observe.RenewedObserver)
	e.obs.renewBatch, _ = obs.(observe.RenewBatchTracer)
	e.obs.listener, _ = obs.(observe.ListenerObserver)
	e.obs.broken, _ = obs.(observe.BreakObserver)
	return e
}

func (e *events) lock(ref dialect.Lease) observe.LockEvent {
	return observe.LockEvent{Strategy: e.strategy, Dialect: e.dialect, Name: ref.Name, Owner: ref.Owner, Token: ref.Token}
}

func (e *events) debug(ctx context.Context) bool {
	return e.log.Enabled(ctx, slog.LevelDebug)
}

// acquireCall is an acquire call under way.
type acquireCall struct {
	start time.Time
	s     observe.AcquireStart
}

// startAcquire starts an acquire call. The context it returns is the one to
// run the call's statements with; the lock's own context derives from the
// caller's.
func (e *events) startAcquire(ctx context.Context, name string, wait, shared bool) (context.Context, acquireCall) {
	if e == nil {
		return ctx, acquireCall{}
	}
	c := acquireCall{start: time.Now(), s: observe.AcquireStart{Strategy: e.strategy, Dialect: e.dialect, Name: name, Wait: wait, Shared: shared}}
	if e.obs.acquire != nil {
		ctx = e.obs.acquire.StartAcquire(ctx, c.s)
	}
	return ctx, c
}

// endAcquire ends an acquire call, whose context ctx came from
// startAcquire, and reports the acquisition if there is one.
func (e *events) endAcquire(ctx context.Context, c acquireCall, lock *Lock, err error) {
	if e == nil {
		return
	}
	wait := time.Since(c.start)
	if lock != nil {
		ref := lock.h.ident()
		if e.obs.acquired != nil {
			e.obs.acquired.Acquired(ctx, observe.AcquiredEvent{LockEvent: e.lock(ref), Wait: wait, Reentered: lock.reentered})
		}
		if e.debug(ctx) {
			e.log.DebugContext(ctx, "sqllock: acquired", "strategy", e.strategy, "name", ref.Name, "owner", ref.Owner,
				"token", ref.Token, "wait", wait, "reentered", lock.reentered)
		}
	}
	if e.obs.acquire != nil {
		end := observe.AcquireEnd{AcquireStart: c.s, Duration: wait, Err: err}
		switch {
		case lock != nil:
			end.Outcome, end.Token = observe.OutcomeAcquired, lock.h.ident().Token
		case errors.Is(err, ErrLocked) || c.s.Wait && ctx.Err() != nil:
			end.Outcome = observe.OutcomeBusy
		default:
			end.Outcome = observe.OutcomeError
		}
		e.obs.acquire.EndAcquire(ctx, end)
	}
	if lock == nil && !errors.Is(err, ErrLocked) && e.debug(ctx) {
		e.log.DebugContext(ctx, "sqllock: acquire failed", "strategy", e.strategy, "name", c.s.Name, "wait", wait, "err", err)
	}
}

// released reports a released hold of ref, acquired at granted.
func (e *events) released(ctx context.Context, ref dialect.Lease, granted time.Time, freed bool) {
	if e == nil {
		return
	}
	held := time.Since(granted)
	if e.obs.released != nil {
		e.obs.released.Released(ctx, observe.ReleasedEvent{LockEvent: e.lock(ref), Freed: freed, Held: held})
	}
	if e.debug(ctx) {
		e.log.DebugContext(ctx, "sqllock: released", "strategy", e.strategy, "name", ref.Name, "owner", ref.Owner,
			"token", ref.Token, "held", held, "freed", freed)
	}
}

// lost reports the loss of ref, acquired at granted. err is the error
// behind it, if any.
func (e *events) lost(ctx context.Context, ref dialect.Lease, granted time.Time, cause observe.LostCause, reason string, err error) {
	if e == nil {
		return
	}
	held := time.Since(granted)
	if e.obs.lost != nil {
		e.obs.lost.Lost(ctx, observe.LostEvent{LockEvent: e.lock(ref), Cause: cause, Reason: reason, Held: held})
	}
	args := []any{"strategy", e.strategy, "name", ref.Name, "owner", ref.Owner, "token", ref.Token,
		"held", held, "cause", string(cause), "reason", reason}
	if err != nil {
		args = append(args, "err", err)
	}
	e.log.WarnContext(ctx, "sqllock: lock lost", args...)
}

func (e *events) startRelease(ctx context.Context, ref dialect.Lease) context.Context {
	if e == nil || e.obs.release == nil {
		return ctx
	}
	return e.obs.release.StartRelease(ctx, e.lock(ref))
}

func (e *events) endRelease(ctx context.Context, ref dialect.Lease, err error) {
	if e != nil && e.obs.release != nil {
		e.obs.release.EndRelease(ctx, e.lock(ref), err)
	}
}

func (e *events) startGuard(ctx context.Context, ref dialect.Lease) context.Context {
	if e == nil || e.obs.guard == nil {
		return ctx
	}
	return e.obs.guard.StartGuard(ctx, e.lock(ref))
}

func (e *events) endGuard(ctx context.Context, ref dialect.Lease, err error) {
	if e != nil && e.obs.guard != nil {
		e.obs.guard.EndGuard(ctx, e.lock(ref), err)
	}
}

// renewed reports a renewal's outcome. margin is what was left of the trust
// window when it succeeded.
func (e *events) renewed(ctx context.Context, ref dialect.Lease, outcome observe.RenewOutcome, margin time.Duration, err error) {
	if e == nil {
		return
	}
	if e.obs.renewed != nil {
		e.obs.renewed.Renewed(ctx, observe.RenewedEvent{LockEvent: e.lock(ref), Outcome: outcome, Margin: margin, Err: err})
	}
	if outcome == observe.RenewOK && e.debug(ctx) {
		e.log.DebugContext(ctx, "sqllock: renewed", "strategy", e.strategy, "name", ref.Name, "token", ref.Token, "margin", margin)
	}
}

func (e *events) startRenewBatch(ctx context.Context, reqs []*renewReq) context.Context {
	if e == nil || e.obs.renewBatch == nil {
		return ctx
	}
	leases := make([]context.Context, len(reqs))
	for i, r := range reqs {
		leases[i] = r.ctx
	}
	return e.obs.renewBatch.StartRenewBatch(ctx, observe.RenewBatch{Strategy: e.strategy, Dialect: e.dialect, Size: len(reqs), Leases: leases})
}

func (e *events) endRenewBatch(ctx context.Context, n int, err error) {
	if e != nil && e.obs.renewBatch != nil {
		e.obs.renewBatch.EndRenewBatch(ctx, observe.RenewBatch{Strategy: e.strategy, Dialect: e.dialect, Size: n}, err)
	}
}

// handoff reports lock, acquired by a waiter that a release reaching this
// locker at since woke.
func (e *events) handoff(ctx context.Context, lock *Lock, source string, since time.Time) {
	if e != nil && e.obs.handoff != nil && lock != nil {
		e.obs.handoff.Handoff(ctx, observe.HandoffEvent{LockEvent: e.lock(lock.h.ident()), Source: source, Latency: time.Since(since)})
	}
}

func (e *events) waiting(ctx context.Context, name string, delta int) {
	if e != nil && e.obs.waiting != nil {
		e.obs.waiting.Waiting(ctx, observe.WaitingEvent{Strategy: e.strategy, Dialect: e.dialect, Name: name, Delta: delta})
	}
}

// listening reports a change of the listening connection's state.
func (e *events) listening(up, reconnect bool, err error) {
	if e == nil {
		return
	}
	if e.obs.listener != nil {
		e.obs.listener.Listening(context.Background(), observe.ListenerEvent{Strategy: e.strategy, Dialect: e.dialect, Up: up, Reconnect: reconnect, Err: err})
	}
	if reconnect {
		e.log.Info("sqllock: listening again; waiters are woken by announcements", "strategy", e.strategy)
	}
}

// broken reports the lease li ended by a break, always logged at level
// WARN: a break is an operator's act.
func (e *events) broken(ctx context.Context, li LockInfo) {
	if e == nil {
		return
	}
	if e.obs.broken != nil {
		e.obs.broken.Broken(ctx, observe.BrokenEvent{LockEvent: observe.LockEvent{Strategy: e.strategy, Dialect: e.dialect,
			Name: li.Name, Owner: li.Owner, Token: li.Token}, Holds: li.Holds, Left: li.ExpiresIn})
	}
	e.log.WarnContext(ctx, "sqllock: lock broken", "strategy", e.strategy, "name", li.Name,
		"owner", li.Owner, "token", li.Token, "holds", li.Holds, "expires_in", li.ExpiresIn)
}
