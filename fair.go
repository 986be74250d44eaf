package sqllock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/engine"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// Fair (FIFO) locks: Fair on a Table. A waiter refused at first
// takes a ticket, a row of the dialect's queue, and the lock is granted
// only to the oldest live ticket; the grant deletes the ticket with it. A
// release that frees the lock wakes the oldest ticket's process alone
// (PostgreSQL: a NOTIFY on that process's own channel), so a hand-off
// costs the same few statements however many wait. Tickets live while
// their waiters renew them: a crashed waiter's ticket expires and is
// skipped; a waiter whose context ends gives its ticket up at once. A fair
// Semaphore (semaphore.go) queues the same way, in a queue of its own: its
// permits go to the oldest live ticket, one grant at a time.

// ticketQueue is the database side of a FIFO queue: the tickets of the
// fair lock table's or of a fair semaphore's queue, and the grant under
// its rule.
type ticketQueue interface {
	// Grant makes one grant attempt under the queue's rule (ticket 0:
	// none); it returns the token, or 0 when refused.
	Grant(ctx context.Context, name, owner string, ticket int64) (int64, error)
	Enqueue(ctx context.Context, p dialect.AcquireParams) (dialect.Ticket, error)
	Wait(ctx context.Context, t dialect.Ticket) (time.Duration, bool, error)
	Dequeue(ctx context.Context, t dialect.Ticket) error
	RenewTickets(ctx context.Context, ts []dialect.Ticket, ttl time.Duration) error
}

// fairQueue is the FIFO side of a fair locker: the dialect's queue and
// the renewal of this locker's tickets.
type fairQueue struct {
	q        ticketQueue
	strategy string
	opts     engine.Config

	mu      sync.Mutex
	tickets map[int64]dialect.Ticket // taken, and neither granted nor given up
	timer   *time.Timer              // renews tickets; created by the first
	armed   bool                     // timer will fire
}

// newFairQueue returns the ticket side of the lease engine eng, of
// strategy, on q, and makes the wake-ups of eng's tickets go through it.
func newFairQueue(eng *engine.Locker, strategy string, q ticketQueue) *fairQueue {
	f := &fairQueue{q: q, strategy: strategy, opts: eng.Config(), tickets: make(map[int64]dialect.Ticket)}
	eng.UseTickets(f.name)
	return f
}

// fairStrategy is a fair locker's strategy: its attempts go through the
// queue.
type fairStrategy struct{ f *fairQueue }

func (s fairStrategy) TryOnce(ctx context.Context, name, owner string, _ bool) (int64, time.Time, time.Duration, error) {
	return s.f.grant(ctx, name, owner, 0)
}

// lockTickets is the queue of a fair lock table whose leases last ttl.
type lockTickets struct {
	sqlrun.FairTable
	ttl time.Duration
}

// Grant implements ticketQueue.
func (q lockTickets) Grant(ctx context.Context, name, owner string, ticket int64) (int64, error) {
	return q.FairTable.Grant(ctx, dialect.AcquireParams{Name: name, Owner: owner, TTL: q.ttl}, ticket)
}

// wakingTickets is the queue of an unfair lock table whose leases last
// ttl, where the dialect orders wake-ups by tickets (Catalogue.Waking): a
// grant without a ticket is the lock table's Acquire.
type wakingTickets struct {
	sqlrun.FairTable
	locks sqlrun.LockTable
	ttl   time.Duration
}

// Grant implements ticketQueue.
func (q wakingTickets) Grant(ctx context.Context, name, owner string, ticket int64) (int64, error) {
	p := dialect.AcquireParams{Name: name, Owner: owner, TTL: q.ttl}
	if ticket == 0 {
		return q.locks.Acquire(ctx, p)
	}
	return q.FairTable.Grant(ctx, p, ticket)
}

// grant makes one attempt to be granted name for owner, with ticket (0:
// none). A refusal is ErrLocked, with an unknown wait.
func (f *fairQueue) grant(ctx context.Context, name, owner string, ticket int64) (int64, time.Time, time.Duration, error) {
	for attempt := 0; ; attempt++ {
		start := time.Now()
		token, err := f.q.Grant(ctx, name, owner, ticket)
		if errors.Is(err, dialect.ErrTransient) && attempt < maxTransientRetries {
			continue
		}
		switch {
		case err != nil:
			return 0, start, 0, acquireError(ctx, name, err)
		case token == 0:
			return 0, start, -1, ErrLocked
		}
		if ticket != 0 {
			f.drop(ticket) // deleted by the grant
		}
		return token, start, 0, nil
	}
}

// name returns the name of the ticket id, if it is one of this locker's.
func (f *fairQueue) name(id int64) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tk, ok := f.tickets[id]
	return tk.Name, ok
}

// add renews tk from now on.
func (f *fairQueue) add(tk dialect.Ticket) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tickets[tk.ID] = tk
	if f.armed {
		return
	}
	f.armed = true
	if f.timer == nil {
		f.timer = time.AfterFunc(f.opts.RenewInterval, f.renew)
	} else {
		f.timer.Reset(f.opts.RenewInterval)
	}
}

