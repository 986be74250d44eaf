package sqlrun

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// queueSQL are the statements a queue of tickets has whatever it queues
// for (see FairSQL and FairSemaphoreSQL); First, Consume and Release may
// be empty.
type queueSQL struct {
	enqueue, dequeue, renew, wait, first, consume, release dialect.SQL
	marks                                                  []dialect.SQL
	marksStay                                              bool
	channel                                                string
	addressed                                              bool
	queue                                                  dialect.Queue
}

// tickets runs the statements of a queue of tickets, whatever it queues
// for: taking, giving up and renewing tickets, a ticket's wait, and the
// statements a grant runs for the queue.
type tickets struct {
	run                                                    *Runner
	enqueue, dequeue, renew, wait, first, consume, release Stmt
	marks                                                  []Stmt
	// hasFirst, hasRelease: the queue has a First, a Release of its own.
	hasFirst, hasRelease bool
	addressed            bool   // see FairSQL.Addressed
	waker                string // the value of :channel
	queue                dialect.Queue
	// marked, for marks that stay (see FairSemaphoreSQL.MarksStay): the
	// names whose marks this process set.
	marked *markedNames
}

// newTickets compiles s for run; a compile error is kept in c.
func newTickets(run *Runner, c *Compiler, s queueSQL) tickets {
	q := tickets{run: run, waker: s.channel, addressed: s.addressed, queue: s.queue,
		enqueue: c.Compile(s.enqueue), dequeue: c.Compile(s.dequeue), renew: c.Compile(s.renew), wait: c.Compile(s.wait),
		hasFirst: s.first.Text != "", hasRelease: s.release.Text != ""}
	for _, m := range s.marks {
		if m.Text != "" {
			q.marks = append(q.marks, c.Compile(m))
		}
	}
	if s.marksStay {
		q.marked = &markedNames{names: make(map[string]bool)}
	}
	if q.hasFirst {
		q.first = c.Compile(s.first)
	}
	if s.consume.Text != "" {
		q.consume = c.Compile(s.consume)
	}
	if q.hasRelease {
		q.release = c.Compile(s.release)
	}
	return q
}

// Enqueue implements FairTable and FairSemaphoreTable.
func (t *tickets) Enqueue(ctx context.Context, p dialect.AcquireParams) (dialect.Ticket, error) {
	id, err := t.run.Int(ctx, &t.enqueue, &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL, Channel: t.waker})
	if err == nil {
		t.run.ticket(id, true)
	}
	return dialect.Ticket{Name: p.Name, Owner: p.Owner, ID: id, Addressed: t.addressed}, err
}

// granted tells the runner that ticket (0: none) was granted when token
// is not 0.
func (t *tickets) granted(ticket, token int64) {
	if ticket != 0 && token != 0 {
		t.run.ticket(ticket, false)
	}
}

// Dequeue implements FairTable and FairSemaphoreTable. A
// number of 2 calls dialect.Hooks.AfterRelease for the ticket's name; an
// addressed queue calls dialect.Hooks.AfterTicketed.
func (t *tickets) Dequeue(ctx context.Context, tk dialect.Ticket) error {
	t.run.ticket(tk.ID, false)
	n, err := t.run.Int(ctx, &t.dequeue, &Params{Name: tk.Name, Ticket: tk.ID})
	if n == 2 {
		t.run.afterRelease(ctx, tk.Name)
	}
	if err == nil && t.addressed {
		t.run.afterTicketed(ctx, t.queue, tk.Name, true)
	}
	return err
}

// RenewTickets implements FairTable and
// FairSemaphoreTable.
func (t *tickets) RenewTickets(ctx context.Context, ts []dialect.Ticket, ttl time.Duration) error {
	ls := make([]dialect.Lease, len(ts))
	for i, tk := range ts {
		ls[i] = dialect.Lease{Name: tk.Name, Owner: tk.Owner, Token: tk.ID}
	}
	_, err := t.run.Int(ctx, &t.renew, &Params{Leases: ls, TTL: ttl})
	return err
}

// waitFor runs the queue's Wait statement for tk, asking for limit
// permits (0 for a lock).
func (t *tickets) waitFor(ctx context.Context, tk dialect.Ticket, limit int) (time.Duration, bool, error) {
	var us int64
	p := &Params{Name: tk.Name, Ticket: tk.ID, Limit: limit}
	if err := t.mark(ctx, p); err != nil {
		return 0, false, err
	}
	_, err := t.run.Row(ctx, &t.wait, p, &us)
	if err == nil && us < 0 {
		t.run.ticket(tk.ID, false)
	}
	return time.Duration(max(us, 0)) * time.Microsecond, us >= 0, err
}

// mark runs the queue's marks for p's name, one after the other; marks
// that stay run once per name while the name is remembered.
func (t *tickets) mark(ctx context.Context, p *Params) error {
	if len(t.marks) == 0 || t.marked.has(p.Name) {
		return nil
	}
	found := false
	for i := range t.marks {
		n, err := t.run.Int(ctx, &t.marks[i], p)
		if err != nil {
			return err
		}
		found = found || i == 0 && n > 0
	}
	if found {
		t.marked.add(p.Name)
	}
	return nil
}

// maxMarked bounds the names a queue remembers as marked: beyond it, it
// forgets them all, and marks each again once.
const maxMarked = 4096

