package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// FIFO queues (sqllock.TableOptions.Fair), and the wake-up order of an unfair
// lock's waiters (Catalogue.Waking). A FIFO grant is a short transaction:
// check that no live ticket comes first, run the lock table's Acquire,
// delete the ticket; an unfair waiter's grant is the Acquire, then the
// ticket's deletion on its own. A ticket records the tag of its process's
// bells (its waker); a waiter marks the lock's row (ticketed) before it
// asks how long to wait, and the release that frees a marked row rings the
// bell of the oldest live ticket's process alone (see wake.go), which
// wakes that ticket's waiter. Without wake-ups (WithoutWakeups), the
// tickets record no waker and mark nothing, and waiters poll.

// ticketSQL declares the statements a lock's tickets have whatever their
// grant: taking, marking, waiting, giving up and renewing. With addressed,
// tickets record waker and mark the lock's row.
func ticketSQL(locks, tickets, waker string, addressed bool) dialect.FairSQL {
	s := dialect.FairSQL{
		Waiting: dialect.Q(fmt.Sprintf(`SELECT name, COUNT(*) FROM %s WHERE expires_at > %s GROUP BY name`, tickets, now)),
		Enqueue: dialect.XID(fmt.Sprintf(`INSERT INTO %s (name, owner, waker, expires_at) VALUES (:name, :owner, :channel, %s + INTERVAL :ttl MICROSECOND)`,
			tickets, now)),
		// The mark is set before Wait reads the lock: a release that
		// committed before the mark finds the lock free in Wait (0: try
		// again at once, unless older tickets wait, whose waiters were
		// rung); a later one reports the mark and rings.
		Wait: dialect.Q(fmt.Sprintf(`SELECT IF(NOT EXISTS (SELECT 1 FROM %[1]s WHERE id = :ticket AND expires_at > %[3]s), -1, COALESCE(
  (SELECT TIMESTAMPDIFF(MICROSECOND, %[3]s, MIN(t.expires_at)) FROM %[1]s t
   WHERE t.name = :name AND t.expires_at > %[3]s AND t.id < :ticket),
  (SELECT TIMESTAMPDIFF(MICROSECOND, %[3]s, l.expires_at) FROM %[2]s l WHERE l.name = :name AND l.expires_at > %[3]s),
  0))`, tickets, locks, now)),
		Dequeue: dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE id = :ticket`, tickets)),
		Renew: dialect.X(fmt.Sprintf(`UPDATE %s SET expires_at = %s + INTERVAL :ttl MICROSECOND
WHERE name IN (:names) AND (name, owner, id) IN (:leases)`, tickets, now)),
		Consume: dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE id = :ticket`, tickets)),
	}
	if addressed {
		s.Channel, s.Addressed = waker, true
		s.Mark = dialect.X(fmt.Sprintf(`UPDATE %s SET ticketed = TRUE WHERE name = :name AND NOT ticketed AND expires_at > %s`, locks, now))
	}
	return s
}

// fairSQL declares the FIFO queue's statements: First refuses a waiter
// that the queue does not serve in one statement, without a transaction.
func fairSQL(locks, tickets, waker string, addressed bool) dialect.FairSQL {
	s := ticketSQL(locks, tickets, waker, addressed)
	s.First = dialect.Q(fmt.Sprintf(`SELECT NOT EXISTS (SELECT 1 FROM %[1]s t WHERE t.name = :name AND t.expires_at > %[3]s
    AND (:ticket = 0 OR t.id < :ticket))
  OR EXISTS (SELECT 1 FROM %[2]s l WHERE l.name = :name AND l.owner = :owner AND l.holds > 0 AND l.expires_at > %[3]s)`,
		tickets, locks, now))
	return s
}

// wakingSQL declares the statements of tickets that order wake-ups alone
// (Catalogue.Waking): a grant is the lock table's Acquire, whatever
// tickets are live, then the ticket's deletion (see
// dialect.FairSQL.ConsumeApart).
func wakingSQL(locks, tickets, waker string) dialect.FairSQL {
	s := ticketSQL(locks, tickets, waker, true)
	s.ConsumeApart = true
	return s
}

// reapTicketsSQL deletes a batch of expired tickets.
func reapTicketsSQL(tickets string) string {
	return fmt.Sprintf(`DELETE FROM %s WHERE expires_at <= %s ORDER BY expires_at LIMIT ?`, tickets, now)
}

// reapTickets deletes a batch of up to limit expired tickets on conn.
func (d *Dialect) reapTickets(ctx context.Context, conn *sql.Conn, limit int) (int, error) {
	return execCount(ctx, conn, d.reap.tickets, limit)
}

// execCount runs the statement query with limit on conn, and returns the
// number of rows it affected.
func execCount(ctx context.Context, conn *sql.Conn, query string, limit int) (int, error) {
	res, err := conn.ExecContext(ctx, query, limit)
	if err != nil {
		return 0, wrap(err)
	}
	n, err := res.RowsAffected()
	return int(n), wrap(err)
}
