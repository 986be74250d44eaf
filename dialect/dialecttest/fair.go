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
