package postgres

import (
	"context"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// semaphoreSQL declares the semaphore tables' statements. An acquire is
// one statement (see semaphoreGrant). Tokens come from a sequence, with
// the timeline in their high bits (see epoch.go); a holder of an earlier
// timeline counts as ended. Releases of names someone waited for are
// announced with NOTIFY, on the channel of the lock table; the releases of
// names whose waiters hold tickets report it, and Wake wakes the oldest
// live ticket's process when a permit is free.
func semaphoreSQL(sems, holders, seq, tickets, channel, durable string) dialect.SemaphoreSQL {
	s := dialect.SemaphoreSQL{LeaseSQL: leaseSQL(holders, "token", durable), Announces: true}
	s.Channel = channel
	s.Grant = semaphoreGrant(sems, holders, seq, durable, "true", "")
	// The first ask of a waiter sets the hint and answers 0: a release
	// that committed before the hint did announced nothing, so the
	// waiter looks again at once; later releases are announced. So does
	// a free permit (the holder rows of ended leases stay until a grant
	// or the reaper deletes them).
	s.Limits = dialect.Q(fmt.Sprintf(`SELECT name, lim FROM %s`, sems))
	s.Remaining = dialect.Q(fmt.Sprintf(`WITH hint AS (
  UPDATE %[1]s SET waiters = true WHERE name = :name AND NOT waiters RETURNING 1
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM hint) THEN 0
  WHEN count(*) FILTER (WHERE h.expires_at > now()) < (SELECT s.lim FROM %[1]s s WHERE s.name = :name) THEN 0
  ELSE (extract(epoch FROM min(h.expires_at) FILTER (WHERE h.expires_at > now()) - now()) * 1000000)::bigint END
FROM %[2]s h WHERE h.name = :name HAVING count(*) > 0`, sems, holders))
	s.Release = semaphoreRelease(sems, holders, durable)
	s.Wake = semaphoreChain(sems, holders, tickets)
	// A SetLimit writes the head row, so that a grant whose snapshot
	// predates it runs again (see semaphoreGrant); it announces itself as
	// a release would, to the name's waiters (waiters) and, through Wake,
	// to its oldest live ticket.
	s.SetLimit = dialect.Q(fmt.Sprintf(`WITH s AS (
  INSERT INTO %[1]s AS x (name, lim, lim_fixed) VALUES (:name, :limit::integer, true)
  ON CONFLICT (name) DO UPDATE SET lim = EXCLUDED.lim, lim_fixed = true
  RETURNING name, waiters
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM %[2]s t WHERE t.name = :name AND t.expires_at > now()) THEN 3 ELSE 1 END
FROM s LEFT JOIN LATERAL (SELECT pg_notify(:channel, s.name) WHERE s.waiters) n ON true
WHERE %[3]s`, sems, tickets, durable))
	s.Available = dialect.Q(fmt.Sprintf(`SELECT s.lim,
  (SELECT count(*) FROM %[2]s h WHERE h.name = :name AND h.expires_at > now() AND %[3]s), s.lim_fixed
FROM %[1]s s WHERE s.name = :name`, sems, holders, onTimeline("h.token")))
	return s
}

// semaphoreGrant is the acquire of a permit in one statement, under the
// further condition free on a new permit, and with the data-modifying
// CTEs more, which may read the CTE ins (the new permit's row).
//
// Its CTEs read the statement's snapshot, taken before it locks anything:
// the holder rows (h) and the head row (s) as they were when it began.
// From them it decides (v): re-enter the owner's live permit, grant a new
// one, or refuse. The limit is the head row's, or :limit for a name
// without one, or whose limit was never set (lim_fixed) and that has no
// live holder; a new permit's upsert of the head row stores it. A refusal, and a re-entry, hold under that snapshot: a
// grant or a release committed since is ordered after the statement. A
// new permit is granted only if no grant (and no SetLimit) of the name
// committed since the snapshot: every grant writes the head row, and the statement's
// upsert of the head row (head) writes it only if its version (xmin) is
// still the one in the snapshot; it then holds the row's lock until it
// commits, so that the grants of a name take turns. Otherwise the
// statement selects -1, and the caller runs it again, on a snapshot
// that sees that grant. The token is drawn after the head row's lock,
// so it exceeds every token granted on the name before.
//
// A grant also deletes the holder rows of ended leases of the name (gone)
// but its own owner's, whose row it takes over (ins).
func semaphoreGrant(sems, holders, seq, durable, free, more string) dialect.SQL {
	live := fmt.Sprintf(`expires_at > now() AND %s`, onTimeline("token"))
	return dialect.Q(fmt.Sprintf(`WITH h AS (
  SELECT owner, holds, %[5]s AS live FROM %[2]s WHERE name = :name
), s AS (
  SELECT xmin AS version, lim, lim_fixed FROM %[1]s WHERE name = :name
), c AS (
  SELECT (SELECT count(*) FROM h WHERE h.live) AS n,
    EXISTS (SELECT 1 FROM h WHERE h.owner = :owner AND h.live) AS mine
), v AS (
  SELECT c.n, c.mine,
    CASE WHEN s.lim IS NULL OR (c.n = 0 AND NOT s.lim_fixed) THEN :limit::integer ELSE s.lim END AS lim
  FROM c LEFT JOIN s ON true
), head AS (
  INSERT INTO %[1]s AS x (name, lim)
  SELECT :name, v.lim FROM v
  WHERE NOT v.mine AND v.n < v.lim AND %[8]s
  ON CONFLICT (name) DO UPDATE SET lim = EXCLUDED.lim WHERE x.xmin = (SELECT s.version FROM s)
  RETURNING name
), gone AS (
  DELETE FROM %[2]s WHERE name = (SELECT name FROM head) AND owner <> :owner AND NOT (%[5]s)
), ins AS (
  INSERT INTO %[2]s AS y (name, owner, token, holds, acquired_at, expires_at)
  SELECT head.name, :owner, %[4]s + nextval('%[3]s'), 1, now(), %[6]s FROM head
  ON CONFLICT (name, owner) DO UPDATE SET token = EXCLUDED.token, holds = 1,
    acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
  RETURNING token
), re AS (
  UPDATE %[2]s SET holds = holds + 1, expires_at = greatest(expires_at, %[6]s)
  WHERE name = :name AND owner = :owner AND holds > 0 AND %[5]s AND (SELECT v.mine FROM v)
  RETURNING token
)%[9]s
SELECT CASE WHEN v.mine THEN coalesce((SELECT token FROM re), 0)
    WHEN EXISTS (SELECT 1 FROM ins) THEN (SELECT token FROM ins)
    WHEN v.n < v.lim AND %[8]s THEN -1
    ELSE 0 END,
  v.lim
FROM v WHERE %[7]s`, sems, holders, seq, epoch, live, ttl, durable, free, more))
}

// semaphoreRelease is the release of a permit, which announces a freed
// permit of a name someone waited for on :channel, and selects 3 when it
// freed a permit of a name whose waiters hold tickets (ticketed), 1 when
// it released otherwise.
func semaphoreRelease(sems, holders, durable string) dialect.SQL {
	return dialect.Q(fmt.Sprintf(`WITH r AS (
  UPDATE %[1]s SET holds = holds - 1, expires_at = %[3]s
  WHERE name = :name AND owner = :owner AND token = :token AND holds > 0 AND %[4]s
  RETURNING name, holds = 0 AND expires_at <= now() AS freed
)
SELECT count(*) + 2 * count(*) FILTER (WHERE k.ticketed) FROM r
LEFT JOIN LATERAL (SELECT s.waiters, s.ticketed FROM %[2]s s WHERE s.name = r.name AND r.freed) k ON true
LEFT JOIN LATERAL (SELECT pg_notify(:channel, r.name) WHERE k.waiters) n ON true`, holders, sems, releasedExpiry, durable))
}

// reapSemaphoresSQL deletes a batch of expired and released holder rows.
// Tokens come from a sequence: deleting rows sets none back.
func reapSemaphoresSQL(holders string) dialect.SQL {
	return dialect.X(fmt.Sprintf(`DELETE FROM %[1]s WHERE (name, owner) IN (
  SELECT name, owner FROM %[1]s WHERE expires_at <= now() ORDER BY expires_at LIMIT :limit FOR UPDATE SKIP LOCKED
) AND expires_at <= now()`, holders))
}

// semaphoreSQLs declares the semaphore statements in cat, and compiles the
// reaper's.
func (d *Dialect) semaphoreSQLs(c *sqlrun.Compiler, cat *dialect.Catalogue) {
	sems, holders, seq := "sqllock_semaphores", "sqllock_semaphore_holders", "sqllock_semaphore_token_seq"
	tickets, lockTickets := "sqllock_semaphore_tickets", "sqllock_tickets"
	sqlrun.Qualify(d.schema, quote, &sems, &holders, &seq, &tickets, &lockTickets)
	durable := durable(d.syncCommit)
	cat.Semaphores = ptr(semaphoreSQL(sems, holders, seq, tickets, d.channel, durable))
	cat.FairSemaphores = ptr(fairSemaphoreSQL(sems, holders, seq, tickets, lockTickets, d.waker, durable))
	cat.WakingSemaphores = ptr(wakingSemaphoreSQL(sems, holders, seq, tickets, lockTickets, d.waker, durable))
	d.reapSems = c.Compile(reapSemaphoresSQL(holders))
	d.reapSemTickets = c.Compile(reapTicketsSQL(tickets))
}

// reapSemaphores deletes a batch of the semaphore holders' expired rows,
// and one of the expired tickets of their queues.
func (d *Dialect) reapSemaphores(ctx context.Context, p *sqlrun.Params) (int64, error) {
	n, err := d.run.Int(ctx, &d.reapSems, p)
	if err != nil {
		return n, err
	}
	m, err := d.run.Int(ctx, &d.reapSemTickets, p)
	return n + m, err
}
