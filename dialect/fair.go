package dialect

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Ticket names a waiter's place in a lock's queue: a row of the ticket
// table, whose ID orders it among the name's tickets.
type Ticket struct {
	Name  string
	Owner string
	ID    int64
	// Addressed says that releases wake the ticket's waiter through the
	// ticket (TicketWake) alone, so that its name needs no watching
	// (Subscription.Watch).
	Addressed bool
}

// FairTable is the lock table with a queue of tickets per name. A ticket is
// live until its expiry on the database clock; expired tickets are skipped,
// and deleted by Dialect.Reap. The lock is granted to a ticket only when no
// live ticket of the name is older, and without a ticket only when the name
// has no live ticket at all; re-entry of a live lease by its owner is
// granted regardless. Its Release (from LeaseTable) wakes the process of
// the oldest live ticket when it frees the lock, where the dialect can
// address one.
type FairTable interface {
	LeaseTable
	// Grant grants a lease as LockTable.Acquire does, under the queue's
	// rule above; ticket 0 means the caller has none. A grant to a ticket
	// deletes it atomically with the grant (one statement, or one short
	// transaction). It returns the token, or 0 when refused.
	Grant(ctx context.Context, p AcquireParams, ticket int64) (token int64, err error)
	// Enqueue takes a ticket for p.Owner on p.Name, live for p.TTL.
	Enqueue(ctx context.Context, p AcquireParams) (Ticket, error)
	// Wait reports how long the ticket's waiter may sleep before it tries
	// again when no wake-up comes: 0 when the lock is free and no live
	// ticket is older; else until the oldest live ticket ahead expires or,
	// if none, until the holder's lease ends. live is false when the
	// ticket is not live (expired, deleted, or never committed: a reply
	// can outrun a commit that then fails): its waiter has no place.
	Wait(ctx context.Context, t Ticket) (d time.Duration, live bool, err error)
	// Dequeue deletes the ticket, and wakes the next ticket's process when
	// the deleted one was the oldest live ticket and the lock is free.
	Dequeue(ctx context.Context, t Ticket) error
	// RenewTickets extends the tickets to ttl from now, in one statement;
	// callers pass at most MaxRenewBatch tickets.
	RenewTickets(ctx context.Context, ts []Ticket, ttl time.Duration) error
}

// ticketWakePrefix starts the announcement of a ticket's wake-up.
const ticketWakePrefix = "\x01sqllock-ticket:"

// TicketWake is how a Notifier announces the wake-up of one ticket's
// waiter to its Subscribers: Released(TicketWake(id)). A process's
// listening connection hears the wake-ups of its own tickets alone; the
// announcement names the ticket so that, of the process's waiters, only
// its waiter tries again.
func TicketWake(id int64) string { return ticketWakePrefix + strconv.FormatInt(id, 10) }

// ParseTicketWake reports the ticket whose wake-up s announces; ok is false
// when s is a released name.
func ParseTicketWake(s string) (id int64, ok bool) {
	rest, ok := strings.CutPrefix(s, ticketWakePrefix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	return id, err == nil
}
