package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock/dialect"
)

// wakeUps makes the bells of the waiters table waiters, for the lease
// tables (their waiters hints) named after it, and for the tickets of the
// queues (by dialect.Queue); the hooks it sets in h ring them after every
// release that frees a name some process waits for (see wakingRelease). A
// registration marks the rows of the lock and version tables, then the
// semaphores' head and holder rows, then the read/write locks', each head
// before its holders: a grant that adds a holder row copies its head's
// mark under the head's lock, so it either comes after the head's mark or
// commits its row before the holders' mark.
func (d *Dialect) wakeUps(h *dialect.Hooks, waiters string, queues []ticketQueue, tables ...string) {
	d.bells = newBells(d.db, d.waker, waiters, queues, tables...)
	h.AfterRelease = d.bells.ring
	h.AfterTicketed = d.bells.ringTicket
	h.Ticket = d.bells.setTicket
	h.Go = d.bells.goOwned
}

// wakingRelease is the release statement of table, whose token column is
// token. The assignment of the token column to itself carries the result
// in LAST_INSERT_ID(expr), evaluated after holds was decremented (MySQL
// assigns left to right) and only for a matched row: when the release
// frees a row that some process marked as waited for — at once, not when a
// minimum hold keeps it taken (its waiters wait for the row's expiry) — 2
// (waiters without tickets), or, with ticketed (a table with the
// column), 3 (waiters with tickets) or 4 (both); else 1.
func wakingRelease(table, token string, ticketed bool) dialect.SQL {
	marks := "IF(waiters, 2, 1)"
	if ticketed {
		marks = "1 + waiters + 2 * ticketed"
	}
	return dialect.XID(fmt.Sprintf(`UPDATE %[1]s SET holds = holds - 1, expires_at = %[3]s,
  %[2]s = %[2]s + 0 * LAST_INSERT_ID(IF(holds = 0 AND expires_at = %[4]s, %[5]s, 1))
WHERE name = :name AND owner = :owner AND %[2]s = :token AND holds > 0`, table, token, releasedExpiry, released, marks))
}

// ring wakes the processes waiting for name, before it returns: the
// release that calls it returns once its waiters were woken, so a process
// that exits right after its release (without Close) leaves no waiter
// asleep until the released lease would have ended. It is best effort, on
// a context that ctx's end does not cut short (the release is done), and
// bounded by wakeTimeout: a waiter that is not woken comes back within its
// MaxBackoff.
func (b *bells) ring(ctx context.Context, name string) {
	b.ringNow(context.WithoutCancel(ctx), ringKey{name: name})
}

// ringTicket wakes the process of the oldest live ticket of name in
// queue q (with ifFree, only while what it waits for is free), before it
// returns, as ring does.
func (b *bells) ringTicket(ctx context.Context, q dialect.Queue, name string, ifFree bool) {
	b.ringNow(context.WithoutCancel(ctx), ringKey{name: name, ticket: true, ifFree: ifFree, queue: q})
}

// goOwned runs f in a goroutine of the bells (the runner's Go): a
// granted ticket's deletion, which the grant does not wait for (a round
// trip), and the ring of the next ticket after it. Until the deletion, a
// release's ring may reach the granted ticket, and be lost: the runner
// waits for the deletion before it releases the lease (and the ring after
// the deletion makes up for a ring that came before it). Close waits for
// the goroutines under way; once the dialect is closed, f runs in the
// caller.
func (b *bells) goOwned(f func()) {
	b.mu.Lock()
	if b.ctx.Err() != nil {
		b.mu.Unlock()
		f()
		return
	}
	b.rings.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.rings.Done()
		f()
	}()
}

// ringKey is what a ring rings: the processes waiting for a name, or the
// process of its oldest ticket in queue (with ifFree, only while what the
// ticket waits for is free).
type ringKey struct {
	name           string
	ticket, ifFree bool
	queue          dialect.Queue
}

