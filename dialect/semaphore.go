package dialect

import (
	"context"
	"errors"
	"time"
)

// ErrLimitMismatch means an acquire asked for a semaphore with another limit
// than the one its current holders were granted under. A name's limit is
// set by the acquire that finds the semaphore without holders; while any
// holder remains, every acquire must ask for the same limit. The root
// package re-exports it.
var ErrLimitMismatch = errors.New("sqllock: semaphore limit differs from the one its holders use")

// SemaphoreParams are the parameters of SemaphoreTable.Acquire.
type SemaphoreParams struct {
	Name  string
	Owner string
	TTL   time.Duration
	// Limit is the number of holders the semaphore admits at once, at
	// least 1.
	Limit int
}

// SemaphoreTable runs the statements of the semaphore tables: a row per
// name (its limit, and what its next token must exceed) and a row per
// holder, keyed by (name, owner), holding a lease like a row of the lock
// table. Its LeaseTable methods act on the holders' rows; List returns
// one entry per holder, ordered by name.
type SemaphoreTable interface {
	LeaseTable
	// Acquire grants p.Owner one of p.Limit permits of p.Name, in one
	// statement or one short transaction that serialises the grants of
	// p.Name (a database with one writer at a time, SQLite, serialises
	// all grants): it re-enters a live permit of the same owner (same
	// token, one more hold), or, if fewer than p.Limit of the name's
	// leases are live, grants p.Owner a permit with a new token, larger
	// than every token granted on p.Name before; a new permit's grant
	// deletes the rows of the name's ended leases. It returns 0 when the
	// semaphore is full, and an error wrapping ErrLimitMismatch when the
	// name's holders were granted under another limit. Expiry is computed
	// from the database clock. If ctx ends meanwhile, the transaction is
	// ended on the server and Acquire returns only once it has ended (see
	// LockTable.Acquire).
	Acquire(ctx context.Context, p SemaphoreParams) (token int64, err error)
	// Remaining reports how long the semaphore's first lease to end has
	// left on the database clock; ok is false when it has no holder. Only
	// waiters ask: a dialect that announces releases marks the name as
	// waited for.
	Remaining(ctx context.Context, name string) (d time.Duration, ok bool, err error)
	// Announces reports whether releases of permits are announced through
	// the dialect's Notifier, so that waiters need not poll.
	Announces() bool
}

// FairSemaphoreTable is the semaphore tables with a queue of tickets per
// name, kept apart from the lock table's queue. A ticket is live until its
// expiry on the database clock; expired tickets are skipped, and deleted
// by Dialect.Reap. A name's permits go to its live tickets in ticket
// order, one at a time: a ticket is granted only when a permit is free and
// no live ticket of the name is older, and a caller without a ticket only
// when a permit is free and the name has no live ticket at all; re-entry
// by a holder is granted regardless. Its Release (from LeaseTable) wakes
// the process of the oldest live ticket when it frees a permit, where the
// dialect can address one.
type FairSemaphoreTable interface {
	SemaphoreTable
	// Grant is Acquire under the queue's rule above; ticket 0 means the
	// caller has none. A grant to a ticket deletes it in the same
	// transaction and, if a permit is still free, wakes the process of
	// the next live ticket, where the dialect can address one.
	Grant(ctx context.Context, p SemaphoreParams, ticket int64) (token int64, err error)
	// Enqueue takes a ticket for p.Owner on p.Name, live for p.TTL.
	Enqueue(ctx context.Context, p AcquireParams) (Ticket, error)
	// Wait reports how long the ticket's waiter may sleep before it tries
	// again when no wake-up comes, for a semaphore of limit permits: 0 when
	// a permit is free and no live ticket is older; else until the oldest
	// live ticket ahead expires or, if none, the first holder's lease
	// ends. live is false when the ticket is not live (see
	// FairTable.Wait).
	Wait(ctx context.Context, t Ticket, limit int) (d time.Duration, live bool, err error)
	// Dequeue deletes the ticket, and wakes the next ticket's process
	// when the deleted one was the oldest live ticket and a permit is
	// free.
	Dequeue(ctx context.Context, t Ticket) error
	// RenewTickets extends the tickets to ttl from now, in one statement;
	// callers pass at most MaxRenewBatch tickets.
	RenewTickets(ctx context.Context, ts []Ticket, ttl time.Duration) error
}
