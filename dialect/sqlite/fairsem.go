package sqlite

import (
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// FIFO queues of semaphores (sqllock.SemaphoreOptions.Fair). A
// grant is the semaphore's acquire transaction, which counts the live
// tickets before the caller's and deletes the ticket it grants. SQLite
// has no notifications: fair waiters in other processes poll, and the
// queue's rule serves them in ticket order.

// fairSemaphoreSQL declares the statements of the semaphores' queue.
func fairSemaphoreSQL() dialect.FairSemaphoreSQL {
	const tickets = "sqllock_semaphore_tickets"
	ahead := fmt.Sprintf(`FROM %s t WHERE t.name = :name AND t.expires_at > %s AND t.id < :ticket`, tickets, now)
	live := fmt.Sprintf(`FROM sqllock_semaphore_holders h WHERE h.name = :name AND h.expires_at > %s`, now)
	return dialect.FairSemaphoreSQL{
		// Refusals read, without taking the write lock.
		First: dialect.Q(fmt.Sprintf(`SELECT NOT EXISTS (SELECT 1 FROM %[1]s t WHERE t.name = :name AND t.expires_at > %[2]s
    AND (:ticket = 0 OR t.id < :ticket))
  OR EXISTS (SELECT 1 FROM sqllock_semaphore_holders h WHERE h.name = :name AND h.owner = :owner AND h.holds > 0 AND h.expires_at > %[2]s)`,
			tickets, now)),
		Take: semaphoreTake(fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM %s t WHERE t.name = :name AND t.expires_at > %s
    AND (:ticket = 0 OR t.id < :ticket))`, tickets, now)),
		Consume: dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE id = :ticket`, tickets)),
		Enqueue: dialect.Q(fmt.Sprintf(`INSERT INTO %s (name, owner, expires_at) VALUES (:name, :owner, %s + :ttl) RETURNING id`,
			tickets, now)),
		Wait: dialect.Q(fmt.Sprintf(`SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM %[1]s WHERE id = :ticket AND expires_at > %[2]s) THEN -1
WHEN NOT EXISTS (SELECT 1 %[4]s) AND (SELECT count(*) %[3]s)
  < coalesce((SELECT s.lim FROM sqllock_semaphores s WHERE s.name = :name), :limit) THEN 0
ELSE coalesce(coalesce((SELECT min(t.expires_at) %[4]s), (SELECT min(h.expires_at) %[3]s)) - %[2]s, 0) END`,
			tickets, now, live, ahead)),
		Dequeue: dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE id = :ticket`, tickets)),
		Renew: dialect.X(fmt.Sprintf(`UPDATE %s SET expires_at = %s + :ttl
WHERE name IN (:names) AND (name, owner, id) IN (:leases)`, tickets, now)),
	}
}
