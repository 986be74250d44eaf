package chaos

import (
	"context"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/observe"
)

// What the library does on its own, for the history: each turn of a Worker
// carries its operation on the context of its Acquire (see withTurn), and
// the library hands that context's values on to what it does for the
// acquisition, so that
//
//   - HistoryTracer, set as a locker's Observer, records a Renewed event
//     for each successful renewal of a lease (renewals carry the values of
//     the context the lease was acquired with);
//   - a dialect wrapped by TraceTickets records the FIFO tickets of fair
//     waiters (sqllock.TableOptions.Fair): an Enqueued event when a ticket was
//     taken (after its statement returned, so after it was committed, as
//     CheckFIFO needs), a TicketLost event when the waiter found its
//     ticket not live any more (it takes another, at the end of the
//     queue: a new Enqueued event follows), and a Dequeued event when it
//     gave its ticket up (its Acquire ended ungranted). A grant to a
//     ticket consumes it: the ticket of a granted Acquire is that of the
//     last Enqueued event of its operation.

// Kinds of the FIFO ticket events: see TraceTickets.
const (
	// TicketLost: the waiter of operation Op found its ticket Ticket not
	// live (expired while its renewals failed or its process was stopped,
	// or never committed).
	TicketLost Kind = "ticket-lost"
	// Dequeued: the waiter gave its ticket Ticket up (deleted it), its
	// Acquire ending ungranted; Err is set if the deletion failed (the
	// ticket then lives until it expires).
	Dequeued Kind = "dequeued"
)

// turnKey carries a turn's operation on the Acquire's context.
type turnKey struct{}

// turnOp is the operation of one Worker turn.
type turnOp struct {
	rec    *Recorder
	worker string
	op     int64
}

// withTurn returns ctx carrying the turn's operation.
func withTurn(ctx context.Context, rec *Recorder, worker string, op int64) context.Context {
	return context.WithValue(ctx, turnKey{}, turnOp{rec, worker, op})
}

// record adds an event of the turn ctx carries, if it carries one.
func record(ctx context.Context, e Event) {
	t, ok := ctx.Value(turnKey{}).(turnOp)
	if !ok {
		return
	}
	e.Worker, e.Op = t.worker, t.op
	t.rec.Add(e)
}

// trustMargin is how much earlier than its lease's TTL, counted from the
// start of the statement that granted or renewed it, a holder stops
// trusting the lease: min(TTL/10, 1s), as sqllock computes it (design
// rule 4; see meta.json's trust_margin_ns).
func trustMargin(ttl time.Duration) time.Duration { return min(ttl/10, time.Second) }

// trustUntil bounds from above the end of the trust window of a lease of
// ttl granted or renewed by a statement that returned at at: at + ttl -
// trustMargin(ttl).
func trustUntil(at int64, ttl time.Duration) int64 {
	return at + int64(ttl-trustMargin(ttl))
}

// HistoryTracer records a Renewed event for each successful renewal of a
// lease acquired by a Worker's turn, the one event it receives. TTL is
// the lockers' lease TTL.
type HistoryTracer struct{ TTL time.Duration }

var _ observe.RenewedObserver = HistoryTracer{}

// Renewed implements observe.RenewedObserver.
func (h HistoryTracer) Renewed(ctx context.Context, e observe.RenewedEvent) {
	if e.Outcome != observe.RenewOK {
		return
	}
	at := time.Now().UnixNano()
	record(ctx, Event{Kind: Renewed, Name: e.Name, Token: e.Token, At: at, TrustUntil: trustUntil(at, h.TTL)})
}

// TraceTickets returns d with its FIFO queues (the Fair and
// FairSemaphores tables) recording the tickets of Workers' turns, and every
// other method d's own.
func TraceTickets(d dialect.Dialect) dialect.Dialect { return ticketTracer{d} }

type ticketTracer struct{ dialect.Dialect }

// Tables implements sqlrun.TableSource.
func (d ticketTracer) Tables() (*sqlrun.Tables, error) {
	tb, err := sqlrun.Open(d.Dialect)
	if err != nil {
		return nil, err
	}
	if tb.Fair != nil {
		tb.Fair = ticketTable{tb.Fair}
	}
	if tb.FairSemaphores != nil {
		tb.FairSemaphores = ticketSemTable{tb.FairSemaphores}
	}
	return tb, nil
}

// ticketTable is a fair lock table recording its tickets.
type ticketTable struct{ sqlrun.FairTable }

func (q ticketTable) Enqueue(ctx context.Context, p dialect.AcquireParams) (dialect.Ticket, error) {
	tk, err := q.FairTable.Enqueue(ctx, p)
	enqueued(ctx, p.Name, tk, err)
	return tk, err
}

func (q ticketTable) Wait(ctx context.Context, t dialect.Ticket) (time.Duration, bool, error) {
	d, live, err := q.FairTable.Wait(ctx, t)
	waited(ctx, t, live, err)
	return d, live, err
}

func (q ticketTable) Dequeue(ctx context.Context, t dialect.Ticket) error {
	err := q.FairTable.Dequeue(ctx, t)
	dequeued(ctx, t, err)
	return err
}

// ticketSemTable is a fair semaphore's tables recording its tickets.
type ticketSemTable struct{ sqlrun.FairSemaphoreTable }

func (q ticketSemTable) Enqueue(ctx context.Context, p dialect.AcquireParams) (dialect.Ticket, error) {
	tk, err := q.FairSemaphoreTable.Enqueue(ctx, p)
	enqueued(ctx, p.Name, tk, err)
	return tk, err
}

func (q ticketSemTable) Wait(ctx context.Context, t dialect.Ticket, limit int) (time.Duration, bool, error) {
	d, live, err := q.FairSemaphoreTable.Wait(ctx, t, limit)
	waited(ctx, t, live, err)
	return d, live, err
}

func (q ticketSemTable) Dequeue(ctx context.Context, t dialect.Ticket) error {
	err := q.FairSemaphoreTable.Dequeue(ctx, t)
	dequeued(ctx, t, err)
	return err
}

func enqueued(ctx context.Context, name string, tk dialect.Ticket, err error) {
	if err == nil {
		record(ctx, Event{Kind: Enqueued, Name: name, Ticket: tk.ID})
	}
}

func waited(ctx context.Context, t dialect.Ticket, live bool, err error) {
	if err == nil && !live {
		record(ctx, Event{Kind: TicketLost, Name: t.Name, Ticket: t.ID})
	}
}

func dequeued(ctx context.Context, t dialect.Ticket, err error) {
	e := Event{Kind: Dequeued, Name: t.Name, Ticket: t.ID}
	if err != nil {
		e.Err = err.Error()
	}
	record(ctx, e)
}
