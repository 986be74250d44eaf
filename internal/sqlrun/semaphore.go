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
// LeaseSQL's. An acquire runs them in one transaction, in which the head
// row's lock serialises the grants of a name:
//
//	Head...   lock :name's head row, creating it with :limit; the last
//	          statement selects the row's limit
//	Expire    delete :name's holders whose lease has expired
//	Mine      select holds and token of (:name, :owner)'s holder row
//	Reenter   add a hold to (:name, :owner)'s row and extend it to :ttl
//	Count     select the number of :name's holder rows
//	SetLimit  set the head row's limit to :limit
//	Token     give the next token of :name as its number
//	Insert    insert (:name, :owner) with :token, one hold, for :ttl
//
// Every holder row left after Expire counts as a holder, whatever its
// expiry by the time Count runs: a lease that was live when Expire ran may
// have been renewed since, by a renewal that Count cannot see yet.
type SemaphoreSQL struct {
	LeaseSQL
	Head                                                  []SQL
	Expire, Mine, Reenter, Count, SetLimit, Token, Insert SQL
	// Remaining selects the microseconds until :name's first holder's
	// lease ends (0 or less: look again at once), and no row when it has
	// no holder.
	Remaining SQL
	// Isolation is the isolation level of the acquire's transaction.
	Isolation sql.IsolationLevel
	// Announces says whether Release announces freed permits.
	Announces bool
}

// SemaphoreTable implements dialect.SemaphoreTable.
type SemaphoreTable struct {
	LeaseTable
	head                                                  []Stmt
	expire, mine, reenter, count, setLimit, token, insert Stmt
	remaining                                             Stmt
	isolation                                             sql.IsolationLevel
	announces                                             bool
}

