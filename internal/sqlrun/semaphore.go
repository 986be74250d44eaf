package sqlrun

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// semaphoreTable implements SemaphoreTable.
type semaphoreTable struct {
	leaseTable
	// inOne: an acquire is the one statement grant.
	inOne                     bool
	grant, draw, expire, take Stmt
	setLimit, available       Stmt
	hasSetLimit               bool
	remaining, limits         Stmt
	isolation                 sql.IsolationLevel
	announces                 bool
}

// newSemaphoreTable compiles s; a compile error is kept in c.
func newSemaphoreTable(run *Runner, c *Compiler, s dialect.SemaphoreSQL) *semaphoreTable {
	t := &semaphoreTable{leaseTable: newLeaseTable(run, c, s.LeaseSQL), inOne: s.Grant.Text != "",
		remaining: c.Compile(s.Remaining), isolation: s.Isolation, announces: s.Announces}
	t.queue = dialect.SemaphoreQueue
	if s.Limits.Text != "" {
		t.limits = c.Compile(s.Limits)
	}
	if t.hasSetLimit = s.SetLimit.Text != ""; t.hasSetLimit {
		t.setLimit, t.available = c.Compile(s.SetLimit), c.Compile(s.Available)
	}
	if t.inOne {
		t.grant = c.Compile(s.Grant)
	} else {
		t.draw, t.expire, t.take = c.Compile(s.Draw), c.Compile(s.Expire), c.Compile(s.Take)
	}
	return t
}

// SetLimit implements SemaphoreTable.
func (t *semaphoreTable) SetLimit(ctx context.Context, name string, limit int) error {
	if !t.hasSetLimit {
		return fmt.Errorf("%w: the dialect's semaphores have no SetLimit", dialect.ErrUnsupported)
	}
	n, err := t.run.Int(ctx, &t.setLimit, &Params{Name: name, Limit: limit, Channel: t.channel})
	if err != nil {
		return err
	}
	if t.setLimit.Kind != dialect.Query {
		n = freedBoth // the statement tells nothing: wake whoever waits
	}
	if n > dropped {
		t.freed(ctx, name, n)
	}
	return nil
}

// Available implements SemaphoreTable.
func (t *semaphoreTable) Available(ctx context.Context, name string) (dialect.SemaphoreState, bool, error) {
	if !t.hasSetLimit {
		return dialect.SemaphoreState{}, false, fmt.Errorf("%w: the dialect's semaphores have no Available", dialect.ErrUnsupported)
	}
	var (
		st     dialect.SemaphoreState
		lim, n int64
		set    bool
	)
	ok, err := t.run.Row(ctx, &t.available, &Params{Name: name}, &lim, &n, &set)
	if ok {
		st = dialect.SemaphoreState{Limit: int(lim), Holders: int(n), Set: set}
	}
	return st, ok, err
}

// Announces implements SemaphoreTable.
func (t *semaphoreTable) Announces() bool { return t.announces }

// Remaining implements SemaphoreTable.
func (t *semaphoreTable) Remaining(ctx context.Context, name string) (time.Duration, bool, error) {
	var us int64
	ok, err := t.run.Row(ctx, &t.remaining, &Params{Name: name, Channel: t.channel}, &us)
	return time.Duration(max(us, 0)) * time.Microsecond, ok, err
}

// Acquire implements SemaphoreTable. It runs as a grant (see
// Runner.Grant).
func (t *semaphoreTable) Acquire(ctx context.Context, p dialect.SemaphoreParams) (int64, error) {
	return t.acquire(ctx, p, nil, 0)
}

// acquire grants a permit, under the queue q's rule for ticket when q is
// not nil (q's statements replace grant and take).
func (t *semaphoreTable) acquire(ctx context.Context, p dialect.SemaphoreParams, q *fairSemaphoreTable, ticket int64) (int64, error) {
	if q != nil && q.hasFirst {
		if err := t.run.check(ctx); err != nil {
			return 0, err
		}
		// A refusal costs one statement and no transaction. The check is
		// repeated in the grant.
		ok, err := t.run.Int(ctx, &q.first, &Params{Name: p.Name, Owner: p.Owner, Ticket: ticket})
		if err != nil || ok == 0 {
			return 0, err
		}
	}
	params := &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL, Limit: p.Limit, Channel: t.channel, Ticket: ticket}
	grant, take, consume := &t.grant, &t.take, (*Stmt)(nil)
	if q != nil {
		grant, take = &q.grant, &q.take
		if ticket != 0 && !t.inOne {
			consume = &q.consume
		}
	}
	undo := t.undo(p.Name, p.Owner)
	if t.inOne {
		for {
			var token, limit int64
			token, err := t.run.Grant(ctx, Grant{
				Run: func(ctx context.Context, q Querier, prefix string) (int64, error) {
					text, args := grant.bind(params)
					err := q.QueryRowContext(ctx, prefix+text, args...).Scan(&token, &limit)
					return token, err
				},
				Undo: undo,
			})
			switch {
			case err != nil:
				return 0, err
			case token >= 0:
				return token, nil
			}
			// A grant or a SetLimit of the name committed since the
			// statement's snapshot began: run it again, on a snapshot
			// that sees it.
		}
	}
	return t.run.Grant(ctx, Grant{
		InTx: true, TxOptions: &sql.TxOptions{Isolation: t.isolation},
		Run: func(ctx context.Context, tx Querier, prefix string) (int64, error) {
			return t.grantInTx(ctx, tx, prefix, params, take, consume)
		},
		Undo: undo,
	})
}

