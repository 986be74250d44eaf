package postgres

import (
	"fmt"
	"strings"

	"github.com/sqllock/sqllock/dialect"
)

// FIFO queues of semaphores (sqllock.SemaphoreOptions.Fair). A
// name's permits go to its live tickets one at a time, in ticket order.
// Whatever lets the oldest live ticket be granted (a release that frees a
// permit, the oldest ticket given up while a permit is free, a grant that
// leaves a permit free) notifies the waker of that ticket alone, so that
// a hand-off wakes one waiter however many wait, and permits freed
// together are handed on one grant after another.
//
// A statement sees only what committed before it began. Two releases and
// the grant the first one wakes can each miss the others: the second
// release wakes the ticket being granted (still queued as it sees it),
// and the grant, not seeing the second release, finds no permit free for
// the next ticket. So the wake-up of the next ticket (Chain) runs in a
// statement of its own once a grant to a ticket, a ticket given up, or a
// release that woke a ticket committed: the Chain of the last of them to
// commit sees them all (see dialect.FairSemaphoreSQL).

// freePermit is the condition that the live holders of the semaphore name
// (an SQL expression) leave a permit free.
func freePermit(sems, holders, name string) string {
	return fmt.Sprintf(`(SELECT count(*) FROM %[2]s h WHERE h.name = %[3]s AND h.expires_at > now())
    < (SELECT s.lim FROM %[1]s s WHERE s.name = %[3]s)`, sems, holders, name)
}

// wakeOldest notifies the waker of the oldest live ticket of name (an SQL
// expression) with an id above after, if cond holds; it selects the
// ticket's id.
func wakeOldest(tickets, name, after, cond string) string {
	return fmt.Sprintf(`SELECT q.id, pg_notify(q.waker, chr(1) || 'sqllock-ticket:' || q.id) FROM (
    SELECT t.waker, t.id FROM %[1]s t WHERE %[4]s AND t.name = %[2]s AND t.expires_at > now() AND t.id > %[3]s
    ORDER BY t.id LIMIT 1) q`, tickets, name, after, cond)
}

// literal quotes s as an SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// semaphoreChain wakes the process of :name's oldest live ticket if a
// permit is free, and selects the number of tickets it woke: run once the
// change it follows committed.
func semaphoreChain(sems, holders, tickets string) dialect.SQL {
	return dialect.Q(fmt.Sprintf(`SELECT count(*) FROM (%s) w`,
		wakeOldest(tickets, ":name", "0", freePermit(sems, holders, ":name"))))
}

