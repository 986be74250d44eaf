package dialecttest

import (
	"testing"

	"github.com/sqllock/sqllock/dialect"
)

// The tickets that order an unfair lock's wake-ups
// (dialect.Catalogue.Waking): a grant to a ticket is the lock table's
// Acquire whatever tickets are live, and deletes the ticket; and once a
// ticket's waiter asked how long to wait (Wait), the lock table's
// statements that free the lock (Release, MultiLockTable.ReleaseAll,
// Break) announce the oldest live ticket's wake-up.
func checkWaking(t *testing.T, e *env) {
	tabs := e.tables(e.Dialect)
	q, locks := tabs.Waking, tabs.Locks
	const name = "waking"
	p := func(owner string) dialect.AcquireParams {
		return dialect.AcquireParams{Name: name, Owner: owner, TTL: long}
	}
	woken := ticketWakes(t, e)
	enqueue := func(owner string) dialect.Ticket {
		t.Helper()
		tk, err := q.Enqueue(e.ctx, p(owner))
		e.must(err, "Enqueue")
		return tk
	}
	live := func(tk dialect.Ticket) bool {
		t.Helper()
		_, live, err := q.Wait(e.ctx, tk)
		e.must(err, "Wait")
		return live
	}

	holder, err := locks.Acquire(e.ctx, p("holder"))
	e.must(err, "Acquire")
	a, b := enqueue("a"), enqueue("b")
	if !live(a) || !live(b) {
		t.Fatal("a ticket just taken is not live")
	}
	if token, err := q.Grant(e.ctx, p("b"), b.ID); err != nil || token != 0 {
		t.Fatalf("Grant to a ticket while the lock is held: %d, %v; want 0 (refused)", token, err)
	}
	if ok, err := locks.Release(e.ctx, dialect.Lease{Name: name, Owner: "holder", Token: holder}, 0); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	woken(a)

	// The younger ticket is granted: the tickets order wake-ups, not
	// grants.
	tokenB, err := q.Grant(e.ctx, p("b"), b.ID)
	e.must(err, "Grant")
	if tokenB <= holder {
		t.Fatalf("Grant to the younger ticket of a free lock: token %d; want one above %d", tokenB, holder)
	}
	e.eventually("the ticket granted is deleted", func() bool { return !live(b) })
	if !live(a) {
		t.Fatal("the older ticket is gone after another's grant")
	}
	if _, ok, err := locks.Break(e.ctx, name, 0); err != nil || !ok {
		t.Fatalf("Break: %v, %v", ok, err)
	}
	woken(a)

	tokenA, err := q.Grant(e.ctx, p("a"), a.ID)
	e.must(err, "Grant")
	if tokenA <= tokenB {
		t.Fatalf("Grant after the break: token %d; want one above %d", tokenA, tokenB)
	}
	c := enqueue("c")
	if tabs.Multi != nil {
		released, err := tabs.Multi.ReleaseAll(e.ctx, []dialect.Lease{{Name: name, Owner: "a", Token: tokenA}}, 0)
		if err != nil || len(released) != 1 || !released[0] {
			t.Fatalf("ReleaseAll: %v, %v", released, err)
		}
		woken(c)
	}
	e.must(q.Dequeue(e.ctx, c), "Dequeue")
	if live(c) {
		t.Fatal("the ticket given up is still live")
	}
}

// The tickets that order an unfair semaphore's wake-ups
// (dialect.Catalogue.WakingSemaphores): a grant to a ticket is the
// semaphore's acquire whatever tickets are live, and deletes the ticket;
// once the tickets' waiters asked how long to wait, a release that frees a
// permit announces the oldest live ticket's wake-up, and a grant to a
// ticket that leaves a permit free announces the next one's.
func checkWakingSemaphore(t *testing.T, e *env) {
	tabs := e.tables(e.Dialect)
	q, sems := tabs.WakingSemaphores, tabs.Semaphores
	const name, limit = "waking-sem", 2
	p := func(owner string) dialect.SemaphoreParams {
		return dialect.SemaphoreParams{Name: name, Owner: owner, TTL: long, Limit: limit}
	}
	woken := ticketWakes(t, e)
	enqueue := func(owner string) dialect.Ticket {
		t.Helper()
		tk, err := q.Enqueue(e.ctx, dialect.AcquireParams{Name: name, Owner: owner, TTL: long})
		e.must(err, "Enqueue")
		_, live, err := q.Wait(e.ctx, tk, limit)
		e.must(err, "Wait")
		if !live {
			t.Fatalf("ticket %d, just taken: not live", tk.ID)
		}
		return tk
	}
	acquire := func(owner string) int64 {
		t.Helper()
		token, err := sems.Acquire(e.ctx, p(owner))
		e.must(err, "Acquire")
		if token == 0 {
			t.Fatalf("Acquire for %s: refused", owner)
		}
		return token
	}
	grant := func(tk dialect.Ticket) int64 {
		t.Helper()
		token, err := q.Grant(e.ctx, p(tk.Owner), tk.ID)
		e.must(err, "Grant")
		if token == 0 {
			t.Fatalf("Grant to ticket %d of %s with a permit free: refused", tk.ID, tk.Owner)
		}
		return token
	}
	release := func(owner string, token int64) {
		t.Helper()
		ok, err := sems.Release(e.ctx, dialect.Lease{Name: name, Owner: owner, Token: token}, 0)
		e.must(err, "Release")
		if !ok {
			t.Fatalf("Release of %s's permit found nothing", owner)
		}
	}

	h1, h2 := acquire("h1"), acquire("h2")
	a, b := enqueue("a"), enqueue("b")
	release("h1", h1)
	woken(a)
	// The younger ticket is granted: the tickets order wake-ups, not
	// grants.
	tb := grant(b)
	release("h2", h2)
	woken(a)
	ta := grant(a)

	// Two permits freed together: the release wakes the oldest ticket, and
	// its grant, which leaves a permit free, the next.
	c, d := enqueue("c"), enqueue("d")
	release("a", ta)
	release("b", tb)
	woken(c)
	grant(c)
	woken(d)
	grant(d)
}
