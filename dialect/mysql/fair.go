package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/internal/sqlrun"
)

// FIFO queues (sqllock.Options.Fair). A grant is a short transaction:
// check that no live ticket comes first, run the lock table's Acquire,
// delete the ticket. MySQL cannot address a wake-up to one process: a
// release rings the bells of the name (see wake.go), and each process
// waiting for it lets its oldest local waiter try; the queue's rule grants
// the lock to the oldest ticket alone.

// fairSQL declares the queue's statements.
func fairSQL(locks, tickets string) sqlrun.FairSQL {
	return sqlrun.FairSQL{
		First: sqlrun.Q(fmt.Sprintf(`SELECT NOT EXISTS (SELECT 1 FROM %[1]s t WHERE t.name = :name AND t.expires_at > %[3]s
    AND (:ticket = 0 OR t.id < :ticket))
  OR EXISTS (SELECT 1 FROM %[2]s l WHERE l.name = :name AND l.owner = :owner AND l.holds > 0 AND l.expires_at > %[3]s)`,
			tickets, locks, now)),
		Consume: sqlrun.X(fmt.Sprintf(`DELETE FROM %s WHERE id = :ticket`, tickets)),
		Enqueue: sqlrun.XID(fmt.Sprintf(`INSERT INTO %s (name, owner, expires_at) VALUES (:name, :owner, %s + INTERVAL :ttl MICROSECOND)`,
			tickets, now)),
		Wait: sqlrun.Q(fmt.Sprintf(`SELECT IF(NOT EXISTS (SELECT 1 FROM %[1]s WHERE id = :ticket AND expires_at > %[3]s), -1, COALESCE(
  (SELECT TIMESTAMPDIFF(MICROSECOND, %[3]s, MIN(t.expires_at)) FROM %[1]s t
   WHERE t.name = :name AND t.expires_at > %[3]s AND t.id < :ticket),
  (SELECT TIMESTAMPDIFF(MICROSECOND, %[3]s, l.expires_at) FROM %[2]s l WHERE l.name = :name AND l.expires_at > %[3]s),
  0))`, tickets, locks, now)),
		Dequeue: sqlrun.X(fmt.Sprintf(`DELETE FROM %s WHERE id = :ticket`, tickets)),
		Renew: sqlrun.X(fmt.Sprintf(`UPDATE %s SET expires_at = %s + INTERVAL :ttl MICROSECOND
WHERE name IN (:names) AND (name, owner, id) IN (:leases)`, tickets, now)),
	}
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
