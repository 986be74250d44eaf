package sqllock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// BenchmarkFairHandoff is BenchmarkHandoff (hold=0s) for fair lockers
// (Options.Fair): 1, 10 and 100 waiters in lockers of their own, taking
// turns. stmts/handoff counts every statement of the FIFO queue, by every
// client, per hand-off: grants, tickets taken, queue reads, releases,
// tickets given up and renewed (each one statement on PostgreSQL; on MySQL
// a grant is a transaction, counted once here and statement by statement
// in all-stmts/handoff, which counts everything sent on the pool, bells
// included). Run:
//
//	go test -run '^$' -bench FairHandoff -benchtime 200x .
func BenchmarkFairHandoff(b *testing.B) {
	ds, all := handoffDialects(b)
	for _, kind := range []string{"postgres", "mysql"} {
		for _, waiters := range []int{1, 10, 100} {
			b.Run(fmt.Sprintf("%s/waiters=%d", kind, waiters), func(b *testing.B) {
				var stmts atomic.Int64
				d := countingFair{counting{ds[kind], new(atomic.Int64)}, &stmts}
				before := all.Load()
				lat := handoffsWith(b, d, sqllock.TableOptions{Fair: true}, fmt.Sprintf("fair-%d", waiters), waiters+1, b.N, 0)
				b.ReportMetric(float64(stmts.Load())/float64(len(lat)), "stmts/handoff")
				if kind == "mysql" {
					b.ReportMetric(float64(all.Load()-before)/float64(len(lat)), "all-stmts/handoff")
				}
				slices.Sort(lat)
				b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
				b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
			})
		}
	}
}

// countingFair counts the statements of a dialect's FIFO queue.
type countingFair struct {
	counting
	n *atomic.Int64
}

// Tables counts the statements of the FIFO queues, and of the
// semaphores.
func (c countingFair) Tables() (*sqlrun.Tables, error) {
	inner, err := sqlrun.Open(c.Dialect)
	if err != nil {
		return nil, err
	}
	tb, err := c.counting.Tables()
	if err != nil {
		return nil, err
	}
	tb.Fair = countingQueue{tb.Fair, c.n}
	q := inner.FairSemaphores
	tb.Semaphores = countingSemaphores{inner.Semaphores, c.n}
	tb.FairSemaphores = countingSemQueue{countingSemaphores{q, c.n}, q, c.n}
	if w := inner.WakingSemaphores; w != nil {
		tb.WakingSemaphores = countingSemQueue{countingSemaphores{w, c.n}, w, c.n}
	}
	return tb, nil
}

type countingQueue struct {
	sqlrun.FairTable
	n *atomic.Int64
}

func (c countingQueue) Grant(ctx context.Context, p dialect.AcquireParams, ticket int64) (int64, error) {
	c.n.Add(1)
	return c.FairTable.Grant(ctx, p, ticket)
}

func (c countingQueue) Enqueue(ctx context.Context, p dialect.AcquireParams) (dialect.Ticket, error) {
	c.n.Add(1)
	return c.FairTable.Enqueue(ctx, p)
}

func (c countingQueue) Wait(ctx context.Context, t dialect.Ticket) (time.Duration, bool, error) {
	c.n.Add(1)
	return c.FairTable.Wait(ctx, t)
}

func (c countingQueue) Dequeue(ctx context.Context, t dialect.Ticket) error {
	c.n.Add(1)
	return c.FairTable.Dequeue(ctx, t)
}

func (c countingQueue) RenewTickets(ctx context.Context, ts []dialect.Ticket, ttl time.Duration) error {
	c.n.Add(1)
	return c.FairTable.RenewTickets(ctx, ts, ttl)
}

func (c countingQueue) Release(ctx context.Context, l dialect.Lease, minHold time.Duration) (bool, error) {
	c.n.Add(1)
	return c.FairTable.Release(ctx, l, minHold)
}

// BenchmarkFairSemaphoreHandoff is BenchmarkFairHandoff for fair
// semaphores (NewSemaphore with Options.Fair), of one permit so that each
// release is one hand-off, beside unfair ones: 1, 10 and 100 waiters in
// semaphores of their own, taking turns. stmts/handoff counts every
// statement of the semaphores' FIFO queue (fair) or every acquire attempt,
// lease read and release (unfair), by every client, per hand-off. Run:
//
//	go test -run '^$' -bench FairSemaphoreHandoff -benchtime 200x .
func BenchmarkFairSemaphoreHandoff(b *testing.B) {
	ds, all := handoffDialects(b)
	for _, kind := range []string{"postgres", "mysql"} {
		for _, fair := range []bool{true, false} {
			for _, waiters := range []int{1, 10, 100} {
				b.Run(fmt.Sprintf("%s/fair=%v/waiters=%d", kind, fair, waiters), func(b *testing.B) {
					var stmts atomic.Int64
					d := countingFair{counting{ds[kind], new(atomic.Int64)}, &stmts}
					before := all.Load()
					name := fmt.Sprintf("fairsem-%v-%d", fair, waiters)
					lat := handoffsOf(b, func() (sqllock.Locker, error) {
						return sqllock.NewSemaphore(d, 1, sqllock.SemaphoreOptions{Fair: fair})
					}, name, waiters+1, b.N, 0)
					b.ReportMetric(float64(stmts.Load())/float64(len(lat)), "stmts/handoff")
					if kind == "mysql" {
						b.ReportMetric(float64(all.Load()-before)/float64(len(lat)), "all-stmts/handoff")
					}
					slices.Sort(lat)
					b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
					b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
				})
			}
		}
	}
}

