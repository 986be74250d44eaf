package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/observe"
)

// Events hands one locker's events to its logger and observer. With
// neither, each event costs a nil check and a call to a disabled handler's
// Enabled at most. A nil *Events does nothing (lockers that tests build
// piecemeal).
//
// Log records use these keys throughout (documented in
// docs/observability.md):
// strategy, name, owner, token, wait, held, reentered, freed, margin,
// cause, reason, holds, expires_in, err.
type Events struct {
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
	revoked    observe.RevokedObserver
}

// NewEvents returns the events of a locker of strategy on d (nil: no
// dialect name), to log and obs (each may be nil).
func NewEvents(strategy string, d dialect.Dialect, log *slog.Logger, obs observe.Observer) *Events {
	e := &Events{strategy: strategy, log: log}
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
	e.obs.revoked, _ = obs.(observe.RevokedObserver)
	return e
}

// Strategy returns the strategy the events name.
func (e *Events) Strategy() string { return e.strategy }

// Dialect returns the dialect the events name.
func (e *Events) Dialect() string { return e.dialect }

func (e *Events) lock(ref dialect.Lease) observe.LockEvent {
	return observe.LockEvent{Strategy: e.strategy, Dialect: e.dialect, Name: ref.Name, Owner: ref.Owner, Token: ref.Token}
}

func (e *Events) debug(ctx context.Context) bool {
	return e.log.Enabled(ctx, slog.LevelDebug)
}

// AcquireCall is an acquire call under way.
type AcquireCall struct {
	start time.Time
	s     observe.AcquireStart
}

// StartAcquire starts an acquire call. The context it returns is the one to
// run the call's statements with; the lock's own context derives from the
// caller's.
func (e *Events) StartAcquire(ctx context.Context, name string, wait, shared bool) (context.Context, AcquireCall) {
	if e == nil {
		return ctx, AcquireCall{}
	}
	c := AcquireCall{start: time.Now(), s: observe.AcquireStart{Strategy: e.strategy, Dialect: e.dialect, Name: name, Wait: wait, Shared: shared}}
	if e.obs.acquire != nil {
		ctx = e.obs.acquire.StartAcquire(ctx, c.s)
	}
	return ctx, c
}

// Held is the hold an acquire call ends with, as events report it.
type Held struct {
	OK        bool // a hold was acquired; the other fields describe it
	Ref       dialect.Lease
	Reentered bool
}

func (g Grant) held() Held {
	if g.Lease == nil {
		return Held{}
	}
	return Held{OK: true, Ref: g.Lease.ref, Reentered: g.Reentered}
}

// EndAcquire ends an acquire call, whose context ctx came from
// StartAcquire, and reports the acquisition h if there is one.
func (e *Events) EndAcquire(ctx context.Context, c AcquireCall, h Held, err error) {
	if e == nil {
		return
	}
	wait := time.Since(c.start)
	if h.OK {
		ref := h.Ref
		if e.obs.acquired != nil {
			e.obs.acquired.Acquired(ctx, observe.AcquiredEvent{LockEvent: e.lock(ref), Wait: wait, Reentered: h.Reentered})
		}
		if e.debug(ctx) {
			e.log.DebugContext(ctx, "sqllock: acquired", "strategy", e.strategy, "name", ref.Name, "owner", ref.Owner,
				"token", ref.Token, "wait", wait, "reentered", h.Reentered)
		}
	}
	if e.obs.acquire != nil {
		end := observe.AcquireEnd{AcquireStart: c.s, Duration: wait, Err: err}
		switch {
		case h.OK:
			end.Outcome, end.Token = observe.OutcomeAcquired, h.Ref.Token
		case errors.Is(err, dialect.ErrLocked) || c.s.Wait && ctx.Err() != nil:
			end.Outcome = observe.OutcomeBusy
		default:
			end.Outcome = observe.OutcomeError
		}
		e.obs.acquire.EndAcquire(ctx, end)
	}
	if !h.OK && !errors.Is(err, dialect.ErrLocked) && e.debug(ctx) {
		e.log.DebugContext(ctx, "sqllock: acquire failed", "strategy", e.strategy, "name", c.s.Name, "wait", wait, "err", err)
	}
}

