package postgres

import (
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// barrierSQL declares the barrier tables' statements. Times are read with
// clock_timestamp(), not now(): Enter's statements run in a transaction
// that may have waited for the head row's lock. The join that fills a
// barrier, and the leave of its last member, are announced with NOTIFY on
// the lock table's channel, as releases are, so that waiters wake at once
// (a NOTIFY in Enter's transaction is sent when it commits).
func barrierSQL(barriers, members, channel string) dialect.BarrierSQL {
	const clock = `clock_timestamp()`
	expiry := clock + ` + :ttl::bigint * interval '1 microsecond'`
	return dialect.BarrierSQL{
		Head:     dialect.X(fmt.Sprintf(`INSERT INTO %s (name, size, filled) VALUES (:name, :limit, false) ON CONFLICT (name) DO NOTHING`, barriers)),
		LockHead: dialect.Q(fmt.Sprintf(`SELECT size, filled FROM %s WHERE name = :name FOR UPDATE`, barriers)),
		Members: dialect.Q(fmt.Sprintf(`SELECT count(*) FILTER (WHERE NOT m.leaving AND m.expires_at > t.at),
  count(*) FILTER (WHERE NOT m.leaving AND m.expires_at <= t.at),
  count(*) FILTER (WHERE m.leaving AND m.expires_at > t.at),
  count(*) FILTER (WHERE m.owner = :owner AND m.expires_at > t.at),
  COALESCE((SELECT filled FROM %s WHERE name = :name), false)
FROM (SELECT %s AS at) t JOIN %s m ON m.name = :name`, barriers, clock, members)),
		Expire: dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE name = :name AND expires_at <= %s`, members, clock)),
		Resize: dialect.X(fmt.Sprintf(`UPDATE %s SET size = :limit, filled = false WHERE name = :name`, barriers)),
		Join: dialect.X(fmt.Sprintf(`INSERT INTO %s (name, owner, leaving, expires_at) VALUES (:name, :owner, false, %s)
ON CONFLICT (name, owner) DO UPDATE SET leaving = false, expires_at = EXCLUDED.expires_at`, members, expiry)),
		Fill:     dialect.X(fmt.Sprintf(`UPDATE %s SET filled = true WHERE name = :name`, barriers)),
		Renew:    dialect.X(fmt.Sprintf(`UPDATE %s SET expires_at = %s WHERE name = :name AND owner = :owner AND expires_at > %s`, members, expiry, clock)),
		Leave:    dialect.X(fmt.Sprintf(`UPDATE %s SET leaving = true WHERE name = :name AND owner = :owner AND expires_at > %s`, members, clock)),
		Quit:     dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE name = :name AND owner = :owner`, members)),
		Announce: dialect.Q(`SELECT count(pg_notify(:channel, :name))`),
		Channel:  channel,
		// Each statement after LockHead reads what the members before it
		// committed.
		TxOptions: &sql.TxOptions{Isolation: sql.LevelReadCommitted},
	}
}

// barrierSQLs declares the barrier statements in cat.
func (d *Dialect) barrierSQLs(cat *dialect.Catalogue) {
	barriers, members := "sqllock_barriers", "sqllock_barrier_members"
	sqlrun.Qualify(d.schema, quote, &barriers, &members)
	cat.Barriers = ptr(barrierSQL(barriers, members, d.channel))
}
