package dialecttest

import (
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// The FIFO queue of the lock table (dialect.Catalogue.Fair): tickets order the
// grants; a grant to a ticket deletes it; a ticket given up or expired is
// skipped; re-entry is granted regardless; Reap deletes expired tickets;
// and, on a dialect whose notifier addresses wake-ups (not one that
// watches names), the release that frees a lock announces the oldest
// live ticket's wake-up (dialect.TicketWake).
func checkFair(t *testing.T, e *env) {
	q := e.tables(e.Dialect).Fair
	const name = "fifo"
	p := func(owner string) dialect.AcquireParams {
		return dialect.AcquireParams{Name: name, Owner: owner, TTL: long}
	}
	grant := func(owner string, ticket int64) int64 {
		t.Helper()
		token, err := q.Grant(e.ctx, p(owner), ticket)
		e.must(err, "Grant")
		return token
	}
	enqueue := func(owner string) dialect.Ticket {
		t.Helper()
		tk, err := q.Enqueue(e.ctx, p(owner))
		e.must(err, "Enqueue")
		return tk
	}
	wait := func(tk dialect.Ticket) time.Duration {
		t.Helper()
		d, live, err := q.Wait(e.ctx, tk)
		e.must(err, "Wait")
		if !live {
			t.Fatalf("Wait of ticket %d: not live", tk.ID)
		}
		return d
	}
	release := func(owner string, token int64) {
		t.Helper()
		ok, err := q.Release(e.ctx, dialect.Lease{Name: name, Owner: owner, Token: token}, 0)
		e.must(err, "Release")
		if !ok {
			t.Fatalf("Release of %s's lease found nothing", owner)
		}
	}

	first := grant("holder", 0)
	if first == 0 {
		t.Fatal("Grant without a ticket on a free name with an empty queue: refused")
	}
	a, b := enqueue("a"), enqueue("b")
	if a.ID >= b.ID {
		t.Fatalf("tickets %d then %d: want increasing ids", a.ID, b.ID)
	}
	if w := wait(a); w <= 0 {
		t.Fatalf("Wait of the first ticket while the lock is held: %v, want the lease's time left", w)
	}
	release("holder", first)
	if got := grant("c", 0); got != 0 {
		t.Fatal("Grant without a ticket while tickets are queued: granted")
	}
	if got := grant("b", b.ID); got != 0 {
		t.Fatal("Grant to the second ticket while the first is live: granted")
	}
	if w := wait(b); w <= 0 {
		t.Fatalf("Wait of the second ticket: %v, want until the first expires", w)
	}
	if w := wait(a); w != 0 {
		t.Fatalf("Wait of the first ticket on a free lock: %v, want 0", w)
	}
	ta := grant("a", a.ID)
	if ta <= first {
		t.Fatalf("Grant to the first ticket: token %d, want > %d", ta, first)
	}
	if again := grant("a", 0); again != ta {
		t.Fatalf("re-entry with a ticket queued: token %d, want %d", again, ta)
	}
	release("a", ta)
	if got := grant("b", b.ID); got != 0 {
		t.Fatal("Grant to a ticket while the lock is held: granted")
	}

	// The next release announces b's wake-up, on a notifier that
	// addresses them.
	woken := ticketWakes(t, e)
	release("a", ta)
	woken(b)
	tb := grant("b", b.ID)
	if tb <= ta {
		t.Fatalf("Grant to the second ticket: token %d, want > %d", tb, ta)
	}

	// A ticket given up leaves the queue; an expired one is skipped.
	c, d := enqueue("c"), enqueue("d")
	e.must(q.Dequeue(e.ctx, c), "Dequeue")
	release("b", tb)
	if w := wait(d); w != 0 {
		t.Fatalf("Wait of the ticket behind one given up: %v, want 0", w)
	}
	e.must(q.RenewTickets(e.ctx, []dialect.Ticket{d}, time.Microsecond), "RenewTickets")
	e.eventually("Wait finding the expired ticket not live", func() bool {
		_, live, err := q.Wait(e.ctx, d)
		e.must(err, "Wait")
		return !live
	})
	if _, live, err := q.Wait(e.ctx, c); err != nil || live {
		t.Fatalf("Wait of a ticket given up: live %v, %v; want not live", live, err)
	}
	var td int64
	e.eventually("a grant without a ticket once the only ticket expired", func() bool {
		td = grant("e", 0)
		return td != 0
	})
	release("e", td)
	e.eventually("Reap deleting the expired ticket", func() bool {
		n, err := e.Dialect.Reap(e.ctx, dialect.ReapParams{Limit: 100})
		e.must(err, "Reap")
		return n > 0
	})
}

// ticketWakes subscribes to the dialect's notifier if it addresses
// wake-ups to tickets (not one that watches names, nor a polling harness), until
// the test ends, and returns a function that waits for the announcement of
// a ticket's wake-up; it does nothing where wake-ups are not addressed.
func ticketWakes(t *testing.T, e *env) func(dialect.Ticket) {
	cat := e.Dialect.Catalogue()
	if cat.Notifier == nil || e.h.Polling || cat.WatchesNames {
		return func(dialect.Ticket) {}
	}
	s := newSubscriber()
	sub := cat.Notifier.Subscribe(s)
	t.Cleanup(sub.Unsubscribe)
	select {
	case <-s.ready:
	case err := <-s.lost:
		t.Fatalf("the listening connection failed: %v", err)
	case <-e.ctx.Done():
		t.Fatal("never: the listening connection ready")
	}
	return func(tk dialect.Ticket) {
		t.Helper()
		want := dialect.TicketWake(tk.ID)
		for got := ""; got != want; {
			got = await(e, "the wake-up of ticket "+want, s.released)
		}
	}
}

// checkFairHandoff: a ticket told to wait while the lock is free, since an
// older ticket is owed it, is woken by the release that follows that
// ticket's grant, on a dialect whose notifier addresses wake-ups. The lock's
// row was never marked by a waiter that slept on a held lease: the first
// ticket asked while the lock was free (and was told to try at once), the
// second while the first was owed it. A release that woke nobody here
// would leave the lock free beside a live ticket until the first ticket's
// expiry.
func checkFairHandoff(t *testing.T, e *env) {
	q := e.tables(e.Dialect).Fair
	p := func(name, owner string) dialect.AcquireParams {
		return dialect.AcquireParams{Name: name, Owner: owner, TTL: long}
	}
	wait := func(tk dialect.Ticket) time.Duration {
		t.Helper()
		d, live, err := q.Wait(e.ctx, tk)
		e.must(err, "Wait")
		if !live {
			t.Fatalf("Wait of ticket %d: not live", tk.ID)
		}
		return d
	}
	woken := ticketWakeOrder(t, e)
	if woken == nil {
		t.Skip("the dialect's notifier does not address wake-ups to tickets")
	}
	const name = "fifo-handoff"
	first, err := q.Grant(e.ctx, p(name, "holder"), 0)
	e.must(err, "Grant")
	a, err := q.Enqueue(e.ctx, p(name, "a"))
	e.must(err, "Enqueue")
	_, err = q.Release(e.ctx, dialect.Lease{Name: name, Owner: "holder", Token: first}, 0)
	e.must(err, "Release")
	if w := wait(a); w != 0 {
		t.Fatalf("Wait of the only ticket on a free lock: %v, want 0", w)
	}
	b, err := q.Enqueue(e.ctx, p(name, "b"))
	e.must(err, "Enqueue")
	if w := wait(b); w <= 0 {
		t.Fatalf("Wait of the second ticket while the first is owed the lock: %v, want until the first expires", w)
	}
	ta, err := q.Grant(e.ctx, p(name, "a"), a.ID)
	e.must(err, "Grant")
	if ta == 0 {
		t.Fatal("Grant to the first ticket on a free lock: refused")
	}
	_, err = q.Release(e.ctx, dialect.Lease{Name: name, Owner: "a", Token: ta}, 0)
	e.must(err, "Release")
	woken(b)
}

// ticketWakeOrder subscribes to the dialect's notifier as ticketWakes does
// and returns a function that checks that a ticket's wake-up was announced
// by the time it returns: it announces a wake-up of its own afterwards (a
// ticket behind one given up, on a name of its own) and fails if that one
// comes first (a listener hears notifications in the order of their
// commits). It returns nil where wake-ups are not addressed.
func ticketWakeOrder(t *testing.T, e *env) func(dialect.Ticket) {
	cat := e.Dialect.Catalogue()
	if cat.Notifier == nil || e.h.Polling || cat.WatchesNames {
		return nil
	}
	q := e.tables(e.Dialect).Fair
	s := newSubscriber()
	sub := cat.Notifier.Subscribe(s)
	t.Cleanup(sub.Unsubscribe)
	select {
	case <-s.ready:
	case err := <-s.lost:
		t.Fatalf("the listening connection failed: %v", err)
	case <-e.ctx.Done():
		t.Fatal("never: the listening connection ready")
	}
	return func(tk dialect.Ticket) {
		t.Helper()
		const sentinel = "fifo-sentinel"
		p := func(owner string) dialect.AcquireParams {
			return dialect.AcquireParams{Name: sentinel, Owner: owner, TTL: long}
		}
		x, err := q.Enqueue(e.ctx, p("x"))
		e.must(err, "Enqueue")
		y, err := q.Enqueue(e.ctx, p("y"))
		e.must(err, "Enqueue")
		e.must(q.Dequeue(e.ctx, x), "Dequeue") // wakes y: the lock is free
		want, after := dialect.TicketWake(tk.ID), dialect.TicketWake(y.ID)
		for {
			switch got := await(e, "the wake-up of ticket "+want, s.released); got {
			case want:
				e.must(q.Dequeue(e.ctx, y), "Dequeue")
				return
			case after:
				t.Fatalf("the release announced no wake-up of ticket %d (the next ticket's wake-up, announced later, came first)", tk.ID)
			}
		}
	}
}