// Released reports a released hold of ref, acquired at granted.
func (e *Events) Released(ctx context.Context, ref dialect.Lease, granted time.Time, freed bool) {
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

// Lost reports the loss of ref, acquired at granted. err is the error
// behind it, if any.
func (e *Events) Lost(ctx context.Context, ref dialect.Lease, granted time.Time, cause observe.LostCause, reason string, err error) {
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

// StartRelease opens the span of a release of ref; EndRelease closes it.
func (e *Events) StartRelease(ctx context.Context, ref dialect.Lease) context.Context {
	if e == nil || e.obs.release == nil {
		return ctx
	}
	return e.obs.release.StartRelease(ctx, e.lock(ref))
}

// EndRelease closes the span StartRelease opened, with the release's error.
func (e *Events) EndRelease(ctx context.Context, ref dialect.Lease, err error) {
	if e != nil && e.obs.release != nil {
		e.obs.release.EndRelease(ctx, e.lock(ref), err)
	}
}

// StartGuard opens the span of a guard check of ref; EndGuard closes it.
func (e *Events) StartGuard(ctx context.Context, ref dialect.Lease) context.Context {
	if e == nil || e.obs.guard == nil {
		return ctx
	}
	return e.obs.guard.StartGuard(ctx, e.lock(ref))
}

// EndGuard closes the span StartGuard opened, with the check's error.
func (e *Events) EndGuard(ctx context.Context, ref dialect.Lease, err error) {
	if e != nil && e.obs.guard != nil {
		e.obs.guard.EndGuard(ctx, e.lock(ref), err)
	}
}

// renewed reports a renewal's outcome. margin is what was left of the trust
// window when it succeeded.
func (e *Events) renewed(ctx context.Context, ref dialect.Lease, outcome observe.RenewOutcome, margin time.Duration, err error) {
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

func (e *Events) startRenewBatch(ctx context.Context, reqs []*renewReq) context.Context {
	if e == nil || e.obs.renewBatch == nil {
		return ctx
	}
	leases := make([]context.Context, len(reqs))
	for i, r := range reqs {
		leases[i] = r.ctx
	}
	return e.obs.renewBatch.StartRenewBatch(ctx, observe.RenewBatch{Strategy: e.strategy, Dialect: e.dialect, Size: len(reqs), Leases: leases})
}

func (e *Events) endRenewBatch(ctx context.Context, n int, err error) {
	if e != nil && e.obs.renewBatch != nil {
		e.obs.renewBatch.EndRenewBatch(ctx, observe.RenewBatch{Strategy: e.strategy, Dialect: e.dialect, Size: n}, err)
	}
}

// handoff reports l, acquired by a waiter that a release reaching this
// locker at since woke.
func (e *Events) handoff(ctx context.Context, l *Lease, source string, since time.Time) {
	if e != nil && e.obs.handoff != nil && l != nil {
		e.obs.handoff.Handoff(ctx, observe.HandoffEvent{LockEvent: e.lock(l.ref), Source: source, Latency: time.Since(since)})
	}
}

// Waiting reports that delta waiters (1 or -1) joined or left the
// waiting room of name.
func (e *Events) Waiting(ctx context.Context, name string, delta int) {
	if e != nil && e.obs.waiting != nil {
		e.obs.waiting.Waiting(ctx, observe.WaitingEvent{Strategy: e.strategy, Dialect: e.dialect, Name: name, Delta: delta})
	}
}

// listening reports a change of the listening connection's state.
func (e *Events) listening(up, reconnect bool, err error) {
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

// Broken reports the lease li ended by a break, always logged at level
// WARN: a break is an operator's act.
func (e *Events) Broken(ctx context.Context, li dialect.LockInfo) {
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

// Revoked reports that a release was requested of ref, acquired at
// granted, for reason.
func (e *Events) Revoked(ctx context.Context, ref dialect.Lease, granted time.Time, reason string) {
	if e == nil {
		return
	}
	held := time.Since(granted)
	if e.obs.revoked != nil {
		e.obs.revoked.Revoked(ctx, observe.RevokedEvent{LockEvent: e.lock(ref), Reason: reason, Held: held})
	}
	e.log.InfoContext(ctx, "sqllock: release requested", "strategy", e.strategy, "name", ref.Name,
		"owner", ref.Owner, "token", ref.Token, "held", held, "reason", reason)
}

// AcquiredInSet reports the hold of ref, one of a set of size locks
// acquired together after wait, as an acquisition of its own (an
// observe.AcquiredObserver's event, a debug record).
func (e *Events) AcquiredInSet(ctx context.Context, ref dialect.Lease, reentered bool, wait time.Duration, size int) {
	if e.obs.acquired != nil {
		e.obs.acquired.Acquired(ctx, observe.AcquiredEvent{LockEvent: e.lock(ref), Wait: wait, Reentered: reentered})
	}
	if e.debug(ctx) {
		e.log.DebugContext(ctx, "sqllock: acquired in a set", "strategy", e.strategy, "name", ref.Name, "owner", ref.Owner,
			"token", ref.Token, "wait", wait, "reentered", reentered, "set", size)
	}
}
