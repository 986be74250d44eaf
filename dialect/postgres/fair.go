package postgres

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// Tickets: FIFO queues (sqllock.TableOptions.Fair), and the wake-up order of
// an unfair lock's waiters (Catalogue.Waking). A waiter's ticket records
// its process's waker: a NOTIFY channel of the dialect's own, on which the
// listening connection listens beside the dialect's channel. A release
// that frees a lock marked by a ticket's waiter (ticketed) reports it,
// and the releasing process notifies the waker of the oldest live ticket
// alone, with dialect.TicketWake of the ticket as payload (spelt out in
// the statements, and checked by the tests), so that one waiter of one
// process wakes per hand-off however many wait, in however many processes.

// newWaker returns a random channel name for a dialect's addressed
// wake-ups: nobody else listens on it.
func newWaker() string {
	b := make([]byte, 8)
	rand.Read(b) // never fails
	return "sqllock_w_" + hex.EncodeToString(b)
}

// liveTicketsAhead is the condition, on :name and :ticket (0: none), that
// some live ticket of the name comes before the caller: any, for a caller
// without a ticket.
func liveTicketsAhead(tickets string) string {
	return fmt.Sprintf(`EXISTS (SELECT 1 FROM %s t WHERE t.name = :name AND t.expires_at > now()
    AND (:ticket::bigint = 0 OR t.id < :ticket::bigint))`, tickets)
}

// wakeOldestTicket is the wake-up that follows a release reporting that
// it freed a row marked by waiters with tickets: it notifies the waker of
// :name's oldest live ticket.
func wakeOldestTicket(tickets string) dialect.SQL {
	return dialect.Q(fmt.Sprintf(`SELECT count(pg_notify(h.waker, chr(1) || 'sqllock-ticket:' || h.id)) FROM (
  SELECT t.waker, t.id FROM %s t WHERE t.name = :name AND t.expires_at > now() ORDER BY t.id LIMIT 1) h`, tickets))
}

// fairSQL declares the queue's statements: the grant is the lock table's
// Acquire (see lockSQL) under the queue's rule, with the ticket's deletion
// in the same statement. The rule is checked before the insert as well as
// in the conflict's update, and only a re-entry of the caller's live lease
// passes the first check with tickets ahead: a row that the reaper deletes
// while the statement runs makes the insert go ahead without a conflict.
// A new row is marked (ticketed) when other live tickets wait, as their
// waiters marked the row the reaper deleted.
func fairSQL(locks, seq, tickets, waker, durable string) dialect.FairSQL {
	ahead := liveTicketsAhead(tickets)
	s := ticketSQL(locks, tickets, waker)
	s.Grant = dialect.Q(fmt.Sprintf(`WITH g AS (
INSERT INTO %[1]s AS l (name, owner, token, holds, acquired_at, expires_at, ticketed)
SELECT :name, :owner, fence.epoch + nextval('%[2]s'), 1, now(), %[3]s,
  EXISTS (SELECT 1 FROM %[10]s t WHERE t.name = :name AND t.expires_at > now() AND t.id <> :ticket::bigint)
FROM (SELECT pg_advisory_xact_lock_shared(%[4]s), %[5]s AS epoch) AS fence WHERE %[8]s
  AND (NOT %[9]s OR EXISTS (SELECT 1 FROM %[1]s x
    WHERE x.name = :name AND x.owner = :owner AND x.holds > 0 AND x.expires_at > now()))
ON CONFLICT (name) DO UPDATE SET
  token       = CASE WHEN l.expires_at <= now() THEN %[6]s + nextval('%[2]s') ELSE l.token END,
  holds       = CASE WHEN l.expires_at <= now() THEN 1 ELSE l.holds + 1 END,
  acquired_at = CASE WHEN l.expires_at <= now() THEN now() ELSE l.acquired_at END,
  owner       = EXCLUDED.owner,
  expires_at  = EXCLUDED.expires_at
WHERE (l.expires_at <= now() AND NOT %[9]s)
   OR (l.owner = EXCLUDED.owner AND l.holds > 0 AND l.expires_at > now() AND %[7]s IN (0, %[6]s))
RETURNING token
), d AS (
  DELETE FROM %[10]s WHERE id = :ticket::bigint AND EXISTS (SELECT 1 FROM g)
)
SELECT token FROM g`, locks, seq, ttl, fence(":name"), epoch, epochOf("EXCLUDED.token"), epochOf("l.token"), durable,
		ahead, tickets))
	return s
}

