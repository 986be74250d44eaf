package sqlite

import (
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// barrierSQL declares the barrier tables' statements. Enter's transaction
// begins IMMEDIATE (see Open): it holds SQLite's write lock from its
// first statement, so the members of every name enter one at a time.
// Joins and leaves are not announced: waiters poll with a bounded backoff
// (see package barrier).
func barrierSQL() dialect.BarrierSQL {
	const barriers, members = "sqllock_barriers", "sqllock_barrier_members"
	return dialect.BarrierSQL{
		Head:     dialect.X(`INSERT INTO ` + barriers + ` (name, size, filled) VALUES (:name, :limit, 0) ON CONFLICT (name) DO NOTHING`),
		LockHead: dialect.Q(`SELECT size, filled FROM ` + barriers + ` WHERE name = :name`),
		Members: dialect.Q(fmt.Sprintf(`SELECT COALESCE(SUM(NOT m.leaving AND m.expires_at > t.at), 0),
  COALESCE(SUM(NOT m.leaving AND m.expires_at <= t.at), 0),
  COALESCE(SUM(m.leaving AND m.expires_at > t.at), 0),
  COALESCE(SUM(m.owner = :owner AND m.expires_at > t.at), 0),
  COALESCE((SELECT filled FROM %s WHERE name = :name), 0)
FROM (SELECT %s AS at) t JOIN %s m ON m.name = :name`, barriers, now, members)),
		Expire: dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE name = :name AND expires_at <= %s`, members, now)),
		Resize: dialect.X(`UPDATE ` + barriers + ` SET size = :limit, filled = 0 WHERE name = :name`),
		Join: dialect.X(fmt.Sprintf(`INSERT INTO %s (name, owner, leaving, expires_at) VALUES (:name, :owner, 0, %s + :ttl)
ON CONFLICT (name, owner) DO UPDATE SET leaving = 0, expires_at = excluded.expires_at`, members, now)),
		Fill:  dialect.X(`UPDATE ` + barriers + ` SET filled = 1 WHERE name = :name`),
		Renew: dialect.X(fmt.Sprintf(`UPDATE %s SET expires_at = %s + :ttl WHERE name = :name AND owner = :owner AND expires_at > %[2]s`, members, now)),
		Leave: dialect.X(fmt.Sprintf(`UPDATE %s SET leaving = 1 WHERE name = :name AND owner = :owner AND expires_at > %s`, members, now)),
		Quit:  dialect.X(`DELETE FROM ` + members + ` WHERE name = :name AND owner = :owner`),
	}
}
