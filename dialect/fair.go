package dialect

import (
	"strconv"
	"strings"
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

// FairSQL declares the statements of the FIFO queue of the lock table (see
// FairTable in internal/sqlrun). Tickets travel as :ticket; the waker of the
// enqueueing process as :channel.
type FairSQL struct {
	// Grant grants a lease on :name to :owner for :ttl, as the lock
	// table's Acquire does, but only under the queue's rule for :ticket
	// (0: none); its number is the token, 0 when refused. Without Consume
	// it also deletes the ticket, in the same statement, and runs as a
	// grant (as LockSQL.Acquire). Otherwise a grant is a short
	// transaction, after First, if set, outside it: Grant, or the lock
	// table's Acquire when Grant is empty, then Consume.
	Grant SQL
	// First selects 1 when :ticket (0: none) may be granted :name under the
	// queue's rule, or when :owner holds a live lease on :name (re-entry),
	// else 0.
	First SQL
	// Consume deletes the ticket :ticket.
	Consume SQL
	// Enqueue inserts a ticket for :name and :owner, live for :ttl; its
	// number is the ticket's id.
	Enqueue SQL
	// Wait selects the microseconds the waiter of :ticket may sleep (see
	// FairTable.Wait in internal/sqlrun), or -1 when the ticket is not live.
	Wait SQL
	// Mark, if set, runs before Wait: it marks the lock row of :name, if
	// live, as waited for by tickets, so that its release reports it (for
	// a dialect whose Wait cannot mark it in the same statement).
	Mark SQL
	// Dequeue deletes :ticket, waking the next ticket's process if it was
	// the oldest and the lock is free; or, for a dialect whose statement
	// cannot wake it, its number is 2 so that Hooks.AfterRelease rings
	// :name's waiting processes. With Addressed and
	// Hooks.AfterTicketed, that hook runs after it.
	Dequeue SQL
	// Renew extends the tickets of :leases (their tokens are the tickets'
	// ids; :names their names) to :ttl from now.
	Renew SQL
	// Waiting selects each name that has live tickets and their number,
	// for operators (package inspect).
	Waiting SQL
	// Channel is the value of :channel: the process's waker.
	Channel string
	// Addressed says that a release wakes a ticket's waiter through its
	// ticket alone (see Ticket.Addressed).
	Addressed bool
	// ConsumeApart, for tickets that order wake-ups alone
	// (Catalogue.Waking), makes a grant to a ticket the lock
	// table's Acquire, after which Consume deletes the ticket off the
	// grant's path (Hooks.Go), followed by Hooks.AfterTicketed (the
	// lock may have been released before the ticket was gone). A release
	// of the name in the granted process waits for both, so that its ring
	// never reaches the granted ticket. A deletion that fails leaves the
	// ticket, which nobody renews, to expire.
	ConsumeApart bool
}