// ringNow counts a ring in the registrations of the name's waiters and
// ends their bells' statements; or, for a ticket's ring, in the name's
// oldest live ticket, and ends its bell's.
//
// The bells are looked up while the ring is counted, on another
// connection of the pool, which saves a round trip, and are killed after
// the count committed: a bell asleep then wakes and reads the count; a
// bell that runs another statement has it ended, and reads its rings
// again; a bell between statements reads the count in its next one (the
// sleep's first). A registration made after the look-up is rung by the
// process that made it (see sync).
func (b *bells) ringNow(ctx context.Context, k ringKey) {
	ctx, cancel := context.WithTimeout(ctx, wakeTimeout)
	defer cancel()
	if k.ifFree {
		b.ringTicketIfFree(ctx, b.stmts.queues[k.queue], k.name)
		return
	}
	mark, find := b.stmts.ringMark, b.stmts.ringFind
	if k.ticket {
		mark, find = b.stmts.queues[k.queue].mark, b.stmts.queues[k.queue].find
	}
	type found struct {
		ids []int64
		err error
	}
	early := make(chan found, 1)
	go func() {
		var f found
		f.ids, f.err = b.findBells(ctx, fmt.Sprintf(find, lit(k.name)))
		early <- f
	}()
	err := b.count(ctx, fmt.Sprintf(mark, lit(k.name)))
	f := <-early
	if err != nil || f.err != nil {
		return
	}
	for _, id := range f.ids {
		_ = b.killOn(ctx, id)
	}
}

// ringTries bounds the tries of a ring's count that the server rolled
// back to break a deadlock.
const ringTries = 3

// count runs a ring's count, query, again when the server rolled it back
// to break a deadlock: it locks the rows it scans (under REPEATABLE READ,
// those of ended registrations or tickets too), and so may meet a reaping
// statement that locks the same rows in another order. A lost count
// would leave a waiter asleep until the lease would have ended.
func (b *bells) count(ctx context.Context, query string) error {
	for try := 1; ; try++ {
		_, err := b.db.ExecContext(ctx, query)
		if try == ringTries || !errors.Is(wrap(err), dialect.ErrTransient) {
			return err
		}
	}
}

// ringTicketIfFree counts a ring in the oldest live ticket of name in
// the queue of q, if what it waits for is free, and ends the statement of
// the bell that holds the ticket's tag, if one does. A ticket whose
// process has no bell running keeps the ring for its next bell, which
// reads it before it sleeps.
func (b *bells) ringTicketIfFree(ctx context.Context, q ticketStmts, name string) {
	var (
		id   int64
		bell sql.NullInt64
	)
	if err := b.db.QueryRowContext(ctx, fmt.Sprintf(q.findFree, lit(name))).Scan(&id, &bell); err != nil {
		return // none (sql.ErrNoRows), or the waiter waits until the lease would have ended
	}
	if _, err := b.db.ExecContext(ctx, fmt.Sprintf(q.markID, id)); err != nil || !bell.Valid {
		return
	}
	_ = b.killOn(ctx, bell.Int64)
}

// findBells returns the connections of the live bells that query, a
// ringFind or ticketFind, selects; a ticket's tag that no connection
// holds (NULL) is skipped.
func (b *bells) findBells(ctx context.Context, query string) (ids []int64, err error) {
	rows, err := b.db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id sql.NullInt64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		if id.Valid {
			ids = append(ids, id.Int64)
		}
	}
	return ids, rows.Err()
}

// kill ends the statement of connection id, if it runs one, on a context
// of its own.
func (b *bells) kill(id int64) {
	ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
	defer cancel()
	_ = b.killOn(ctx, id)
}

// killOn ends the statement of connection id with KILL QUERY. A connection
// that is gone is no error.
func (b *bells) killOn(ctx context.Context, id int64) error {
	_, err := b.db.ExecContext(ctx, "KILL QUERY "+strconv.FormatInt(id, 10))
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1094 { // unknown thread id
		return nil
	}
	return err
}
