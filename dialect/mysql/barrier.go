package mysql

import (
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// barrierSQL declares the barrier tables' statements. Times are read on
// the clock no session setting moves (now). Renew always changes the
// expiry and Leave the leaving flag, so that rows changed is rows matched
// whatever clientFoundRows says. Joins and leaves are not announced:
// waiters poll with a bounded backoff (see package barrier).
func barrierSQL(barriers, members string) dialect.BarrierSQL {
	expiry := now + ` + INTERVAL :ttl MICROSECOND`
	return dialect.BarrierSQL{
		// Every entry writes the head row (entries), so that on a Galera
		// cluster, where FOR UPDATE locks the row on the local node only,
		// entries through different nodes conflict at certification (one
		// fails with a deadlock error, ErrTransient, and is run again)
		// rather than both commit.
		Head:     dialect.X(fmt.Sprintf(`INSERT INTO %s (name, size, filled) VALUES (:name, :limit, FALSE) ON DUPLICATE KEY UPDATE entries = entries + 1`, barriers)),
		LockHead: dialect.Q(fmt.Sprintf(`SELECT size, filled FROM %s WHERE name = :name FOR UPDATE`, barriers)),
		Members: dialect.Q(fmt.Sprintf(`SELECT COALESCE(SUM(NOT m.leaving AND m.expires_at > t.at), 0),
  COALESCE(SUM(NOT m.leaving AND m.expires_at <= t.at), 0),
  COALESCE(SUM(m.leaving AND m.expires_at > t.at), 0),
  COALESCE(SUM(m.owner = :owner AND m.expires_at > t.at), 0),
  COALESCE((SELECT filled FROM %s WHERE name = :name), FALSE)
FROM (SELECT %s AS at) t JOIN %s m ON m.name = :name`, barriers, now, members)),
		Expire: dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE name = :name AND expires_at <= %s`, members, now)),
		Resize: dialect.X(fmt.Sprintf(`UPDATE %s SET size = :limit, filled = FALSE WHERE name = :name`, barriers)),
		Join: dialect.X(fmt.Sprintf(`INSERT INTO %s (name, owner, leaving, expires_at) VALUES (:name, :owner, FALSE, %s)
ON DUPLICATE KEY UPDATE leaving = FALSE, expires_at = VALUES(expires_at)`, members, expiry)),
		Fill:  dialect.X(fmt.Sprintf(`UPDATE %s SET filled = TRUE WHERE name = :name`, barriers)),
		Renew: dialect.X(fmt.Sprintf(`UPDATE %s SET expires_at = %s WHERE name = :name AND owner = :owner AND expires_at > %s`, members, expiry, now)),
		Leave: dialect.X(fmt.Sprintf(`UPDATE %s SET leaving = TRUE WHERE name = :name AND owner = :owner AND NOT leaving AND expires_at > %s`, members, now)),
		Quit:  dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE name = :name AND owner = :owner`, members)),
		// Each statement after LockHead reads what the members before it
		// committed.
		TxOptions: &sql.TxOptions{Isolation: sql.LevelReadCommitted},
	}
}

// barrierSQLs declares the barrier statements in cat.
func (d *Dialect) barrierSQLs(cat *dialect.Catalogue) {
	barriers, members := "sqllock_barriers", "sqllock_barrier_members"
	sqlrun.Qualify(d.database, quote, &barriers, &members)
	cat.Barriers = ptr(barrierSQL(barriers, members))
}