// NewSemaphoreTable compiles s; a compile error is kept in c.
func NewSemaphoreTable(run *Runner, c *Compiler, s SemaphoreSQL) *SemaphoreTable {
	t := &SemaphoreTable{LeaseTable: newLeaseTable(run, c, s.LeaseSQL),
		expire: c.Compile(s.Expire), mine: c.Compile(s.Mine), reenter: c.Compile(s.Reenter),
		count: c.Compile(s.Count), setLimit: c.Compile(s.SetLimit), token: c.Compile(s.Token),
		insert: c.Compile(s.Insert), remaining: c.Compile(s.Remaining),
		isolation: s.Isolation, announces: s.Announces}
	for _, h := range s.Head {
		t.head = append(t.head, c.Compile(h))
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

// Acquire implements dialect.SemaphoreTable. Its transaction runs as a
// grant (see Runner.Grant).
func (t *SemaphoreTable) Acquire(ctx context.Context, p dialect.SemaphoreParams) (int64, error) {
	return t.acquire(ctx, p, nil, 0)
}

// acquire runs the acquire's transaction, under the queue q's rule for
// ticket when q is not nil.
func (t *SemaphoreTable) acquire(ctx context.Context, p dialect.SemaphoreParams, q *FairSemaphoreTable, ticket int64) (int64, error) {
	if q != nil && q.hasFirst {
		if t.run.Check != nil {
			if err := t.run.Check(ctx); err != nil {
				return 0, err
			}
		}
		// A refusal costs one statement and no transaction. The check is
		// repeated in the transaction (Ahead).
		ok, err := t.run.Int(ctx, &q.first, &Params{Name: p.Name, Owner: p.Owner, Ticket: ticket})
		if err != nil || ok == 0 {
			return 0, err
		}
	}
	params := &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL, Limit: p.Limit, Channel: t.channel, Ticket: ticket}
	var mismatch *errLimit
	token, err := t.run.Grant(ctx, Grant{
		InTx: true, TxOptions: &sql.TxOptions{Isolation: t.isolation},
		Run: func(ctx context.Context, tx Querier, prefix string) (int64, error) {
			n, err := t.grant(ctx, tx, prefix, params, q)
			if errors.As(err, &mismatch) { // the table's answer, not the driver's
				return 0, ErrRollback
			}
			return n, err
		},
		Undo: t.undo(p.Name, p.Owner),
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

// grant runs the statements of the acquire's transaction in tx, under the
// queue q's rule for p.Ticket when q is not nil.
func (t *SemaphoreTable) grant(ctx context.Context, tx Querier, prefix string, p *Params, q *FairSemaphoreTable) (int64, error) {
	row := func(st *Stmt, dest ...any) (bool, error) {
		text, args := st.bind(p)
		err := tx.QueryRowContext(ctx, prefix+text, args...).Scan(dest...)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	}
	var limit int64
	for i := range t.head {
		if i < len(t.head)-1 {
			if _, err := intOn(ctx, tx, prefix, &t.head[i], p); err != nil {
				return 0, err
			}
			continue
		}
		if _, err := row(&t.head[i], &limit); err != nil {
			return 0, err
		}
	}
	if _, err := intOn(ctx, tx, prefix, &t.expire, p); err != nil {
		return 0, err
	}
	var holds, token int64
	mine, err := row(&t.mine, &holds, &token)
	if err != nil {
		return 0, err
	}
	if mine {
		if holds == 0 {
			// Released within its minimum hold: nobody, this owner
			// included, takes the permit back before it ends.
			return 0, nil
		}
		if limit != int64(p.Limit) {
			return 0, &errLimit{limit, int64(p.Limit)}
		}
		if _, err := intOn(ctx, tx, prefix, &t.reenter, p); err != nil {
			return 0, err
		}
		return token, nil
	}
	var n int64
	if _, err := row(&t.count, &n); err != nil {
		return 0, err
	}
	if limit != int64(p.Limit) {
		if n > 0 {
			return 0, &errLimit{limit, int64(p.Limit)}
		}
		if _, err := intOn(ctx, tx, prefix, &t.setLimit, p); err != nil {
			return 0, err
		}
	}
	if n >= int64(p.Limit) {
		// Full; the expired holders dropped stay dropped.
		return 0, nil
	}
	if q != nil {
		// The head row's lock keeps the queue's grants of the name in
		// turn: a ticket committed after this count came after the
		// caller, whose Acquire it cannot precede.
		var ahead int64
		if _, err := row(&q.ahead, &ahead); err != nil {
			return 0, err
		}
		if ahead > 0 {
			return 0, nil
		}
	}
	if p.Token, err = intOn(ctx, tx, prefix, &t.token, p); err != nil {
		return 0, err
	}
	if _, err := intOn(ctx, tx, prefix, &t.insert, p); err != nil {
		return 0, err
	}
	if q != nil && p.Ticket != 0 {
		if _, err := intOn(ctx, tx, prefix, &q.consume, p); err != nil {
			return 0, err
		}
	}
	return p.Token, nil
}

// FairSemaphoreSQL declares the statements of the semaphore tables' queue
// of tickets (see dialect.FairSemaphoreTable). Tickets travel as :ticket,
// a semaphore's limit as :limit, and the waker of the enqueueing process
// as :channel. A grant is the semaphore's acquire with two more steps:
//
//	Ahead    after Count, when a permit is free: select the number of
//	         :name's live tickets before :ticket (all of them for 0); the
//	         caller is refused unless it is 0
//	Consume  after Insert, for a ticket: delete :ticket
//
// First, if set, runs before the transaction: it selects 1 when no live
// ticket of :name comes before :ticket (0: none), or when :owner holds a
// live permit of :name (re-entry), else 0, so that the waiters a ring wakes
// but the queue does not serve are refused by one statement, without a
// transaction.
type FairSemaphoreSQL struct {
	First, Ahead, Consume SQL
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
	ahead, chain Stmt
	hasChain     bool
}

var _ dialect.FairSemaphoreTable = (*FairSemaphoreTable)(nil)

// NewFairSemaphoreTable compiles s for the queue of sems; a compile error
// is kept in c.
func NewFairSemaphoreTable(sems *SemaphoreTable, c *Compiler, s FairSemaphoreSQL) *FairSemaphoreTable {
	t := &FairSemaphoreTable{SemaphoreTable: sems, ahead: c.Compile(s.Ahead), hasChain: s.Chain.Text != "",
		tickets: newTickets(sems.run, c, queueSQL{enqueue: s.Enqueue, dequeue: s.Dequeue, renew: s.Renew, wait: s.Wait,
			first: s.First, consume: s.Consume, release: s.Release, channel: s.Channel})}
	if t.hasChain {
		t.chain = c.Compile(s.Chain)
	}
	return t
}

// Grant implements dialect.FairSemaphoreTable. After a grant to a ticket
// it runs Chain, and calls Runner.AfterRelease when Chain found a ticket
// to wake (for a dialect that rings the name's waiting processes itself).
// Chain's failure is not the grant's.
func (t *FairSemaphoreTable) Grant(ctx context.Context, p dialect.SemaphoreParams, ticket int64) (int64, error) {
	token, err := t.acquire(ctx, p, t, ticket)
	if err != nil || token == 0 || ticket == 0 {
		return token, err
	}
	t.runChain(ctx, &Params{Name: p.Name, Limit: p.Limit})
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
