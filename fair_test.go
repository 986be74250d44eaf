package sqllock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/testutil"
)

// Fair (FIFO) locks: waiters are served in ticket order. No test here
// depends on timing: each waiter is started once the ticket of the one
// before is visible in the database.

// fairLocker returns a fair lock-table locker on a dialect of its own, as
// another process would have.
func (e *env) fairLocker(t *testing.T) *sqllock.Table {
	t.Helper()
	_, d := e.sibling(t, 0)
	l, err := sqllock.NewTable(d, sqllock.TableOptions{Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// tickets counts the tickets of name in the database, live or not.
func (e *env) tickets(t *testing.T, name string) int {
	t.Helper()
	var n int
	if err := e.db.QueryRowContext(ctxT(t), e.q("SELECT count(*) FROM {sqllock_tickets} WHERE name = ?"), name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// queue starts a fair waiter for name on its own locker, once the tickets
// before it are visible, and waits until its own is.
func (e *env) queue(t *testing.T, ctx context.Context, name string, i int, got chan<- result) {
	t.Helper()
	l := e.fairLocker(t)
	go func() {
		k, err := l.Acquire(ctx, name)
		got <- result{i, k, err}
	}()
	testutil.Eventually(ctx, t, fmt.Sprintf("waiter %d's ticket", i), func() bool { return e.tickets(t, name) == i+1 })
}

type result struct {
	i   int
	k   *sqllock.Lock
	err error
}

func TestFairGrantsInTicketOrder(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const name, waiters = "fifo", 5
		holder, err := e.fairLocker(t).TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan result, waiters)
		for i := range waiters {
			e.queue(t, ctx, name, i, got)
		}
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		last := holder.Token()
		for want := range waiters {
			r := <-got
			if r.err != nil {
				t.Fatalf("waiter %d: %v", r.i, r.err)
			}
			if r.i != want {
				t.Fatalf("granted to waiter %d, want waiter %d (tickets in that order)", r.i, want)
			}
			if r.k.Token() <= last {
				t.Fatalf("waiter %d's token %d, want > %d", r.i, r.k.Token(), last)
			}
			last = r.k.Token()
			if err := r.k.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := e.tickets(t, name); n != 0 {
			t.Fatalf("%d tickets left after every waiter was served, want 0", n)
		}
	})
}

func TestFairCancelledWaiterLeavesQueue(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const name = "fifo-cancel"
		holder, err := e.fairLocker(t).TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan result, 2)
		cctx, cancel := context.WithCancel(ctx)
		e.queue(t, cctx, name, 0, got)
		e.queue(t, ctx, name, 1, got)
		cancel()
		if r := <-got; r.i != 0 || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled waiter: %d %v, want waiter 0 with context.Canceled", r.i, r.err)
		}
		if n := e.tickets(t, name); n != 1 {
			t.Fatalf("%d tickets after the first waiter gave up, want 1", n)
		}
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.i != 1 || r.err != nil {
			t.Fatalf("second waiter: %d %v, want waiter 1 granted", r.i, r.err)
		}
		if err := r.k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestFairExpiredTicketIsSkipped(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const name = "fifo-crash"
		l := e.fairLocker(t)
		q := testutil.Tables(t, e.d).Fair
		// A waiter that crashed: its ticket is first, and nobody renews it.
		if _, err := q.Enqueue(ctx, dialect.AcquireParams{Name: name, Owner: "stale", TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.TryAcquire(ctx, name); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("TryAcquire of a free lock with a live ticket queued: %v, want ErrLocked", err)
		}
		e.expireTickets(t, name, "stale")
		holder, err := l.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("TryAcquire with only an expired ticket queued: %v", err)
		}
		// Another crashed waiter, first in line when the holder releases:
		// the release wakes nobody, and the next waiter tries again when
		// the crashed one's ticket expires.
		if _, err := q.Enqueue(ctx, dialect.AcquireParams{Name: name, Owner: "crashed", TTL: time.Second}); err != nil {
			t.Fatal(err)
		}
		got := make(chan result, 1)
		e.queue(t, ctx, name, 2, got)
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			t.Fatalf("waiter behind an expired ticket: %v", r.err)
		}
		if err := r.k.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := e.d.Reap(ctx, dialect.ReapParams{Limit: 100}); err != nil {
			t.Fatal(err)
		}
		if n := e.tickets(t, name); n != 0 {
			t.Fatalf("%d tickets after reaping, want 0", n)
		}
	})
}

// expireTickets makes owner's tickets of name expire now.
func (e *env) expireTickets(t *testing.T, name, owner string) {
	t.Helper()
	set := "expires_at = now() - INTERVAL '1' SECOND"
	switch e.kind {
	case "mysql":
		set = "expires_at = UTC_TIMESTAMP(6) - INTERVAL '1' SECOND"
	case "sqlite":
		set = "expires_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER) - 1000000"
	}
	if _, err := e.db.ExecContext(ctxT(t), e.q("UPDATE {sqllock_tickets} SET "+set+" WHERE name = ? AND owner = ?"), name, owner); err != nil {
		t.Fatal(err)
	}
}

func TestFairReentersDespiteQueue(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := sqllock.WithOwner(ctxT(t), "fair-owner")
		const name = "fifo-reenter"
		l := e.fairLocker(t)
		first, err := l.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan result, 1)
		e.queue(t, ctxT(t), name, 0, got)
		again, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("re-entry with a waiter queued: %v", err)
		}
		if again.Token() != first.Token() {
			t.Fatalf("re-entry token %d, want %d", again.Token(), first.Token())
		}
		for _, k := range []*sqllock.Lock{again, first} {
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := r.k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
