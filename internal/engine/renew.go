package engine

import (
	"context"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// renewBatchWindow is how long a batch stays open for renewals falling due
// together: leases renew on a shared grid (see Leases.untilTick), but
// thousands of timers firing at one instant still take a while to run.
func renewBatchWindow(renewInterval time.Duration) time.Duration {
	return max(min(renewInterval/20, 50*time.Millisecond), time.Millisecond)
}

// renewBatcher coalesces the renewals of many leases into RenewMany calls:
// one process holding thousands of leases renews them in a bounded number
// of statements per period.
type renewBatcher struct {
	store  sqlrun.LeaseTable
	ttl    time.Duration
	window time.Duration
	ev     *Events

	mu  sync.Mutex
	cur *renewBatch // open for more renewals; nil if none
}

// renewBatch is up to dialect.MaxRenewBatch renewals sent together.
type renewBatch struct {
	reqs []*renewReq
	sent bool // taken by a flush
}

type renewReq struct {
	ctx      context.Context // the lease's, for events
	ref      dialect.Lease
	deadline time.Time // the lease's trust deadline
	done     chan renewResult
}

type renewResult struct {
	sqlrun.Renewal
	err error
}

// renew adds ref to the open batch and waits for its outcome or ctx. A batch
// is sent when its window closes or when it is full, whichever is first.
func (b *renewBatcher) renew(ctx context.Context, ref dialect.Lease) (sqlrun.Renewal, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(b.ttl)
	}
	req := &renewReq{ctx: ctx, ref: ref, deadline: deadline, done: make(chan renewResult, 1)}
	b.mu.Lock()
	batch := b.cur
	if batch == nil {
		batch = &renewBatch{}
		b.cur = batch
		time.AfterFunc(b.window, func() { b.send(batch) })
	}
	batch.reqs = append(batch.reqs, req)
	full := len(batch.reqs) == dialect.MaxRenewBatch
	if full {
		b.cur = nil
	}
	b.mu.Unlock()
	if full {
		go b.send(batch)
	}
	select {
	case r := <-req.done:
		return r.Renewal, r.err
	case <-ctx.Done():
		return sqlrun.Renewal{}, ctx.Err()
	}
}

// send renews batch, unless it was sent already, bounded by the earliest
// trust deadline in it, and hands each lease its outcome.
func (b *renewBatcher) send(batch *renewBatch) {
	b.mu.Lock()
	if batch.sent {
		b.mu.Unlock()
		return
	}
	batch.sent = true
	if b.cur == batch {
		b.cur = nil
	}
	b.mu.Unlock()
	deadline := batch.reqs[0].deadline
	refs := make([]dialect.Lease, len(batch.reqs))
	for i, r := range batch.reqs {
		refs[i] = r.ref
		if r.deadline.Before(deadline) {
			deadline = r.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	ctx = b.ev.startRenewBatch(ctx, batch.reqs)
	rs, err := b.store.RenewMany(ctx, refs, b.ttl)
	b.ev.endRenewBatch(ctx, len(refs), err)
	for i, r := range batch.reqs {
		res := renewResult{err: err}
		if err == nil {
			res.Renewal = rs[i]
		}
		r.done <- res
	}
}