// countingSemaphores counts an unfair semaphore's attempts, lease reads
// and releases.
type countingSemaphores struct {
	sqlrun.SemaphoreTable
	n *atomic.Int64
}

func (c countingSemaphores) Acquire(ctx context.Context, p dialect.SemaphoreParams) (int64, error) {
	c.n.Add(1)
	return c.SemaphoreTable.Acquire(ctx, p)
}

func (c countingSemaphores) Remaining(ctx context.Context, name string) (time.Duration, bool, error) {
	c.n.Add(1)
	return c.SemaphoreTable.Remaining(ctx, name)
}

func (c countingSemaphores) Release(ctx context.Context, l dialect.Lease, minHold time.Duration) (bool, error) {
	c.n.Add(1)
	return c.SemaphoreTable.Release(ctx, l, minHold)
}

// countingSemQueue counts the statements of a semaphores' FIFO queue.
type countingSemQueue struct {
	countingSemaphores
	sqlrun.FairSemaphoreTable
	n *atomic.Int64
}

func (c countingSemQueue) Acquire(ctx context.Context, p dialect.SemaphoreParams) (int64, error) {
	return c.countingSemaphores.Acquire(ctx, p)
}

func (c countingSemQueue) Remaining(ctx context.Context, name string) (time.Duration, bool, error) {
	return c.countingSemaphores.Remaining(ctx, name)
}

func (c countingSemQueue) Release(ctx context.Context, l dialect.Lease, minHold time.Duration) (bool, error) {
	return c.countingSemaphores.Release(ctx, l, minHold)
}

func (c countingSemQueue) Grant(ctx context.Context, p dialect.SemaphoreParams, ticket int64) (int64, error) {
	c.n.Add(1)
	return c.FairSemaphoreTable.Grant(ctx, p, ticket)
}

func (c countingSemQueue) Enqueue(ctx context.Context, p dialect.AcquireParams) (dialect.Ticket, error) {
	c.n.Add(1)
	return c.FairSemaphoreTable.Enqueue(ctx, p)
}

func (c countingSemQueue) Wait(ctx context.Context, t dialect.Ticket, limit int) (time.Duration, bool, error) {
	c.n.Add(1)
	return c.FairSemaphoreTable.Wait(ctx, t, limit)
}

func (c countingSemQueue) Dequeue(ctx context.Context, t dialect.Ticket) error {
	c.n.Add(1)
	return c.FairSemaphoreTable.Dequeue(ctx, t)
}

func (c countingSemQueue) RenewTickets(ctx context.Context, ts []dialect.Ticket, ttl time.Duration) error {
	c.n.Add(1)
	return c.FairSemaphoreTable.RenewTickets(ctx, ts, ttl)
}

// BenchmarkIdleSemaphoreWaiters is BenchmarkIdleWaiters for semaphores,
// unfair and fair: 100 waiters, each with a semaphore of its own, for a
// name whose one permit stays held. stmts/s counts every statement of the
// semaphore tables and of their queue (attempts, lease reads, tickets
// taken, read and renewed). Run:
//
//	go test -run '^$' -bench IdleSemaphoreWaiters -benchtime 20x .
func BenchmarkIdleSemaphoreWaiters(b *testing.B) {
	ds, all := handoffDialects(b)
	for _, kind := range []string{"postgres", "mysql"} {
		for _, fair := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/fair=%v/waiters=100", kind, fair), func(b *testing.B) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				name := fmt.Sprintf("idle-sem-%v", fair)
				holder, err := sqllock.NewSemaphore(ds[kind], 1, sqllock.SemaphoreOptions{Fair: fair})
				if err != nil {
					b.Fatal(err)
				}
				k, err := holder.TryAcquire(ctx, name)
				if err != nil {
					b.Fatal(err)
				}
				defer k.Release(context.Background())
				var n atomic.Int64
				d := countingFair{counting{ds[kind], new(atomic.Int64)}, &n}
				var wg sync.WaitGroup
				for range 100 {
					s, err := sqllock.NewSemaphore(d, 1, sqllock.SemaphoreOptions{Fair: fair})
					if err != nil {
						b.Fatal(err)
					}
					wg.Go(func() { _, _ = s.Acquire(ctx, name) })
				}
				measureIdle(b, ds[kind], kind, &n, all)
				cancel()
				wg.Wait()
			})
		}
	}
}
