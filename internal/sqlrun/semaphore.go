package sqlrun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// SemaphoreSQL declares the statements of the semaphore tables: a head row
// per name (its limit, and for dialects without a sequence the name's last
// token) and a holder row per (name, owner), whose lease statements are
// LeaseSQL's. A holder row counts as a holder while its lease is live;
// rows of ended leases stay until a grant of the name or the reaper
// deletes them.
//
// An acquire is either one statement, Grant, or a short transaction in
// which the head row's lock serialises the grants of a name:
//
//	Draw      lock :name's head row, creating it with :limit, and draw
//	          the name's next token: its number
//	Expire    delete :name's holder rows whose lease has ended
//	Take      grant (:name, :owner) a permit with :token, if :name's limit
//	          is :limit and a permit is free under it (its own row, if
//	          ended, is taken over), or re-enter its live row (one more
//	          hold, the row's token); its number is the token granted, 0
//	          when refused
//	Why       after a refusal: select the head row's limit and the number
//	          of :name's live holders
//	SetLimit  set the head row's limit to :limit, when Why found no
//	          holder; Take runs once more
type SemaphoreSQL struct {
	LeaseSQL
	// Grant, if set, is the whole acquire in one statement, with no
	// transaction: it grants as Take does (setting the head row's limit
	// when the name has no holder, and deleting the rows of the name's
	// ended leases when it grants a new permit) and selects two numbers,
	// the token granted (0 when refused, -1 when a grant of :name
	// committed since its snapshot began: it is run again) and the limit
	// the name's holders use (:limit when it has none).
	Grant                             SQL
	Draw, Expire, Take, Why, SetLimit SQL
	// Remaining selects the microseconds until :name's first holder's
	// lease ends (0 or less: look again at once, as when a permit is
	// free), and no row when it has no holder.
	Remaining SQL
	// Isolation is the isolation level of the acquire's transaction.
	Isolation sql.IsolationLevel
	// Announces says whether Release announces freed permits.
	Announces bool
}

// SemaphoreTable implements dialect.SemaphoreTable.
type SemaphoreTable struct {
	LeaseTable
	// inOne: an acquire is the one statement grant.
	inOne                                    bool
	grant, draw, expire, take, why, setLimit Stmt
	remaining                                Stmt
	isolation                                sql.IsolationLevel
	announces                                bool
}

// NewSemaphoreTable compiles s; a compile error is kept in c.
func NewSemaphoreTable(run *Runner, c *Compiler, s SemaphoreSQL) *SemaphoreTable {
	t := &SemaphoreTable{LeaseTable: newLeaseTable(run, c, s.LeaseSQL), inOne: s.Grant.Text != "",
		remaining: c.Compile(s.Remaining), isolation: s.Isolation, announces: s.Announces}
	t.queue = SemaphoreQueue
	if t.inOne {
		t.grant = c.Compile(s.Grant)
	} else {
		t.draw, t.expire, t.take = c.Compile(s.Draw), c.Compile(s.Expire), c.Compile(s.Take)
		t.why, t.setLimit = c.Compile(s.Why), c.Compile(s.SetLimit)
	}
	return t
}

// Announces implements dialect.SemaphoreTable.
func (t *SemaphoreTable) Announces() bool { return t.announces }

// Remaining implements dialect.SemaphoreTable.
func (t *SemaphoreTable) Remaining(ctx context.Context, name string) (time.Duration, bool, error) {
	var us int64
	ok, err := t.run.Row(ctx, &t.remaining, &Params{Name: name, Channel: t.channel}, &us)
	return time.Duration(max(us, 0)) * time.Microsecond, ok, err
}

// Acquire implements dialect.SemaphoreTable. It runs as a grant (see
// Runner.Grant).
func (t *SemaphoreTable) Acquire(ctx context.Context, p dialect.SemaphoreParams) (int64, error) {
	return t.acquire(ctx, p, nil, 0)
}

// acquire grants a permit, under the queue q's rule for ticket when q is
// not nil (q's statements replace grant and take).
func (t *SemaphoreTable) acquire(ctx context.Context, p dialect.SemaphoreParams, q *FairSemaphoreTable, ticket int64) (int64, error) {
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
			case token > 0:
				return token, nil
			case token == 0 && limit != int64(p.Limit):
				return 0, &errLimit{limit, int64(p.Limit)}
			case token == 0:
				return 0, nil
			}
			// A grant of the name committed since the statement's
			// snapshot began: run it again, on a snapshot that sees it.
		}
	}
	var mismatch *errLimit
	token, err := t.run.Grant(ctx, Grant{
		InTx: true, TxOptions: &sql.TxOptions{Isolation: t.isolation},
		Run: func(ctx context.Context, tx Querier, prefix string) (int64, error) {
			n, err := t.grantInTx(ctx, tx, prefix, params, take, consume)
			if errors.As(err, &mismatch) { // the table's answer, not the driver's
				return 0, ErrRollback
			}
			return n, err
		},
		Undo: undo,
	})
	if err == nil && mismatch != nil {
		return 0, mismatch
	}
	return token, err
}

