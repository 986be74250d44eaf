package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Enqueued records that a fair waiter (sqllock.TableOptions.Fair) took a
// ticket: At is after the ticket was committed, Ticket is the ticket's id,
// and Op is that of the waiter's AcquireInvoke. A waiter whose ticket was
// lost (TicketLost) takes another: the last Enqueued of an operation is
// its ticket (see TraceTickets).
const Enqueued Kind = "enqueued"

// fairWait is one Acquire, and the ticket it took, if any.
type fairWait struct {
	enq    *Event // nil: no ticket
	invoke Event
	end    *Event // AcquireOK or AcquireFail; nil if the worker never learned
}

// CheckFIFO checks the FIFO order of grants among fair waiters: once a
// waiter's ticket is taken, no Acquire that begins later is granted before
// it. A waiter that gave up (AcquireFail) or never learned its outcome
// (killed) left the queue, and one that waited longer than ttl may have
// lost its ticket to expiry (a paused process renews nothing): neither
// counts. Grants of a name are ordered by their tokens. It returns one
// violation, of kind "fifo order", for each pair granted out of order.
func CheckFIFO(events []Event, ttl time.Duration) []Violation {
	byOp := map[opKey]*fairWait{}
	var keys []opKey
	for _, e := range events {
		k := opKey{e.Worker, e.Op}
		switch e.Kind {
		case AcquireInvoke:
			byOp[k] = &fairWait{invoke: e}
			keys = append(keys, k)
		case Enqueued, AcquireOK, AcquireFail:
			w := byOp[k]
			if w == nil {
				continue // its invoke was not recorded
			}
			e := e
			if e.Kind == Enqueued {
				w.enq = &e
			} else if w.end == nil {
				w.end = &e
			}
		}
	}
	byName := map[string][]*fairWait{}
	for _, k := range keys {
		w := byOp[k]
		byName[w.invoke.Name] = append(byName[w.invoke.Name], w)
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	var vs []Violation
	for _, n := range names {
		ws := byName[n]
		slices.SortFunc(ws, func(x, y *fairWait) int { return cmp.Compare(x.invoke.At, y.invoke.At) })
		for _, a := range ws {
			if a.enq == nil || a.end == nil || a.end.Kind != AcquireOK || time.Duration(a.end.At-a.invoke.At) > ttl {
				continue // no ticket, left the queue, or may have lost its ticket
			}
			for _, b := range ws {
				if b.invoke.At <= a.enq.At || b.invoke.Worker == a.invoke.Worker || b.end == nil || b.end.Kind != AcquireOK {
					continue // not certainly behind a, a re-entry, or not granted
				}
				if b.end.Token < a.end.Token {
					es := []Event{*a.enq, b.invoke, *b.end, *a.end}
					vs = append(vs, Violation{Kind: "fifo order",
						Msg: fmt.Sprintf("%q: %s's ticket %d, taken before %s's Acquire began, was granted token %d after its token %d",
							n, a.invoke.Worker, a.enq.Ticket, b.invoke.Worker, a.end.Token, b.end.Token),
						Events: sortEvents(es)})
				}
			}
		}
	}
	return vs
}
