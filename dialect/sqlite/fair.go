package sqlite

import (
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// FIFO queues (sqllock.TableOptions.Fair). A grant is a short transaction whose
// first statement is the lock table's Acquire under the queue's rule, so
// that it takes the write lock at once (a read first would have to upgrade
// it), then deletes the ticket. A release or a ticket given up wakes the
// waiting processes (wake.go), whose heads look again, and the queue's rule
// grants the lock to the oldest ticket alone.

// fairSQL declares the queue's statements.
func fairSQL() dialect.FairSQL {
	const tickets = "sqllock_tickets"
	ahead := fmt.Sprintf(`EXISTS (SELECT 1 FROM %s t WHERE t.name = :name AND t.expires_at > %s
    AND (:ticket = 0 OR t.id < :ticket))`, tickets, now)
	return dialect.FairSQL{
		// lockSQL's Acquire, refused while a live ticket comes first
		// (unless it re-enters a live lease). SQLite parses a WHERE in
		// an upsert's SELECT only when one is given, as here.
		Grant: dialect.Q(fmt.Sprintf(`INSERT INTO sqllock_locks AS l (name, owner, token, holds, acquired_at, expires_at)
SELECT :name, :owner, (SELECT token + 1 FROM sqllock_token_floor WHERE id = 1), 1, %[1]s, %[1]s + :ttl
WHERE NOT %[2]s OR EXISTS (SELECT 1 FROM sqllock_locks x
    WHERE x.name = :name AND x.owner = :owner AND x.holds > 0 AND x.expires_at > %[1]s)
%[3]s
WHERE (l.expires_at <= %[1]s AND NOT %[2]s) OR (l.owner = excluded.owner AND l.holds > 0 AND l.expires_at > %[1]s)
RETURNING token`, now, ahead, grantUpsert)),
		Consume: dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE id = :ticket`, tickets)),
		Waiting: dialect.Q(fmt.Sprintf(`SELECT name, count(*) FROM %s WHERE expires_at > %s GROUP BY name`, tickets, now)),
		Enqueue: dialect.Q(fmt.Sprintf(`INSERT INTO %s (name, owner, expires_at) VALUES (:name, :owner, %s + :ttl) RETURNING id`,
			tickets, now)),
		Wait: dialect.Q(fmt.Sprintf(`SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM %[1]s WHERE id = :ticket AND expires_at > %[2]s) THEN -1
ELSE coalesce(
  (SELECT min(t.expires_at) - %[2]s FROM %[1]s t WHERE t.name = :name AND t.expires_at > %[2]s AND t.id < :ticket),
  (SELECT l.expires_at - %[2]s FROM sqllock_locks l WHERE l.name = :name AND l.expires_at > %[2]s),
  0) END`, tickets, now)),
		// A ticket given up may have kept the next one waiting: 2 rings
		// the waiting processes, whose heads look again.
		Dequeue: dialect.Q(fmt.Sprintf(`DELETE FROM %s WHERE id = :ticket RETURNING 2`, tickets)),
		Renew: dialect.X(fmt.Sprintf(`UPDATE %s SET expires_at = %s + :ttl
WHERE name IN (:names) AND (name, owner, id) IN (:leases)`, tickets, now)),
	}
}

// reapTicketsSQL deletes a batch of expired tickets.
func reapTicketsSQL() dialect.SQL { return reapTicketsOf("sqllock_tickets") }

// reapTicketsOf deletes a batch of expired tickets of the table tickets.
func reapTicketsOf(tickets string) dialect.SQL {
	return dialect.X(fmt.Sprintf(`DELETE FROM %[1]s WHERE id IN (
  SELECT id FROM %[1]s WHERE expires_at <= %[2]s ORDER BY expires_at LIMIT :limit
)`, tickets, now))
}
