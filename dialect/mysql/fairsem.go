package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// FIFO queues of semaphores (sqllock.SemaphoreOptions.Fair), and
// the wake-up order of an unfair semaphore's waiters
// (Catalogue.WakingSemaphores). A grant is the semaphore's acquire
// transaction, which, for a FIFO queue, counts under the head row's lock
// the live tickets before the caller's, and deletes the ticket it grants.
//
// With wake-ups, tickets are addressed as the lock table's are (see
// fair.go): a ticket records its process's bell (waker); a waiter marks
// the name's head row and then its holder rows (ticketed) before it first
// asks how long to wait, and a grant copies the head's mark into the
// holder row it adds, so that every holder row granted before the head's
// mark is marked by the holders' mark, and every later one by its grant.
// The marks stay (head rows are never reaped): a process marks a name
// once. The release that frees a marked holder row rings the bell of the
// name's oldest live ticket alone; a grant to a ticket, or the oldest
// ticket given up, rings the next ticket once it committed if a permit is
// still free, so that permits freed together are handed on one grant
// after another (a release may ring the ticket being granted).
//
// Without wake-ups (WithoutWakeups), tickets record no waker and mark
// nothing; a grant that leaves a permit to a waiting ticket, and the
// oldest ticket given up, ring the name (Chain), for the waiters who
// poll meanwhile.

// fairSemaphoreSQL declares the statements of the semaphores' FIFO queue;
// with addressed, tickets record waker and mark the name's rows.
func fairSemaphoreSQL(sems, holders, tickets, waker string, addressed bool) dialect.FairSemaphoreSQL {
	ahead := fmt.Sprintf(`FROM %s t WHERE t.name = :name AND t.expires_at > %s AND t.id < :ticket`, tickets, now)
	live := fmt.Sprintf(`FROM %s h WHERE h.name = :name AND h.expires_at > %s`, holders, now)
	// The name's limit: its head row's (:limit before its first grant).
	limit := fmt.Sprintf(`COALESCE((SELECT s.lim FROM %s s WHERE s.name = :name), :limit)`, sems)
	s := dialect.FairSemaphoreSQL{
		First: dialect.Q(fmt.Sprintf(`SELECT NOT EXISTS (SELECT 1 FROM %[1]s t WHERE t.name = :name AND t.expires_at > %[3]s
    AND (:ticket = 0 OR t.id < :ticket))
  OR EXISTS (SELECT 1 FROM %[2]s h WHERE h.name = :name AND h.owner = :owner AND h.holds > 0 AND h.expires_at > %[3]s)`,
			tickets, holders, now)),
		Take: semaphoreTake(sems, holders, fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM %s t WHERE t.name = :name AND t.expires_at > %s
    AND (:ticket = 0 OR t.id < :ticket))`, tickets, now)),
		Consume: dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE id = :ticket`, tickets)),
		Enqueue: dialect.XID(fmt.Sprintf(`INSERT INTO %s (name, owner, waker, expires_at) VALUES (:name, :owner, :channel, %s + INTERVAL :ttl MICROSECOND)`,
			tickets, now)),
		Wait: dialect.Q(fmt.Sprintf(`SELECT IF(NOT EXISTS (SELECT 1 FROM %[1]s WHERE id = :ticket AND expires_at > %[2]s), -1,
  IF(NOT EXISTS (SELECT 1 %[4]s) AND (SELECT COUNT(*) %[3]s) < %[5]s, 0,
    COALESCE(TIMESTAMPDIFF(MICROSECOND, %[2]s, COALESCE((SELECT MIN(t.expires_at) %[4]s), (SELECT MIN(h.expires_at) %[3]s))), 0)))`,
			tickets, now, live, ahead, limit)),
		Dequeue: dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE id = :ticket`, tickets)),
		Renew: dialect.X(fmt.Sprintf(`UPDATE %s SET expires_at = %s + INTERVAL :ttl MICROSECOND
WHERE name IN (:names) AND (name, owner, id) IN (:leases)`, tickets, now)),
	}
	if !addressed {
		s.Chain = dialect.Q(fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %[1]s t WHERE t.name = :name AND t.expires_at > %[2]s)
  AND NOT EXISTS (SELECT 1 %[3]s)
  AND (:limit = 0 OR (SELECT COUNT(*) %[4]s) < %[5]s)`, tickets, now, ahead, live, limit))
		return s
	}
	s.Channel, s.Addressed, s.MarksStay = waker, true, true
	s.Marks = []dialect.SQL{
		// Its number is 1 when the head row exists (marked now or
		// before): LAST_INSERT_ID(expr) is evaluated for a matched row
		// whether or not it changes.
		dialect.XID(fmt.Sprintf(`UPDATE %s SET ticketed = 1 + 0 * LAST_INSERT_ID(1) WHERE name = :name`, sems)),
		dialect.X(fmt.Sprintf(`UPDATE %s SET ticketed = TRUE WHERE name = :name AND NOT ticketed`, holders)),
	}
	return s
}

// wakingSemaphoreSQL declares the statements of tickets that order the
// wake-ups of an unfair semaphore's waiters (Catalogue.WakingSemaphores):
// a grant to a ticket is the semaphore's acquire transaction, whatever
// tickets are live, deleting the ticket.
func wakingSemaphoreSQL(sems, holders, tickets, waker string) dialect.FairSemaphoreSQL {
	s := fairSemaphoreSQL(sems, holders, tickets, waker, true)
	s.First = dialect.SQL{}
	s.Take = semaphoreTake(sems, holders, "TRUE")
	return s
}

// reapSemaphoreTickets deletes a batch of up to limit expired tickets of
// the semaphores' queue on conn.
func (d *Dialect) reapSemaphoreTickets(ctx context.Context, conn *sql.Conn, limit int) (int, error) {
	return execCount(ctx, conn, d.reap.semTickets, limit)
}