// semaphoreTicketSQL declares the statements a semaphore's tickets have
// whatever their grant. Ticket ids are drawn from the lock tickets'
// identity (see the migration), named by pg_get_serial_sequence.
func semaphoreTicketSQL(sems, holders, tickets, lockTickets, waker string) dialect.FairSemaphoreSQL {
	return dialect.FairSemaphoreSQL{
		Channel:   waker,
		Addressed: true,
		Chain:     semaphoreChain(sems, holders, tickets),
		Enqueue: dialect.Q(fmt.Sprintf(`INSERT INTO %s (id, name, owner, waker, expires_at)
VALUES (nextval(pg_get_serial_sequence(%s, 'id')), :name, :owner, :channel, %s)
RETURNING id`, tickets, literal(lockTickets), ttl)),
		Wait: semaphoreWait(sems, holders, tickets, ""),
		// Chain follows.
		Dequeue: dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE id = :ticket::bigint`, tickets)),
		Renew: dialect.X(fmt.Sprintf(`UPDATE %s SET expires_at = %s
WHERE name IN (:names) AND (name, owner, id) IN (:leases)`, tickets, ttl)),
	}
}

// semaphoreWait is the Wait of a semaphore's ticket. With marks, the
// statement first sets the waiters' mark of the name's head row (marks is
// its column) and answers 0 when it set it.
func semaphoreWait(sems, holders, tickets, marks string) dialect.SQL {
	ahead := fmt.Sprintf(`FROM %s t WHERE t.name = :name AND t.expires_at > now() AND t.id < :ticket::bigint`, tickets)
	hint, hinted := "", ""
	if marks != "" {
		hint = fmt.Sprintf("WITH hint AS (\n  UPDATE %[1]s SET %[2]s = true WHERE name = :name AND NOT %[2]s RETURNING 1\n)\n", sems, marks)
		hinted = "WHEN EXISTS (SELECT 1 FROM hint) THEN 0\n"
	}
	return dialect.Q(fmt.Sprintf(`%[4]sSELECT CASE WHEN NOT EXISTS (SELECT 1 FROM %[1]s WHERE id = :ticket::bigint AND expires_at > now()) THEN -1
%[5]sWHEN NOT EXISTS (SELECT 1 %[3]s)
  AND (SELECT count(*) FROM %[2]s h WHERE h.name = :name AND h.expires_at > now())
    < coalesce((SELECT s.lim FROM %[6]s s WHERE s.name = :name), :limit::bigint) THEN 0
ELSE coalesce(
  (SELECT (extract(epoch FROM min(t.expires_at) - now()) * 1000000)::bigint %[3]s),
  (SELECT (extract(epoch FROM min(h.expires_at) - now()) * 1000000)::bigint FROM %[2]s h
   WHERE h.name = :name AND h.expires_at > now()),
  0) END`, tickets, holders, ahead, hint, hinted, sems))
}

// fairSemaphoreSQL declares the statements of the semaphores' queue.
func fairSemaphoreSQL(sems, holders, seq, tickets, lockTickets, waker, durable string) dialect.FairSemaphoreSQL {
	s := semaphoreTicketSQL(sems, holders, tickets, lockTickets, waker)
	// The semaphore's grant, refusing a new permit while a live ticket
	// comes first, and deleting the ticket it grants.
	s.Grant = semaphoreGrant(sems, holders, seq, durable, fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM %s t
    WHERE t.name = :name AND t.expires_at > now() AND (:ticket::bigint = 0 OR t.id < :ticket::bigint))`, tickets),
		usedTicket(tickets))
	// The semaphore's release (semaphoreRelease's statement), which also
	// wakes the oldest live ticket's process when it frees a permit, and
	// then selects 2.
	s.Release = dialect.Q(fmt.Sprintf(`WITH r AS (
  UPDATE %[1]s SET holds = holds - 1, expires_at = %[3]s
  WHERE name = :name AND owner = :owner AND token = :token AND holds > 0 AND %[4]s
  RETURNING name, holds = 0 AND expires_at <= now() AS freed
)
SELECT count(*) + count(w.id) FROM r LEFT JOIN LATERAL (%[5]s) w ON true LEFT JOIN LATERAL (
  SELECT pg_notify(:channel, r.name) FROM %[2]s s WHERE s.name = r.name AND s.waiters AND r.freed
) n ON true`, holders, sems, releasedExpiry, durable, wakeOldest(tickets, "r.name", "0", "r.freed")))
	return s
}

// wakingSemaphoreSQL declares the statements of tickets that order the
// wake-ups of an unfair semaphore's waiters (Catalogue.WakingSemaphores):
// the grant is the semaphore's, whatever tickets are live, deleting the
// ticket it grants; a waiter's first Wait marks the name's head row
// (ticketed), so that releases report it (see semaphoreRelease), and
// answers 0: a release that committed before the mark woke nobody.
func wakingSemaphoreSQL(sems, holders, seq, tickets, lockTickets, waker, durable string) dialect.FairSemaphoreSQL {
	s := semaphoreTicketSQL(sems, holders, tickets, lockTickets, waker)
	s.Grant = semaphoreGrant(sems, holders, seq, durable, "true", usedTicket(tickets))
	s.Wait = semaphoreWait(sems, holders, tickets, "ticketed")
	return s
}

// usedTicket is the CTE of a grant that deletes the ticket granted.
func usedTicket(tickets string) string {
	return fmt.Sprintf(`, used AS (
  DELETE FROM %s WHERE id = :ticket::bigint AND EXISTS (SELECT 1 FROM ins)
)`, tickets)
}
