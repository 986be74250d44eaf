package sqlite

import (
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// semaphoreSQL declares the semaphore tables' statements. An acquire is
// one transaction whose first statement writes the name's head row: from
// then on it holds SQLite's write lock, so grants of every name take turns.
// A token is the name's previous token plus one, kept in the head row,
// which is never deleted.
func semaphoreSQL() dialect.SemaphoreSQL {
	const sems, holders = "sqllock_semaphores", "sqllock_semaphore_holders"
	s := dialect.SemaphoreSQL{LeaseSQL: leaseSQL(holders, "token", false)}
	// Draw also gives a name whose limit was never set, and that has no
	// live holder, the grant's limit; Take counts against the head row's.
	s.Draw = dialect.Q(fmt.Sprintf(`INSERT INTO %[1]s (name, lim, token) VALUES (:name, :limit, 1)
ON CONFLICT (name) DO UPDATE SET token = token + 1,
  lim = CASE WHEN lim_fixed OR EXISTS (SELECT 1 FROM %[2]s h WHERE h.name = :name AND h.expires_at > %[3]s)
    THEN lim ELSE excluded.lim END
RETURNING token`, sems, holders, now))
	s.Expire = dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE name = :name AND expires_at <= %s`, holders, now))
	s.Take = semaphoreTake("true")
	// SetLimit takes SQLite's write lock, which a grant in progress holds
	// until it commits. As an Exec it wakes whoever waits.
	s.SetLimit = dialect.X(fmt.Sprintf(`INSERT INTO %s (name, lim, token, lim_fixed) VALUES (:name, :limit, 0, 1)
ON CONFLICT (name) DO UPDATE SET lim = excluded.lim, lim_fixed = 1`, sems))
	s.Available = dialect.Q(fmt.Sprintf(`SELECT s.lim, (SELECT count(*) FROM %s h WHERE h.name = :name AND h.expires_at > %s), s.lim_fixed
FROM %s s WHERE s.name = :name`, holders, now, sems))
	// A free permit (a holder row of an ended lease stays until the next
	// grant or the reaper deletes it) means: look again at once.
	s.Limits = dialect.Q(fmt.Sprintf(`SELECT name, lim FROM %s`, sems))
	s.Remaining = dialect.Q(fmt.Sprintf(`SELECT CASE WHEN count(*) < (SELECT s.lim FROM %[3]s s WHERE s.name = :name) THEN 0
  ELSE min(expires_at) - %[1]s END
FROM %[2]s WHERE name = :name AND expires_at > %[1]s HAVING count(*) > 0`, now, holders, sems))
	return s
}

// semaphoreTake is the grant of a permit in the acquire's transaction,
// with the further condition free on a new permit, counting against the
// head row's limit (which Draw set). It returns the token
// granted: :token for a new row, or for the owner's row of an ended lease,
// which it takes over; the row's own token for a re-entry; no row when
// the owner's row is released but kept by a minimum hold.
func semaphoreTake(free string) dialect.SQL {
	return dialect.Q(fmt.Sprintf(`INSERT INTO sqllock_semaphore_holders AS x (name, owner, token, holds, acquired_at, expires_at)
SELECT :name, :owner, :token, 1, t.at, t.at + :ttl
FROM (SELECT %[1]s AS at) AS t JOIN sqllock_semaphores s ON s.name = :name
WHERE (
  (%[2]s AND (SELECT count(*) FROM sqllock_semaphore_holders h WHERE h.name = :name AND h.expires_at > t.at) < s.lim)
  OR EXISTS (SELECT 1 FROM sqllock_semaphore_holders h WHERE h.name = :name AND h.owner = :owner AND h.holds > 0 AND h.expires_at > t.at))
ON CONFLICT (name, owner) DO UPDATE SET
  token       = CASE WHEN x.expires_at <= excluded.acquired_at THEN excluded.token ELSE x.token END,
  holds       = CASE WHEN x.expires_at <= excluded.acquired_at THEN 1 ELSE x.holds + 1 END,
  acquired_at = CASE WHEN x.expires_at <= excluded.acquired_at THEN excluded.acquired_at ELSE x.acquired_at END,
  expires_at  = CASE WHEN x.expires_at <= excluded.acquired_at THEN excluded.expires_at
                ELSE max(x.expires_at, excluded.expires_at) END
WHERE x.expires_at <= excluded.acquired_at OR x.holds > 0
RETURNING token`, now, free))
}

// reapSemaphoresSQL deletes a batch of expired and released holder rows.
// Tokens are kept in the head rows, which stay.
func reapSemaphoresSQL() dialect.SQL {
	return dialect.X(fmt.Sprintf(`DELETE FROM sqllock_semaphore_holders WHERE (name, owner) IN (
  SELECT name, owner FROM sqllock_semaphore_holders WHERE expires_at <= %s ORDER BY expires_at LIMIT :limit
)`, now))
}
