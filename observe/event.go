package observe

import (
	"context"
	"time"
)

// Strategy names, as events report them.
const (
	StrategyTable       = "table"
	StrategyOptimistic  = "optimistic"
	StrategyPessimistic = "pessimistic"
	StrategySemaphore   = "semaphore"
	StrategyRWLock      = "rwlock" // read/write locks
)

// LockEvent identifies the acquisition an event is about.
type LockEvent struct {
	Strategy string // one of the Strategy constants
	Dialect  string // the dialect's Name
	Name     string
	Owner    string
	Token    int64
}

// AcquiredEvent describes an acquisition.
type AcquiredEvent struct {
	LockEvent
	// Wait is how long the call took, from its start to the grant.
	Wait time.Duration
	// Reentered says the owner held the lock already: the hold count went
	// up, the acquisition and its token are the earlier ones.
	Reentered bool
}

// ReleasedEvent describes a released hold.
type ReleasedEvent struct {
	LockEvent
	// Freed says this was the acquisition's last hold: it has ended.
	Freed bool
	// Held is the time since the acquisition was granted.
	Held time.Duration
}

// LostCause says how an acquisition was lost.
type LostCause string

// Causes of a lost lock.
const (
	// LostExpired: the database no longer had the lease when a renewal or
	// release asked (it expired and was taken over, or reaped).
	LostExpired LostCause = "expired"
	// LostRenewFailed: renewals failed (with errors) until the trust window
	// closed.
	LostRenewFailed LostCause = "renew_failed"
	// LostTrustWindow: the trust window passed without a renewal attempt
	// finishing, as after a paused process or a starved goroutine.
	LostTrustWindow LostCause = "trust_window"
	// LostConnection: a pessimistic lock's connection failed.
	LostConnection LostCause = "connection"
	// LostReadOnly: a renewal reached a read-only server (a standby, or a
	// primary demoted by a failover).
	LostReadOnly LostCause = "read_only"
)

// LostEvent describes a lost acquisition.
type LostEvent struct {
	LockEvent
	Cause LostCause
	// Reason is a human-readable account of the cause.
	Reason string
	// Held is the time since the acquisition was granted.
	Held time.Duration
}

// AcquireStart describes an acquire call as it starts.
type AcquireStart struct {
	Strategy string
	Dialect  string
	Name     string
	// Wait says the call waits for the lock (Acquire), rather than give up
	// at once (TryAcquire).
	Wait bool
	// Shared says a pessimistic lock is asked for in shared mode.
	Shared bool
}

// AcquireOutcome is how an acquire call ended.
type AcquireOutcome string

// Outcomes of an acquire call.
const (
	// OutcomeAcquired: the lock was granted (or re-entered).
	OutcomeAcquired AcquireOutcome = "acquired"
	// OutcomeBusy: another owner held the lock — TryAcquire returned
	// sqllock.ErrLocked, or Acquire's context ended while it waited.
	OutcomeBusy AcquireOutcome = "busy"
	// OutcomeError: any other error.
	OutcomeError AcquireOutcome = "error"
)

// AcquireEnd describes an acquire call as it ends.
type AcquireEnd struct {
	AcquireStart
	Outcome AcquireOutcome
	// Duration is the call's.
	Duration time.Duration
	Token    int64 // if acquired
	Err      error // unless acquired
}

// Sources of a hand-off (see HandoffObserver).
const (
	HandoffLocal  = "local"
	HandoffNotice = "notice"
)

// HandoffEvent describes an acquisition by a waiter that a release woke.
type HandoffEvent struct {
	LockEvent
	// Source is HandoffLocal or HandoffNotice.
	Source string
	// Latency runs from the moment the release reached this locker (the
	// releasing call's answer, or the announcement) to the grant.
	Latency time.Duration
}

// WaitingEvent describes a change in the waiters of a name.
type WaitingEvent struct {
	Strategy string
	Dialect  string
	Name     string
	Delta    int
}

// RenewOutcome is the outcome of one lease's renewal.
type RenewOutcome string

// Outcomes of a renewal.
const (
	// RenewOK: the lease was extended.
	RenewOK RenewOutcome = "renewed"
	// RenewFailed: the renewal failed with an error and is retried within
	// the trust window.
	RenewFailed RenewOutcome = "failed"
	// RenewRefused: the database no longer had the lease; it is lost.
	RenewRefused RenewOutcome = "refused"
)

// RenewedEvent describes the outcome of one lease's renewal.
type RenewedEvent struct {
	LockEvent
	Outcome RenewOutcome
	// Margin is the time that was left in the trust window when the
	// renewal succeeded: how close the lease came to being given up.
	Margin time.Duration
	Err    error // RenewFailed's
}

// RenewBatch describes one statement renewing several leases.
type RenewBatch struct {
	Strategy string
	Dialect  string
	Size     int
	// Leases are the contexts of the leases renewed, carrying the values
	// (and so the span) of the contexts they were acquired with; set in
	// StartRenewBatch only.
	Leases []context.Context
}

// ListenerEvent describes a change of a waiting room's listening
// connection.
type ListenerEvent struct {
	Strategy string
	Dialect  string
	// Up says announcements are delivered from now on; false: they are
	// not (Err says why, or nil when the room merely stopped listening as
	// nobody waits).
	Up bool
	// Reconnect says the connection came up again after it was lost.
	Reconnect bool
	Err       error
}

// ReapEvent describes a pass of a Reaper.
type ReapEvent struct {
	Dialect string
	Deleted int
	Took    time.Duration
	Err     error
}

// Operations whose attempts are reported.
const (
	OpInTx            = "in_tx"
	OpRetryOnConflict = "retry_on_conflict"
)

// Retry reasons.
const (
	RetryConflict      = "conflict"
	RetryDeadlock      = "deadlock"
	RetrySerialization = "serialization_failure"
	RetryTransient     = "transient" // a deadlock or serialization failure the driver does not tell apart
)

// Attempt describes one run of the function of rowlock.InTx or rowlock.RetryOnConflict.
type Attempt struct {
	Op      string // OpInTx or OpRetryOnConflict
	Attempt int    // from 1
}

// AttemptEnd describes the end of one run.
type AttemptEnd struct {
	Attempt
	Err error
	// Retry is why another run follows (RetryConflict, RetryDeadlock, ...),
	// or empty if none does.
	Retry string
}

// RevokedEvent describes a release requested of a held lease.
type RevokedEvent struct {
	// LockEvent is the acquisition asked to let go.
	LockEvent
	// Reason is the reason the request gave.
	Reason string
	// Held is the time since the acquisition was granted.
	Held time.Duration
}

// BrokenEvent describes a lease ended by a break.
type BrokenEvent struct {
	// LockEvent is the broken acquisition: its owner and token.
	LockEvent
	// Holds counts its unreleased holds; 0 for a lock released within its
	// minimum hold.
	Holds int
	// Left is the time its lease had left, on the database's clock.
	Left time.Duration
}
