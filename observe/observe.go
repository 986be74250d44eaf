// Package observe defines the events sqllock reports and the small
// interfaces that receive them, one per family of events. An observer, set
// as the Observer field of a locker's, a reaper's or a retry's options,
// implements the interfaces of the events it cares about; sqllock finds
// out which once, when the locker or reaper is made (a retry: when it
// starts), and calls only those. A new family of events comes with a new
// interface, so adding one breaks no implementation. An observer that
// implements none of them (a misspelt method, say) would hear nothing: the
// constructors refuse it with an error wrapping ErrNoInterface (see Check). Package sqllockotel
// implements them all with OpenTelemetry metrics and spans.
//
// The methods are called synchronously, on the goroutine of the call or of
// the background work that caused the event, possibly from many at once.
// They must be safe for concurrent use, return quickly, and not call back
// into the lock the event is about. A Start method returns the context the
// operation runs with (a span's, say), which the matching End method
// receives.
package observe

import (
	"context"
	"errors"
	"fmt"
)

// Observer is a value that receives events: it implements any of the
// interfaces of this package, and receives the events of those it
// implements. One that implements none is refused (see Check).
type Observer any

// ErrNoInterface means an observer implements none of the interfaces of
// this package, so it would receive no events: a method's name or
// signature is likely off by a little.
var ErrNoInterface = errors.New("observe: the observer implements none of the interfaces of package observe")

// Check returns nil if obs is nil or implements at least one interface of
// this package, and otherwise an error wrapping ErrNoInterface that names
// obs's type. The constructors that take an Observer call it.
func Check(obs Observer) error {
	switch obs.(type) {
	case nil, AcquiredObserver, ReleasedObserver, LostObserver, AcquireTracer, ReleaseTracer, GuardTracer,
		HandoffObserver, WaitingObserver, RenewedObserver, RenewBatchTracer, ListenerObserver, ReapObserver,
		AttemptTracer, BreakObserver, RevokedObserver:
		return nil
	}
	return fmt.Errorf("%w: %T has none of their methods", ErrNoInterface, obs)
}

// AcquiredObserver is told of each acquisition.
type AcquiredObserver interface {
	// Acquired reports an acquisition, or a re-entrant hold of one. ctx is
	// the acquiring call's.
	Acquired(ctx context.Context, e AcquiredEvent)
}

// ReleasedObserver is told of each released hold.
type ReleasedObserver interface {
	// Released reports a hold released; e.Freed says the acquisition ended
	// with it. ctx is the releasing call's.
	Released(ctx context.Context, e ReleasedEvent)
}

// LostObserver is told of each lost acquisition.
type LostObserver interface {
	// Lost reports, once, that an acquisition was lost: its context is
	// cancelled with sqllock.ErrLockLost. ctx carries the values of the
	// context the lock was acquired with.
	Lost(ctx context.Context, e LostEvent)
}

// AcquireTracer follows acquire calls.
type AcquireTracer interface {
	// StartAcquire and EndAcquire bracket an Acquire or TryAcquire call.
	StartAcquire(ctx context.Context, e AcquireStart) context.Context
	EndAcquire(ctx context.Context, e AcquireEnd)
}

// ReleaseTracer follows release calls.
type ReleaseTracer interface {
	// StartRelease and EndRelease bracket a Release that reaches the
	// database or the lock's transaction.
	StartRelease(ctx context.Context, e LockEvent) context.Context
	EndRelease(ctx context.Context, e LockEvent, err error)
}

// GuardTracer follows guarded writes.
type GuardTracer interface {
	// StartGuard and EndGuard bracket a Guard.
	StartGuard(ctx context.Context, e LockEvent) context.Context
	EndGuard(ctx context.Context, e LockEvent, err error)
}

// HandoffObserver is told of acquisitions by woken waiters.
type HandoffObserver interface {
	// Handoff reports an acquisition by a waiter woken by a release: one
	// through the same locker (HandoffLocal, even if its announcement
	// arrived first), or one the database announced (HandoffNotice).
	Handoff(ctx context.Context, e HandoffEvent)
}

// WaitingObserver is told of changes in the waiters of a name.
type WaitingObserver interface {
	// Waiting reports a waiting Acquire becoming (Delta 1) or ceasing to be
	// (Delta -1) the head of its name's queue, the one that asks the
	// database; for a pessimistic locker, a waiting Acquire entering or
	// leaving the database's lock queue.
	Waiting(ctx context.Context, e WaitingEvent)
}

// RenewedObserver is told of each lease's renewals.
type RenewedObserver interface {
	// Renewed reports the outcome of one lease's renewal.
	Renewed(ctx context.Context, e RenewedEvent)
}

// RenewBatchTracer follows the statements that renew leases.
type RenewBatchTracer interface {
	// StartRenewBatch and EndRenewBatch bracket one statement renewing a
	// batch of leases.
	StartRenewBatch(ctx context.Context, e RenewBatch) context.Context
	EndRenewBatch(ctx context.Context, e RenewBatch, err error)
}

// ListenerObserver is told of the wake-up connections of waiting rooms.
type ListenerObserver interface {
	// Listening reports the wake-up connection of a locker's waiting room
	// (PostgreSQL's LISTEN, a MySQL/MariaDB bell) going up or down.
	Listening(ctx context.Context, e ListenerEvent)
}

// ReapObserver is told of a Reaper's passes.
type ReapObserver interface {
	// Reaped reports one pass of a Reaper.
	Reaped(ctx context.Context, e ReapEvent)
}

// AttemptTracer follows the runs of the function given to rowlock.InTx or
// rowlock.RetryOnConflict.
type AttemptTracer interface {
	// StartAttempt and EndAttempt bracket one run.
	StartAttempt(ctx context.Context, e Attempt) context.Context
	EndAttempt(ctx context.Context, e AttemptEnd)
}

// RevokedObserver is told of each release requested of a lease this
// process holds (sqllock.Table.RequestRelease; the sqllock unlock
// command's --ask), as the holder learns of it from a renewal.
type RevokedObserver interface {
	// Revoked reports the request, once per lease. ctx carries the
	// values the lease was acquired with.
	Revoked(ctx context.Context, e RevokedEvent)
}

// BreakObserver is told of each lease ended by sqllock.Table.Break (the
// sqllock unlock command): an operator's act, worth an audit trail.
type BreakObserver interface {
	// Broken reports a lease ended by a break. ctx is the breaking call's.
	Broken(ctx context.Context, e BrokenEvent)
}
