package sqlite

import (
	"fmt"

	"github.com/sqllock/sqllock/internal/sqlrun"
)

// semaphoreSQL declares the semaphore tables' statements. An acquire is
// one transaction whose first statement writes the name's head row: from
// then on it holds SQLite's write lock, so grants of every name take turns.
// A token is the name's previous token plus one, kept in the head row,
// which is never deleted.
func semaphoreSQL() sqlrun.SemaphoreSQL {
	const sems, holders = "sqllock_semaphores", "sqllock_semaphore_holders"
	s := sqlrun.SemaphoreSQL{LeaseSQL: leaseSQL(holders, "token", false)}
	s.Head = []sqlrun.SQL{sqlrun.Q(fmt.Sprintf(`INSERT INTO %s (name, lim, token) VALUES (:name, :limit, 0)
ON CONFLICT (name) DO UPDATE SET lim = lim
RETURNING lim`, sems))}
	s.Expire = sqlrun.X(fmt.Sprintf(`DELETE FROM %s WHERE name = :name AND expires_at <= %s`, holders, now))
	s.Mine = sqlrun.Q(fmt.Sprintf(`SELECT holds, token FROM %s WHERE name = :name AND owner = :owner`, holders))
	s.Reenter = sqlrun.X(fmt.Sprintf(`UPDATE %s SET holds = holds + 1, expires_at = max(expires_at, %s + :ttl)
WHERE name = :name AND owner = :owner`, holders, now))
	s.Count = sqlrun.Q(fmt.Sprintf(`SELECT count(*) FROM %s WHERE name = :name`, holders))
	s.SetLimit = sqlrun.X(fmt.Sprintf(`UPDATE %s SET lim = :limit WHERE name = :name`, sems))
	s.Token = sqlrun.Q(fmt.Sprintf(`UPDATE %s SET token = token + 1 WHERE name = :name RETURNING token`, sems))
	s.Insert = sqlrun.X(fmt.Sprintf(`INSERT INTO %s (name, owner, token, holds, acquired_at, expires_at)
VALUES (:name, :owner, :token, 1, %[2]s, %[2]s + :ttl)`, holders, now))
	s.Remaining = sqlrun.Q(fmt.Sprintf(`SELECT min(expires_at) - %s FROM %s WHERE name = :name HAVING count(*) > 0`, now, holders))
	return s
}

// reapSemaphoresSQL deletes a batch of expired and released holder rows.
// Tokens are kept in the head rows, which stay.
func reapSemaphoresSQL() sqlrun.SQL {
	return sqlrun.X(fmt.Sprintf(`DELETE FROM sqllock_semaphore_holders WHERE (name, owner) IN (
  SELECT name, owner FROM sqllock_semaphore_holders WHERE expires_at <= %s ORDER BY expires_at LIMIT :limit
)`, now))
}
