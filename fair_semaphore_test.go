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

// Fair (FIFO) semaphores: permits go to waiters in ticket order. As in
// fair_test.go, no test depends on timing: each waiter is started once
// the tickets before it are visible in the database.

// fairSemaphore returns a fair semaphore of limit on a dialect of its own,
// as another process would have.
func (e *env) fairSemaphore(t *testing.T, limit int) *sqllock.Semaphore {
	t.Helper()
	_, d := e.sibling(t, 0)
	s, err := sqllock.NewSemaphore(d, limit, sqllock.SemaphoreOptions{Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// semTickets counts the semaphore tickets of name, live or not.
func (e *env) semTickets(t *testing.T, name string) int {
	t.Helper()
	var n int
	if err := e.db.QueryRowContext(ctxT(t), e.q("SELECT count(*) FROM {sqllock_semaphore_tickets} WHERE name = ?"), name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// queueSem starts a fair waiter for a permit of name on a semaphore of
// its own, once the tickets before it are visible, and waits until its
// own is.
func (e *env) queueSem(t *testing.T, ctx context.Context, name string, limit, i int, got chan<- result) {
	t.Helper()
	s := e.fairSemaphore(t, limit)
	go func() {
		k, err := s.Acquire(ctx, name)
		got <- result{i, k, err}
	}()
	testutil.Eventually(ctx, t, fmt.Sprintf("waiter %d's ticket", i), func() bool { return e.semTickets(t, name) == i+1 })
}

func TestFairSemaphoreGrantsInTicketOrder(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const name, limit, waiters = "fifo-sem", 2, 5
		s := e.fairSemaphore(t, limit)
		var held []*sqllock.Lock
		for range limit {
			k, err := s.TryAcquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, k)
		}
		got := make(chan result, waiters)
		for i := range waiters {
			e.queueSem(t, ctx, name, limit, i, got)
		}
		if _, err := s.TryAcquire(ctx, name); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("TryAcquire of a full semaphore with waiters queued: %v, want ErrLocked", err)
		}
		// Each release admits the oldest waiter; each waiter served
		// releases in turn, admitting the next.
		last := held[limit-1].Token()
		for _, k := range held {
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		tokens := make([]int64, waiters)
		for range waiters {
			r := <-got
			if r.err != nil {
				t.Fatalf("waiter %d: %v", r.i, r.err)
			}
			if r.k.Token() <= last {
				t.Fatalf("waiter %d's token %d, want > %d", r.i, r.k.Token(), last)
			}
			tokens[r.i] = r.k.Token()
			if err := r.k.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// Tokens are in grant order: waiters are granted one at a time,
		// in ticket order, even when two permits are free.
		for i := 1; i < waiters; i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("waiter %d granted (token %d) before waiter %d (token %d)", i, tokens[i], i-1, tokens[i-1])
			}
		}
		if n := e.semTickets(t, name); n != 0 {
			t.Fatalf("%d tickets left after every waiter was served, want 0", n)
		}
	})
}

func TestFairSemaphoreKeepsLaterWaitersBack(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const name, limit = "fifo-sem-order", 2
		s := e.fairSemaphore(t, limit)
		a, err := s.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan result, 3)
		for i := range 3 {
			e.queueSem(t, ctx, name, limit, i, got)
		}
		// One permit freed: the oldest waiter alone is served, and the
		// others stay queued until the next release.
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.i != 0 || r.err != nil {
			t.Fatalf("first grant: waiter %d, %v; want waiter 0", r.i, r.err)
		}
		testutil.Eventually(ctx, t, "the first waiter's ticket consumed", func() bool { return e.semTickets(t, name) == 2 })
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if r2 := <-got; r2.i != 1 || r2.err != nil {
			t.Fatalf("second grant: waiter %d, %v; want waiter 1", r2.i, r2.err)
		} else if err := r2.k.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if r3 := <-got; r3.i != 2 || r3.err != nil {
			t.Fatalf("third grant: waiter %d, %v; want waiter 2", r3.i, r3.err)
		} else if err := r3.k.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestFairSemaphoreCancelledAndCrashedWaiters(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const name, limit = "fifo-sem-leave", 1
		holder, err := e.fairSemaphore(t, limit).TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan result, 2)
		cctx, cancel := context.WithCancel(ctx)
		e.queueSem(t, cctx, name, limit, 0, got)
		// A waiter that crashed: second in line, and nobody renews its
		// ticket, which expires in a second.
		q := testutil.Tables(t, e.d).FairSemaphores
		if _, err := q.Enqueue(ctx, dialect.AcquireParams{Name: name, Owner: "crashed", TTL: time.Second}); err != nil {
			t.Fatal(err)
		}
		s := e.fairSemaphore(t, limit)
		go func() {
			k, err := s.Acquire(ctx, name)
			got <- result{2, k, err}
		}()
		testutil.Eventually(ctx, t, "the third waiter's ticket", func() bool { return e.semTickets(t, name) == 3 })
		cancel()
		if r := <-got; r.i != 0 || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled waiter: %d %v, want waiter 0 with context.Canceled", r.i, r.err)
		}
		if n := e.semTickets(t, name); n != 2 {
			t.Fatalf("%d tickets after the first waiter gave up, want 2", n)
		}
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The crashed waiter's ticket comes first: the release wakes
		// nobody, and the next waiter tries again when it expires.
		r := <-got
		if r.i != 2 || r.err != nil {
			t.Fatalf("waiter behind a crashed one: %d %v, want waiter 2 granted", r.i, r.err)
		}
		if err := r.k.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := e.d.Reap(ctx, dialect.ReapParams{Limit: 100}); err != nil {
			t.Fatal(err)
		}
		if n := e.semTickets(t, name); n != 0 {
			t.Fatalf("%d tickets after reaping, want 0", n)
		}
	})
}