// markedNames are the names whose lasting marks a process set (see
// FairSemaphoreSQL.MarksStay). A nil *markedNames remembers none.
type markedNames struct {
	mu    sync.Mutex
	names map[string]bool
}

func (m *markedNames) has(name string) bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.names[name]
}

func (m *markedNames) add(name string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.names) >= maxMarked {
		clear(m.names)
	}
	m.names[name] = true
}

// releaseOwn runs the queue's own Release for l, a lease of lt, and
// returns its number.
func (t *tickets) releaseOwn(ctx context.Context, lt *leaseTable, l dialect.Lease, minHold time.Duration) (int64, error) {
	p := lt.params(l)
	p.MinHold = minHold
	return t.run.Int(ctx, &t.release, p)
}

// fairTable implements FairTable over a lock table and the
// statements of its queue.
type fairTable struct {
	*lockTable
	tickets
	grant, waiting Stmt
	// inOne: a grant is one statement. hasGrant: a grant's transaction
	// has a Grant of its own. apart: see FairSQL.ConsumeApart.
	inOne, hasGrant, apart bool
}

var _ FairTable = (*fairTable)(nil)

// newFairTable compiles s for the queue of locks; a compile error is kept
// in c.
func newFairTable(locks *lockTable, c *Compiler, s dialect.FairSQL) *fairTable {
	t := &fairTable{lockTable: locks, hasGrant: s.Grant.Text != "", apart: s.ConsumeApart,
		tickets: newTickets(locks.run, c, queueSQL{enqueue: s.Enqueue, dequeue: s.Dequeue, renew: s.Renew, wait: s.Wait,
			marks: []dialect.SQL{s.Mark}, first: s.First, consume: s.Consume, channel: s.Channel, addressed: s.Addressed,
			queue: dialect.LockQueue})}
	t.inOne = t.hasGrant && s.Consume.Text == ""
	if s.Waiting.Text != "" {
		t.waiting = c.Compile(s.Waiting)
	}
	if t.hasGrant {
		t.grant = c.Compile(s.Grant)
	}
	return t
}

// Grant implements FairTable.
func (t *fairTable) Grant(ctx context.Context, p dialect.AcquireParams, ticket int64) (token int64, err error) {
	params := &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL, Ticket: ticket, Channel: t.channel}
	switch {
	case t.apart:
		token, err = t.grantApart(ctx, p, params)
	case t.inOne:
		token, err = t.run.GrantInt(ctx, &t.grant, params, t.undo(p.Name, p.Owner))
	default:
		token, err = t.grantInTx(ctx, params)
	}
	t.granted(ticket, token)
	return token, err
}

// grantTimeout bounds a grant's transaction, which runs to its end once
// begun, whatever the caller's context: a grant is never left half done,
// and one that committed is returned (see LockTable.Acquire).
const grantTimeout = 10 * time.Second

// grantInTx checks First, then grants in a short transaction: Grant (or
// Acquire), Consume.
func (t *fairTable) grantInTx(ctx context.Context, p *Params) (int64, error) {
	if err := t.run.check(ctx); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grantTimeout)
	defer cancel()
	grant := &t.acquire
	if t.hasGrant {
		grant = &t.grant
	}
	var token int64
	err := t.run.Conn(tctx, func(tctx context.Context, conn *sql.Conn) error {
		// A refusal costs one statement and no transaction. The check is
		// not repeated in the transaction: a ticket taken in between
		// came after this waiter, whose Acquire it cannot precede.
		if t.hasFirst {
			if ok, err := intOn(tctx, conn, "", &t.first, p); err != nil || ok == 0 {
				return t.run.Wrap(err)
			}
		}
		tx, err := conn.BeginTx(tctx, nil)
		if err != nil {
			return t.run.Wrap(err)
		}
		defer tx.Rollback()
		n, err := intOn(tctx, tx, "", grant, p)
		if err != nil || n == 0 {
			return t.run.Wrap(err)
		}
		if p.Ticket != 0 {
			if _, err := intOn(tctx, tx, "", &t.consume, p); err != nil {
				return t.run.Wrap(err)
			}
		}
		if err := tx.Commit(); err != nil {
			return t.run.Wrap(err)
		}
		token = n
		return nil
	})
	return token, err
}

// consumeTimeout bounds Consume after a grant (see FairSQL.ConsumeApart),
// which runs whatever the caller's context: the grant is done.
const consumeTimeout = 5 * time.Second

// grantApart is Grant with FairSQL.ConsumeApart.
func (t *fairTable) grantApart(ctx context.Context, p dialect.AcquireParams, params *Params) (int64, error) {
	token, err := t.lockTable.Acquire(ctx, p)
	if token == 0 || params.Ticket == 0 {
		return token, err
	}
	ctx = context.WithoutCancel(ctx)
	end := t.lockTable.apart.begin(p.Name)
	t.run.goOff(func() {
		defer end()
		cctx, cancel := context.WithTimeout(ctx, consumeTimeout)
		defer cancel()
		if _, err := t.run.Int(cctx, &t.consume, params); err == nil {
			t.run.afterTicketed(ctx, dialect.LockQueue, p.Name, true)
		}
	})
	return token, nil
}

// Wait implements FairTable.
func (t *fairTable) Wait(ctx context.Context, tk dialect.Ticket) (time.Duration, bool, error) {
	return t.waitFor(ctx, tk, 0)
}
