package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/internal/sqlrun"
)

// FIFO queues of semaphores (sqllock.Options.Fair on a Semaphore). A
// grant is the semaphore's acquire transaction, which counts, under the
// head row's lock, the live tickets before the caller's, and deletes the
// ticket it grants. MySQL cannot address a wake-up to one process: a
// release rings the bells of the processes waiting for the name (see
// wake.go), each lets its oldest local waiter try, and the queue's rule
// serves them in ticket order. A ring does not wait for the grants it
// starts: a waiter woken by one may find an older ticket still queued,
// and then sleeps until that ticket ends. So a grant to a ticket that
// leaves a permit free while another ticket waits rings again, once it
// committed, as does the oldest ticket given up while another waits.

// fairSemaphoreSQL declares the statements of the semaphores' queue.
func fairSemaphoreSQL(sems, holders, tickets string) sqlrun.FairSemaphoreSQL {
	ahead := fmt.Sprintf(`FROM %s t WHERE t.name = :name AND t.expires_at > %s AND t.id < :ticket`, tickets, now)
	live := fmt.Sprintf(`FROM %s h WHERE h.name = :name AND h.expires_at > %s`, holders, now)
	return sqlrun.FairSemaphoreSQL{
		Chain: sqlrun.Q(fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %[1]s t WHERE t.name = :name AND t.expires_at > %[2]s)
  AND NOT EXISTS (SELECT 1 %[3]s)
  AND (:limit = 0 OR (SELECT COUNT(*) %[4]s) < :limit)`, tickets, now, ahead, live)),
		First: sqlrun.Q(fmt.Sprintf(`SELECT NOT EXISTS (SELECT 1 FROM %[1]s t WHERE t.name = :name AND t.expires_at > %[3]s
    AND (:ticket = 0 OR t.id < :ticket))
  OR EXISTS (SELECT 1 FROM %[2]s h WHERE h.name = :name AND h.owner = :owner AND h.holds > 0 AND h.expires_at > %[3]s)`,
			tickets, holders, now)),
		Take: semaphoreTake(sems, holders, fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM %s t WHERE t.name = :name AND t.expires_at > %s
    AND (:ticket = 0 OR t.id < :ticket))`, tickets, now)),
		Consume: sqlrun.X(fmt.Sprintf(`DELETE FROM %s WHERE id = :ticket`, tickets)),
		Enqueue: sqlrun.XID(fmt.Sprintf(`INSERT INTO %s (name, owner, expires_at) VALUES (:name, :owner, %s + INTERVAL :ttl MICROSECOND)`,
			tickets, now)),
		Wait: sqlrun.Q(fmt.Sprintf(`SELECT IF(NOT EXISTS (SELECT 1 FROM %[1]s WHERE id = :ticket AND expires_at > %[2]s), -1,
  IF(NOT EXISTS (SELECT 1 %[4]s) AND (SELECT COUNT(*) %[3]s) < :limit, 0,
    COALESCE(TIMESTAMPDIFF(MICROSECOND, %[2]s, COALESCE((SELECT MIN(t.expires_at) %[4]s), (SELECT MIN(h.expires_at) %[3]s))), 0)))`,
			tickets, now, live, ahead)),
		Dequeue: sqlrun.X(fmt.Sprintf(`DELETE FROM %s WHERE id = :ticket`, tickets)),
		Renew: sqlrun.X(fmt.Sprintf(`UPDATE %s SET expires_at = %s + INTERVAL :ttl MICROSECOND
WHERE name IN (:names) AND (name, owner, id) IN (:leases)`, tickets, now)),
	}
}

// reapSemaphoreTickets deletes a batch of up to limit expired tickets of
// the semaphores' queue on conn.
func (d *Dialect) reapSemaphoreTickets(ctx context.Context, conn *sql.Conn, limit int) (int, error) {
	return execCount(ctx, conn, d.reap.semTickets, limit)
}