// drop stops renewing the ticket id.
func (f *fairQueue) drop(id int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.tickets, id)
	if len(f.tickets) == 0 && f.armed && f.timer.Stop() {
		f.armed = false
	}
}

// renew renews every ticket, a batch per statement, on the timer's
// goroutine, and arms the timer again while any is left. A ticket whose
// renewals fail expires, and its waiter loses its place.
func (f *fairQueue) renew() {
	f.mu.Lock()
	ts := make([]dialect.Ticket, 0, len(f.tickets))
	for _, tk := range f.tickets {
		ts = append(ts, tk)
	}
	f.mu.Unlock()
	for len(ts) > 0 {
		batch := ts[:min(len(ts), dialect.MaxRenewBatch)]
		ts = ts[len(batch):]
		ctx, cancel := context.WithTimeout(context.Background(), f.opts.RenewInterval)
		err := f.q.RenewTickets(ctx, batch, f.opts.TTL)
		cancel()
		if err != nil {
			f.opts.Logger.Warn("sqllock: renewing waiters' tickets failed; waiters lose their places if their tickets expire",
				"tickets", len(batch), "err", err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.armed = len(f.tickets) > 0; f.armed {
		f.timer.Reset(f.opts.RenewInterval)
	}
}

// dequeueTimeout bounds the deletion of a ticket given up.
const dequeueTimeout = 5 * time.Second

// fairWaiter is one fair Acquire call: its queue (see queue) and attempts.
type fairWaiter struct {
	f           *fairQueue
	name, owner string
	logger      *slog.Logger

	ticket  dialect.Ticket // zero until Join
	granted bool
}

// Join implements engine.Queue: it takes a ticket.
func (w *fairWaiter) Join(ctx context.Context) (time.Duration, error) {
	tk, err := w.f.q.Enqueue(ctx, dialect.AcquireParams{Name: w.name, Owner: w.owner, TTL: w.f.opts.TTL})
	if err != nil {
		return 0, acquireError(ctx, w.name, fmt.Errorf("taking a waiter's ticket: %w", err))
	}
	w.ticket = tk
	w.f.add(tk)
	return w.wait(ctx), nil
}

// Place implements engine.Queue: the ticket's id.
func (w *fairWaiter) Place() int64 { return w.ticket.ID }

// Addressed implements engine.Queue.
func (w *fairWaiter) Addressed() bool { return w.ticket.Addressed }

// requeues bounds the tickets one wait takes in place of tickets found
// not live.
const requeues = 3

// wait reports how long the waiter may sleep unwoken; -1 when unknown. A
// ticket found not live (expired while its renewals failed, or never
// committed: a reply can outrun a commit that then fails) is replaced by a
// new one, at the end of the queue.
func (w *fairWaiter) wait(ctx context.Context) time.Duration {
	for range requeues {
		d, live, err := w.f.q.Wait(ctx, w.ticket)
		if err != nil {
			w.logger.InfoContext(ctx, "sqllock: could not read the waiters' queue; waiting with backoff",
				"strategy", w.f.strategy, "name", w.name, "err", err)
			return -1
		}
		if live {
			return d
		}
		w.logger.InfoContext(ctx, "sqllock: a waiter's ticket was lost; taking another, at the end of the queue",
			"strategy", w.f.strategy, "name", w.name, "ticket", w.ticket.ID)
		w.f.drop(w.ticket.ID)
		tk, err := w.f.q.Enqueue(ctx, dialect.AcquireParams{Name: w.name, Owner: w.owner, TTL: w.f.opts.TTL})
		if err != nil {
			w.logger.InfoContext(ctx, "sqllock: could not take a waiter's ticket; waiting with backoff",
				"strategy", w.f.strategy, "name", w.name, "err", err)
			return -1
		}
		w.ticket = tk
		w.f.add(tk)
	}
	return -1
}

// TryOnce implements engine.Strategy: one attempt of the waiter's call,
// with its ticket once it has one.
func (w *fairWaiter) TryOnce(ctx context.Context, _, _ string, _ bool) (int64, time.Time, time.Duration, error) {
	token, start, left, err := w.f.grant(ctx, w.name, w.owner, w.ticket.ID)
	switch {
	case err == nil:
		w.granted = true
	case errors.Is(err, ErrLocked) && w.ticket.ID != 0:
		left = w.wait(ctx)
	}
	return token, start, left, err
}

// Leave implements engine.Queue: unless granted, the ticket is deleted, on a
// context of its own (ctx has usually ended), and the next ticket's
// process is woken if this one was the oldest.
func (w *fairWaiter) Leave(ctx context.Context) {
	if w.granted {
		return
	}
	w.f.drop(w.ticket.ID)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dequeueTimeout)
	defer cancel()
	if err := w.f.q.Dequeue(dctx, w.ticket); err != nil {
		w.logger.Warn("sqllock: giving up a waiter's ticket failed; it expires by its TTL",
			"name", w.name, "ticket", w.ticket.ID, "err", err)
	}
}
