package dialecttest

import (
	"errors"
	"testing"

	"github.com/sqllock/sqllock/dialect"
)

// The listings for operators (package inspect): what a lease row does not
// say about its holder, read back for holders the check made.
//
// An election's value is listed for its lease, and for that lease only;
// a name's live tickets are counted; a semaphore's limit is listed; the
// read side's holders of a read/write lock are listed, and the write
// side's are not.
func checkInventory(t *testing.T, e *env) {
	tb := e.tables(e.Dialect)
	if el := tb.Elections; el != nil && !electionsRefused(t, el) {
		l := e.grant(e.table(Locks), "leader", "a")
		e.grant(e.table(Locks), "plain", "b")
		e.proclaim(el, l, "a:8080", true)
		values, err := el.Values(e.ctx)
		e.must(err, "Values")
		if len(values) != 1 || values[l] != "a:8080" {
			t.Fatalf("Values = %v, want only %+v: a:8080", values, l)
		}
	}
	if q := tb.Fair; q != nil {
		for _, owner := range []string{"x", "y"} {
			_, err := q.Enqueue(e.ctx, dialect.AcquireParams{Name: "queued", Owner: owner, TTL: long})
			e.must(err, "Enqueue")
		}
		waiting, err := q.Waiting(e.ctx)
		e.must(err, "Waiting")
		if waiting != nil && (len(waiting) != 1 || waiting["queued"] != 2) {
			t.Fatalf("Waiting = %v, want queued: 2", waiting)
		}
	}
	if sems := tb.Semaphores; sems != nil {
		_, err := sems.Acquire(e.ctx, dialect.SemaphoreParams{Name: "pool", Owner: "a", TTL: long, Limit: 3})
		e.must(err, "semaphore Acquire")
		limits, err := sems.Limits(e.ctx)
		e.must(err, "Limits")
		if limits != nil && limits["pool"] != 3 {
			t.Fatalf("Limits = %v, want pool: 3", limits)
		}
	}
	if rw := tb.RWLocks; rw != nil {
		r, err := rw.Acquire(e.ctx, dialect.RWAcquireParams{Name: "doc", Owner: "reader", TTL: long, Shared: true})
		e.must(err, "read Acquire")
		_, err = rw.Acquire(e.ctx, dialect.RWAcquireParams{Name: "other", Owner: "writer", TTL: long})
		e.must(err, "write Acquire")
		readers, err := rw.Readers(e.ctx)
		e.must(err, "Readers")
		want := dialect.Lease{Name: "doc", Owner: "reader", Token: r.Token}
		if readers != nil && (len(readers) != 1 || readers[0] != want) {
			t.Fatalf("Readers = %+v, want only %+v", readers, want)
		}
	}
}

// A row lock the server lists is the one held, by a session, exclusive
// (or, on a server that cannot tell, unknown); once released, it is not
// listed. A server that shows no row locks says so with ErrUnsupported.
func checkRowLockList(t *testing.T, e *env) {
	list := e.Dialect.Catalogue().RowLocks
	r := e.rowLocks()
	rl := r.lock(dialect.RowLockParams{Name: "held"}, false)
	listed := func() bool {
		hs, err := list(e.ctx)
		if errors.Is(err, dialect.ErrUnsupported) {
			t.Skipf("the server shows no row locks: %v", err)
		}
		e.must(err, "RowLocks")
		for _, h := range hs {
			if h.Name != "held" || h.Primitive != "pessimistic" || h.Holds != 1 || h.Owner == "" ||
				(h.Mode != "exclusive" && h.Mode != "unknown") || h.HeldFor < 0 {
				t.Fatalf("RowLocks listed %+v, want only held, pessimistic, exclusive, with a session", h)
			}
		}
		return len(hs) == 1
	}
	listed()
	e.must(rl.Tx.Rollback(), "Rollback")
	if listed() {
		t.Fatal("RowLocks lists the row lock after its transaction ended")
	}
}
