package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/internal/sqlrun"
)

// semaphoreSQL declares the semaphore tables' statements. An acquire is
// one READ COMMITTED transaction: its first statement locks the name's head
// row, and each later statement reads what the grants before it committed.
// Tokens come from a sequence, with the timeline in their high bits (see
// epoch.go); a holder of an earlier timeline is dropped like an expired
// one. Releases of names someone waited for are announced with NOTIFY, on
// the channel of the lock table.
func semaphoreSQL(sems, holders, seq, channel, durable string) sqlrun.SemaphoreSQL {
	s := sqlrun.SemaphoreSQL{LeaseSQL: leaseSQL(holders, "token", durable), Isolation: sql.LevelReadCommitted, Announces: true}
	s.Channel = channel
	s.Head = []sqlrun.SQL{sqlrun.Q(fmt.Sprintf(`INSERT INTO %[1]s AS s (name, lim) SELECT :name, :limit WHERE %[2]s
ON CONFLICT (name) DO UPDATE SET lim = s.lim
RETURNING lim`, sems, durable))}
	s.Expire = sqlrun.X(fmt.Sprintf(`DELETE FROM %s WHERE name = :name AND (expires_at <= now() OR NOT %s)`, holders, onTimeline("token")))
	s.Mine = sqlrun.Q(fmt.Sprintf(`SELECT holds, token FROM %s WHERE name = :name AND owner = :owner`, holders))
	s.Reenter = sqlrun.X(fmt.Sprintf(`UPDATE %s SET holds = holds + 1, expires_at = greatest(expires_at, %s)
WHERE name = :name AND owner = :owner`, holders, ttl))
	s.Count = sqlrun.Q(fmt.Sprintf(`SELECT count(*) FROM %s WHERE name = :name`, holders))
	s.SetLimit = sqlrun.X(fmt.Sprintf(`UPDATE %s SET lim = :limit WHERE name = :name`, sems))
	s.Token = sqlrun.Q(fmt.Sprintf(`SELECT %s + nextval('%s')`, epoch, seq))
	s.Insert = sqlrun.X(fmt.Sprintf(`INSERT INTO %s (name, owner, token, holds, acquired_at, expires_at)
VALUES (:name, :owner, :token, 1, now(), %s)`, holders, ttl))
	// The first ask of a waiter sets the hint and answers 0: a release
	// that committed before the hint did announced nothing, so the
	// waiter looks again at once; later releases are announced.
	s.Remaining = sqlrun.Q(fmt.Sprintf(`WITH hint AS (
  UPDATE %[1]s SET waiters = true WHERE name = :name AND NOT waiters RETURNING 1
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM hint) THEN 0
  WHEN min(expires_at) <= now() THEN 0 -- a permit is free (a released row is at -infinity)
  ELSE (extract(epoch FROM min(expires_at) - now()) * 1000000)::bigint END
FROM %[2]s WHERE name = :name HAVING count(*) > 0`, sems, holders))
	s.Release = semaphoreRelease(sems, holders, durable, "")
	return s
}

// semaphoreRelease is the release of a permit, which announces a freed
// permit of a name someone waited for on :channel, and also does the
// lateral join more, if any, on r (the released row: name, freed).
func semaphoreRelease(sems, holders, durable, more string) sqlrun.SQL {
	return sqlrun.Q(fmt.Sprintf(`WITH r AS (
  UPDATE %[1]s SET holds = holds - 1, expires_at = %[3]s
  WHERE name = :name AND owner = :owner AND token = :token AND holds > 0 AND %[4]s
  RETURNING name, holds = 0 AND expires_at <= now() AS freed
)
SELECT count(*) FROM r %[5]s LEFT JOIN LATERAL (
  SELECT pg_notify(:channel, r.name) FROM %[2]s s WHERE s.name = r.name AND s.waiters AND r.freed
) n ON true`, holders, sems, releasedExpiry, durable, more))
}

// reapSemaphoresSQL deletes a batch of expired and released holder rows.
// Tokens come from a sequence: deleting rows sets none back.
func reapSemaphoresSQL(holders string) sqlrun.SQL {
	return sqlrun.X(fmt.Sprintf(`DELETE FROM %[1]s WHERE (name, owner) IN (
  SELECT name, owner FROM %[1]s WHERE expires_at <= now() ORDER BY expires_at LIMIT :limit FOR UPDATE SKIP LOCKED
) AND expires_at <= now()`, holders))
}

// semaphoreTables compiles the semaphore statements.
func (d *Dialect) semaphoreTables(c *sqlrun.Compiler) {
	sems, holders, seq := "sqllock_semaphores", "sqllock_semaphore_holders", "sqllock_semaphore_token_seq"
	tickets, lockTickets := "sqllock_semaphore_tickets", "sqllock_tickets"
	sqlrun.Qualify(d.schema, quote, &sems, &holders, &seq, &tickets, &lockTickets)
	d.sems = sqlrun.NewSemaphoreTable(d.run, c, semaphoreSQL(sems, holders, seq, d.channel, durable(d.syncCommit)))
	d.fairSems = sqlrun.NewFairSemaphoreTable(d.sems, c,
		fairSemaphoreSQL(sems, holders, tickets, lockTickets, d.waker, durable(d.syncCommit)))
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
