package dialecttest

import (
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// The FIFO queue of the semaphores (dialect.Catalogue.FairSemaphores), with a limit
// of 2: permits go to live tickets one at a time, in ticket order; a
// caller without a ticket takes a permit only when nobody is queued; a
// grant to a ticket deletes it; re-entry is granted regardless; a ticket
// given up or expired is skipped; Reap deletes expired tickets; and, on a
// dialect whose notifier addresses wake-ups, whatever lets the oldest
// ticket be granted (a release, the oldest ticket given up, a grant
// leaving a permit free) announces that ticket's wake-up.
func checkFairSemaphore(t *testing.T, e *env) {
	q := e.tables(e.Dialect).FairSemaphores
	const name, limit = "fifo-sem", 2
	grant := func(owner string, ticket int64) int64 {
		t.Helper()
		token, err := q.Grant(e.ctx, dialect.SemaphoreParams{Name: name, Owner: owner, TTL: long, Limit: limit}, ticket)
		e.must(err, "Grant")
		return token
	}
	enqueue := func(owner string) dialect.Ticket {
		t.Helper()
		tk, err := q.Enqueue(e.ctx, dialect.AcquireParams{Name: name, Owner: owner, TTL: long})
		e.must(err, "Enqueue")
		return tk
	}
	wait := func(tk dialect.Ticket) time.Duration {
		t.Helper()
		d, live, err := q.Wait(e.ctx, tk, limit)
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
			t.Fatalf("Release of %s's permit found nothing", owner)
		}
	}
	// On a notifier that addresses wake-ups, woken waits for the
	// announcement of a ticket's wake-up.
	woken := func(dialect.Ticket) {}
	if q.Announces() {
		woken = ticketWakes(t, e)
	}

	h1, h2 := grant("h1", 0), grant("h2", 0)
	if h1 == 0 || h2 == 0 || h2 <= h1 {
		t.Fatalf("Grant without a ticket, twice, under limit %d with an empty queue: tokens %d, %d", limit, h1, h2)
	}
	a, b, c := enqueue("a"), enqueue("b"), enqueue("c")
	if a.ID >= b.ID || b.ID >= c.ID {
		t.Fatalf("tickets %d, %d, %d: want increasing ids", a.ID, b.ID, c.ID)
	}
	if w := wait(a); w <= 0 {
		t.Fatalf("Wait of the first ticket while the semaphore is full: %v, want the first lease's time left", w)
	}
	release("h1", h1)
	woken(a)
	if got := grant("x", 0); got != 0 {
		t.Fatal("Grant without a ticket while tickets are queued: granted")
	}
	if got := grant("b", b.ID); got != 0 {
		t.Fatal("Grant to the second ticket while the first is live: granted")
	}
	if w := wait(b); w <= 0 {
		t.Fatalf("Wait of the second ticket: %v, want until the first expires", w)
	}
	if w := wait(a); w != 0 {
		t.Fatalf("Wait of the first ticket with a permit free: %v, want 0", w)
	}
	ta := grant("a", a.ID)
	if ta <= h2 {
		t.Fatalf("Grant to the first ticket: token %d, want > %d", ta, h2)
	}
	if again := grant("a", 0); again != ta {
		t.Fatalf("re-entry with tickets queued: token %d, want %d", again, ta)
	}
	release("a", ta) // one hold of two: no permit freed
	if got := grant("b", b.ID); got != 0 {
		t.Fatal("Grant to a ticket while the semaphore is full: granted")
	}

	// Two permits freed: each release wakes the oldest ticket, and the
	// grant to it, leaving a permit free, wakes the next.
	release("h2", h2)
	woken(b)
	release("a", ta)
	if w := wait(c); w <= 0 {
		t.Fatalf("Wait of the second ticket with two permits free and the first ticket live: %v, want > 0", w)
	}
	if got := grant("c", c.ID); got != 0 {
		t.Fatal("Grant to the second ticket with two permits free and the first ticket live: granted")
	}
	tb := grant("b", b.ID)
	if tb <= ta {
		t.Fatalf("Grant to the first ticket: token %d, want > %d", tb, ta)
	}
	woken(c)
	tc := grant("c", c.ID)
	if tc <= tb {
		t.Fatalf("Grant to the second ticket: token %d, want > %d", tc, tb)
	}

	// The oldest ticket given up while a permit is free wakes the next.
	d, f := enqueue("d"), enqueue("f")
	release("c", tc)
	woken(d)
	e.must(q.Dequeue(e.ctx, d), "Dequeue")
	woken(f)
	if w := wait(f); w != 0 {
		t.Fatalf("Wait of the ticket behind one given up: %v, want 0", w)
	}
	if _, live, err := q.Wait(e.ctx, d, limit); err != nil || live {
		t.Fatalf("Wait of a ticket given up: live %v, %v; want not live", live, err)
	}
	// An expired ticket is skipped.
	e.must(q.RenewTickets(e.ctx, []dialect.Ticket{f}, time.Microsecond), "RenewTickets")
	e.eventually("Wait finding the expired ticket not live", func() bool {
		_, live, err := q.Wait(e.ctx, f, limit)
		e.must(err, "Wait")
		return !live
	})
	tg := grant("g", 0)
	if tg == 0 {
		t.Fatal("Grant without a ticket, a permit free and the only ticket expired: refused")
	}
	release("g", tg)
	release("b", tb)
	e.eventually("Reap deleting the expired ticket", func() bool {
		n, err := e.Dialect.Reap(e.ctx, dialect.ReapParams{Limit: 100})
		e.must(err, "Reap")
		return n > 0
	})
}