// errLimit carries a limit mismatch out of the transaction unwrapped by
// the dialect's Wrap.
type errLimit struct{ have, want int64 }

func (e *errLimit) Error() string {
	return fmt.Sprintf("%v: the semaphore's holders use limit %d, this acquire asks for %d", dialect.ErrLimitMismatch, e.have, e.want)
}

func (e *errLimit) Unwrap() error { return dialect.ErrLimitMismatch }

// grantInTx runs the statements of the acquire's transaction in tx: Draw,
// Expire, take, and after a grant to a ticket, consume (if not nil); after
// a refusal, Why, and if the name has no holder under another limit,
// SetLimit and take once more.
func (t *SemaphoreTable) grantInTx(ctx context.Context, tx Querier, prefix string, p *Params, take, consume *Stmt) (int64, error) {
	var err error
	if p.Token, err = intOn(ctx, tx, prefix, &t.draw, p); err != nil {
		return 0, err
	}
	if _, err := intOn(ctx, tx, prefix, &t.expire, p); err != nil {
		return 0, err
	}
	token, err := intOn(ctx, tx, prefix, take, p)
	if err != nil {
		return 0, err
	}
	if token == 0 {
		var limit, holders int64
		text, args := t.why.bind(p)
		if err := tx.QueryRowContext(ctx, prefix+text, args...).Scan(&limit, &holders); err != nil {
			return 0, err
		}
		switch {
		case limit == int64(p.Limit):
			return 0, nil // full
		case holders > 0:
			return 0, &errLimit{limit, int64(p.Limit)}
		}
		if _, err := intOn(ctx, tx, prefix, &t.setLimit, p); err != nil {
			return 0, err
		}
		if token, err = intOn(ctx, tx, prefix, take, p); err != nil || token == 0 {
			return 0, err
		}
	}
	if consume != nil {
		if _, err := intOn(ctx, tx, prefix, consume, p); err != nil {
			return 0, err
		}
	}
	return token, nil
}

// FairSemaphoreSQL declares the statements of the semaphore tables' queue
// of tickets (see dialect.FairSemaphoreTable). Tickets travel as :ticket,
// a semaphore's limit as :limit, and the waker of the enqueueing process
// as :channel. A grant is the semaphore's acquire under the queue's rule:
//
//	Grant    the semaphore's Grant, which also refuses a new permit while
//	         a live ticket of :name comes before :ticket (any, for 0), and
//	         deletes :ticket when it grants one
//	Take     for a semaphore without Grant: its Take, which also refuses
//	         a new permit while a live ticket of :name comes before
//	         :ticket (any, for 0); Consume then deletes :ticket
//
// First, if set, runs before the grant: it selects 1 when no live
// ticket of :name comes before :ticket (0: none), or when :owner holds a
// live permit of :name (re-entry), else 0, so that the waiters a ring wakes
// but the queue does not serve are refused by one statement, without a
// transaction.
type FairSemaphoreSQL struct {
	Grant, Take, First, Consume SQL
	// Chain, if set, hands freed permits on: it wakes the process of
	// :name's oldest live ticket if a permit is free, and selects the
	// number of tickets it woke; or, for a dialect that cannot address a
	// wake-up to one process (see Runner.AfterRelease), it selects 1 when the
	// processes waiting for :name are to be woken, else 0: when a live
	// ticket waits, none comes before :ticket (0: none does), and a
	// permit is free under :limit (0: whether or not).
	//
	// Chain runs in a statement of its own once a change that may leave
	// a permit free beside a waiting ticket committed: a grant to a
	// ticket (with :ticket 0 and the grant's :limit), a ticket given up
	// (with that ticket and :limit 0), and a release whose statement woke
	// a ticket (Release selects 2; :ticket and :limit 0). A statement sees
	// only what committed before it began: of two such changes committing
	// concurrently (two releases and the grant they wake, say), each may
	// miss the other, and a release may wake the ticket being granted
	// rather than the next one. The Chain of the one that commits last
	// sees both.
	Chain SQL
	// Enqueue, Wait, Renew and Channel are as FairSQL's, on the
	// semaphores' queue, with the sleep of dialect.FairSemaphoreTable.Wait;
	// Dequeue deletes :ticket (Chain wakes the next).
	Enqueue, Wait, Dequeue, Renew SQL
	Channel                       string
	// Addressed is as FairSQL's.
	Addressed bool
	// Marks, if set, run one after the other before Wait: they mark the
	// rows of :name as waited for by tickets, so that a release reports
	// it (for a dialect whose Wait cannot mark them in the same
	// statement). With MarksStay, the marks are never unset and the rows
	// added later copy them: once the first mark's number is 1 (it found
	// the name's row, marked now or before) and the others ran, a process
	// does not run them again for the name.
	Marks     []SQL
	MarksStay bool
	// Release, when set, replaces the semaphore's Release: it also wakes
	// the process of the oldest live ticket when it frees a permit. It
	// selects 0 when it released nothing, 2 when it woke a ticket, and 1
	// otherwise.
	Release SQL
}