func TestFairSemaphoreReenters(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := sqllock.WithOwner(ctxT(t), "fair-sem-owner")
		const name = "fifo-sem-reenter"
		s := e.fairSemaphore(t, 1)
		first, err := s.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan result, 1)
		e.queueSem(t, ctxT(t), name, 1, 0, got)
		again, err := s.Acquire(ctx, name)
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

// TestFairSemaphorePermitsFreedTogether: two permits freed at once admit
// the two oldest tickets, the second without waiting for the first's
// ticket to end (issue 28 item 3). Limit 2, three semaphores on pools of
// their own (as three processes would have): A holds both permits, w0
// queues on B, then w1 on C, and A releases both permits concurrently.
// The grant to w0 leaves a permit free while w1's ticket waits: whatever
// order the releases and the grant commit in, w1 must be woken. Tickets
// and leases last an hour, so a waiter left asleep beside a free permit
// blows the round's deadline; the rounds repeat the scenario because on
// PostgreSQL the interleaving that lost the wake-up is one of several.
func TestFairSemaphorePermitsFreedTogether(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const name, limit, rounds = "fifo-sem-together", 2, 30
		sem := func() *sqllock.Semaphore {
			_, d := e.sibling(t, 0)
			s, err := sqllock.NewSemaphore(d, limit, sqllock.SemaphoreOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Hour}, Fair: true})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		a, b, c := sem(), sem(), sem()
		for round := range rounds {
			ctx, cancel := context.WithTimeout(ctxT(t), time.Minute)
			var held [limit]*sqllock.Lock
			for i := range held {
				k, err := a.TryAcquire(ctx, name)
				if err != nil {
					t.Fatalf("round %d: holder %d: %v", round, i, err)
				}
				held[i] = k
			}
			got := make(chan result, 2)
			for i, s := range []*sqllock.Semaphore{b, c} {
				go func() {
					k, err := s.Acquire(ctx, name)
					got <- result{i, k, err}
				}()
				testutil.Eventually(ctx, t, fmt.Sprintf("round %d: waiter %d's ticket", round, i),
					func() bool { return e.semTickets(t, name) == i+1 })
			}
			start := make(chan struct{})
			errs := make(chan error, limit)
			for _, k := range held {
				go func() {
					<-start
					errs <- k.Release(ctx)
				}()
			}
			close(start)
			for range limit {
				if err := <-errs; err != nil {
					t.Fatalf("round %d: release: %v", round, err)
				}
			}
			var granted [2]*sqllock.Lock
			for range 2 {
				r := <-got
				if r.err != nil {
					t.Fatalf("round %d: waiter %d: %v (two permits were freed; a waiter slept beside a free one)", round, r.i, r.err)
				}
				granted[r.i] = r.k
			}
			if granted[1].Token() <= granted[0].Token() {
				t.Fatalf("round %d: waiter 1 granted (token %d) before waiter 0 (token %d)",
					round, granted[1].Token(), granted[0].Token())
			}
			for _, k := range granted {
				if err := k.Release(ctx); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			}
			cancel()
		}
	})
}