// ticketSQL declares the statements a lock's tickets have whatever their
// grant: taking, waiting, giving up and renewing.
func ticketSQL(locks, tickets, waker string) dialect.FairSQL {
	return dialect.FairSQL{
		Channel: waker, Addressed: true,
		Waiting: dialect.Q(fmt.Sprintf(`SELECT name, count(*) FROM %s WHERE expires_at > now() GROUP BY name`, tickets)),
		Enqueue: dialect.Q(fmt.Sprintf(`INSERT INTO %s (name, owner, waker, expires_at) VALUES (:name, :owner, :channel, %s)
RETURNING id`, tickets, ttl)),
		// A waiter's every ask marks the lock's row (ticketed) before it
		// sleeps, so that a release from then on reports it and the oldest
		// ticket's process is woken (see lockSQL); a name without a row
		// gets a free one, marked, for the next grant to take over. The
		// mark stays until the row is reaped. The mark's upsert reads the
		// latest row, not the statement's snapshot: a release (or
		// takeover) that committed since the snapshot, unmarked, woke
		// nobody, so the wait is judged by the row as the mark left it —
		// free, and no live ticket ahead: look again at once (0). A free
		// lock with tickets ahead is theirs: the oldest of them is awake
		// or woken by the release that freed it (every ticket's waiter
		// marked the row before it slept), and its own release will wake
		// the next.
		Wait: dialect.Q(fmt.Sprintf(`WITH hint AS (
  INSERT INTO %[2]s AS l (name, owner, token, holds, acquired_at, expires_at, ticketed)
  VALUES (:name, '', 0, 0, now(), '-infinity', true)
  ON CONFLICT (name) DO UPDATE SET ticketed = true
  RETURNING l.expires_at
)
SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM %[1]s WHERE id = :ticket::bigint AND expires_at > now()) THEN -1
ELSE coalesce(
  (SELECT (extract(epoch FROM min(t.expires_at) - now()) * 1000000)::bigint FROM %[1]s t
   WHERE t.name = :name AND t.expires_at > now() AND t.id < :ticket::bigint),
  (SELECT (extract(epoch FROM h.expires_at - now()) * 1000000)::bigint FROM hint h WHERE h.expires_at > now()),
  0) END`, tickets, locks)),
		// The deleted ticket is still in the statement's snapshot: the
		// next one is the oldest live ticket after it.
		Dequeue: dialect.Q(fmt.Sprintf(`WITH d AS (DELETE FROM %[1]s WHERE id = :ticket::bigint RETURNING name, id)
SELECT count(*) FROM d LEFT JOIN LATERAL (
  SELECT pg_notify(h.waker, chr(1) || 'sqllock-ticket:' || h.id) FROM (
    SELECT n.waker, n.id FROM %[1]s n WHERE n.name = d.name AND n.expires_at > now() AND n.id > d.id
      AND NOT EXISTS (SELECT 1 FROM %[1]s a WHERE a.name = d.name AND a.expires_at > now() AND a.id < d.id)
      AND NOT EXISTS (SELECT 1 FROM %[2]s l WHERE l.name = d.name AND l.expires_at > now())
    ORDER BY n.id LIMIT 1) h
) w ON true`, tickets, locks)),
		Renew: dialect.X(fmt.Sprintf(`UPDATE %s SET expires_at = %s
WHERE name IN (:names) AND (name, owner, id) IN (:leases)`, tickets, ttl)),
	}
}

// wakingSQL declares the statements of tickets that order wake-ups alone
// (Catalogue.Waking): the grant is the lock table's Acquire, whatever
// tickets are live, with the ticket's deletion in the same statement.
func wakingSQL(locks, seq, tickets, waker, durable string) dialect.FairSQL {
	s := ticketSQL(locks, tickets, waker)
	s.Grant = dialect.Q(fmt.Sprintf(`WITH g AS (
%s
), d AS (
  DELETE FROM %s WHERE id = :ticket::bigint AND EXISTS (SELECT 1 FROM g)
)
SELECT token FROM g`, lockAcquire(locks, seq, durable, false).Text, tickets))
	return s
}

// reapTicketsSQL deletes a batch of expired tickets.
func reapTicketsSQL(tickets string) dialect.SQL {
	return dialect.X(fmt.Sprintf(`DELETE FROM %[1]s WHERE id = ANY(ARRAY(
  SELECT id FROM %[1]s WHERE expires_at <= now() ORDER BY expires_at LIMIT :limit FOR UPDATE SKIP LOCKED
))`, tickets))
}