// FairSemaphoreTable implements dialect.FairSemaphoreTable over the
// semaphore tables and the statements of their queue.
type FairSemaphoreTable struct {
	*SemaphoreTable
	tickets
	grant, take, chain Stmt
	hasChain           bool
}

var _ dialect.FairSemaphoreTable = (*FairSemaphoreTable)(nil)

// NewFairSemaphoreTable compiles s for the queue of sems; a compile error
// is kept in c.
func NewFairSemaphoreTable(sems *SemaphoreTable, c *Compiler, s FairSemaphoreSQL) *FairSemaphoreTable {
	t := &FairSemaphoreTable{SemaphoreTable: sems, hasChain: s.Chain.Text != "",
		tickets: newTickets(sems.run, c, queueSQL{enqueue: s.Enqueue, dequeue: s.Dequeue, renew: s.Renew, wait: s.Wait,
			first: s.First, consume: s.Consume, release: s.Release, channel: s.Channel, addressed: s.Addressed,
			marks: s.Marks, marksStay: s.MarksStay, queue: SemaphoreQueue})}
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

// Grant implements dialect.FairSemaphoreTable. After a grant to a ticket
// it runs Chain, and calls Runner.AfterRelease when Chain found a ticket
// to wake (for a dialect that rings the name's waiting processes itself);
// an addressed queue without Chain calls Runner.AfterTicketed instead.
// Chain's failure is not the grant's.
func (t *FairSemaphoreTable) Grant(ctx context.Context, p dialect.SemaphoreParams, ticket int64) (int64, error) {
	token, err := t.acquire(ctx, p, t, ticket)
	t.granted(ticket, token)
	if err != nil || token == 0 || ticket == 0 {
		return token, err
	}
	if t.hasChain {
		t.runChain(ctx, &Params{Name: p.Name, Limit: p.Limit})
	} else if t.addressed {
		t.run.afterTicketed(ctx, SemaphoreQueue, p.Name, true)
	}
	return token, nil
}

// Dequeue implements dialect.FairSemaphoreTable. Once the ticket is
// deleted it runs Chain, as Grant does.
func (t *FairSemaphoreTable) Dequeue(ctx context.Context, tk dialect.Ticket) error {
	if err := t.tickets.Dequeue(ctx, tk); err != nil {
		return err
	}
	t.runChain(ctx, &Params{Name: tk.Name, Ticket: tk.ID})
	return nil
}

// chainTimeout bounds Chain, which runs once what it follows is done, on
// a context that the caller's end does not cut short.
const chainTimeout = 5 * time.Second

// runChain runs Chain with p, if set, and calls Runner.AfterRelease when
// it found a ticket to wake. It is best effort: a failure leaves the
// waiters to their tickets' and leases' ends.
func (t *FairSemaphoreTable) runChain(ctx context.Context, p *Params) {
	if !t.hasChain {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), chainTimeout)
	defer cancel()
	if n, err := t.run.Int(cctx, &t.chain, p); err == nil && n > 0 {
		t.run.afterRelease(ctx, p.Name)
	}
}

// Wait implements dialect.FairSemaphoreTable.
func (t *FairSemaphoreTable) Wait(ctx context.Context, tk dialect.Ticket, limit int) (time.Duration, bool, error) {
	return t.waitFor(ctx, tk, limit)
}

// Release implements dialect.LeaseTable: the queue's Release if it has
// one, else the semaphore's. A release that woke a ticket runs Chain once
// it committed.
func (t *FairSemaphoreTable) Release(ctx context.Context, l dialect.Lease, minHold time.Duration) (bool, error) {
	if !t.hasRelease {
		return t.SemaphoreTable.Release(ctx, l, minHold)
	}
	n, err := t.releaseOwn(ctx, &t.LeaseTable, l, minHold)
	if err == nil && n == 2 {
		t.runChain(ctx, &Params{Name: l.Name})
	}
	return n > 0, err
}