// grantInTx runs the statements of the acquire's transaction in tx: Draw,
// Expire, take, and after a grant to a ticket, consume (if not nil).
func (t *semaphoreTable) grantInTx(ctx context.Context, tx Querier, prefix string, p *Params, take, consume *Stmt) (int64, error) {
	var err error
	if p.Token, err = intOn(ctx, tx, prefix, &t.draw, p); err != nil {
		return 0, err
	}
	if _, err := intOn(ctx, tx, prefix, &t.expire, p); err != nil {
		return 0, err
	}
	token, err := intOn(ctx, tx, prefix, take, p)
	if err != nil || token == 0 {
		return 0, err
	}
	if consume != nil {
		if _, err := intOn(ctx, tx, prefix, consume, p); err != nil {
			return 0, err
		}
	}
	return token, nil
}

// fairSemaphoreTable implements FairSemaphoreTable over the
// semaphore tables and the statements of their queue.
type fairSemaphoreTable struct {
	*semaphoreTable
	tickets
	grant, take, chain Stmt
	hasChain           bool
}

var _ FairSemaphoreTable = (*fairSemaphoreTable)(nil)

// newFairSemaphoreTable compiles s for the queue of sems; a compile error
// is kept in c.
func newFairSemaphoreTable(sems *semaphoreTable, c *Compiler, s dialect.FairSemaphoreSQL) *fairSemaphoreTable {
	t := &fairSemaphoreTable{semaphoreTable: sems, hasChain: s.Chain.Text != "",
		tickets: newTickets(sems.run, c, queueSQL{enqueue: s.Enqueue, dequeue: s.Dequeue, renew: s.Renew, wait: s.Wait,
			first: s.First, consume: s.Consume, release: s.Release, channel: s.Channel, addressed: s.Addressed,
			marks: s.Marks, marksStay: s.MarksStay, queue: dialect.SemaphoreQueue})}
	if sems.inOne {
		t.grant = c.Compile(s.Grant)
	} else {
		t.take = c.Compile(s.Take)
	}
	if t.hasChain {
		t.chain = c.Compile(s.Chain)
	}
	return t
}

// Grant implements FairSemaphoreTable. After a grant to a ticket
// it runs Chain, and calls dialect.Hooks.AfterRelease when Chain found a ticket
// to wake (for a dialect that rings the name's waiting processes itself);
// an addressed queue without Chain calls dialect.Hooks.AfterTicketed instead.
// Chain's failure is not the grant's.
func (t *fairSemaphoreTable) Grant(ctx context.Context, p dialect.SemaphoreParams, ticket int64) (int64, error) {
	token, err := t.acquire(ctx, p, t, ticket)
	t.granted(ticket, token)
	if err != nil || token == 0 || ticket == 0 {
		return token, err
	}
	if t.hasChain {
		t.runChain(ctx, &Params{Name: p.Name, Limit: p.Limit})
	} else if t.addressed {
		t.run.afterTicketed(ctx, dialect.SemaphoreQueue, p.Name, true)
	}
	return token, nil
}

// Dequeue implements FairSemaphoreTable. Once the ticket is
// deleted it runs Chain, as Grant does.
func (t *fairSemaphoreTable) Dequeue(ctx context.Context, tk dialect.Ticket) error {
	if err := t.tickets.Dequeue(ctx, tk); err != nil {
		return err
	}
	t.runChain(ctx, &Params{Name: tk.Name, Ticket: tk.ID})
	return nil
}

// chainTimeout bounds Chain, which runs once what it follows is done, on
// a context that the caller's end does not cut short.
const chainTimeout = 5 * time.Second

// runChain runs Chain with p, if set, and calls dialect.Hooks.AfterRelease when
// it found a ticket to wake. It is best effort: a failure leaves the
// waiters to their tickets' and leases' ends.
func (t *fairSemaphoreTable) runChain(ctx context.Context, p *Params) {
	if !t.hasChain {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), chainTimeout)
	defer cancel()
	if n, err := t.run.Int(cctx, &t.chain, p); err == nil && n > 0 {
		t.run.afterRelease(ctx, p.Name)
	}
}

// Wait implements FairSemaphoreTable.
func (t *fairSemaphoreTable) Wait(ctx context.Context, tk dialect.Ticket, limit int) (time.Duration, bool, error) {
	return t.waitFor(ctx, tk, limit)
}

// Release implements LeaseTable: the queue's Release if it has
// one, else the semaphore's. A release that woke a ticket runs Chain once
// it committed.
func (t *fairSemaphoreTable) Release(ctx context.Context, l dialect.Lease, minHold time.Duration) (bool, error) {
	if !t.hasRelease {
		return t.semaphoreTable.Release(ctx, l, minHold)
	}
	n, err := t.releaseOwn(ctx, &t.leaseTable, l, minHold)
	if err == nil && n == 2 {
		t.runChain(ctx, &Params{Name: l.Name})
	}
	return n > 0, err
}
