package postgres

import (
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// left is the microseconds from now to the time in col, 0 if past.
func left(col string) string {
	return `(extract(epoch FROM greatest(` + col + `, now()) - now()) * 1000000)::bigint`
}

// rwLockSQL declares the read/write lock statements on the heads and
// holders tables. Tokens are counted per name in the head row, and carry
// the timeline in their high bits (see epoch.go): a name's next token is
// one more than its last, or the current timeline's first.
func rwLockSQL(heads, holders, channel, durable string) dialect.RWLockSQL {
	s := dialect.RWLockSQL{LeaseSQL: leaseSQL(holders, "token", durable), Announces: true}
	s.Channel = channel
	// The last release of a name someone waited for announces it.
	s.Release = dialect.Q(fmt.Sprintf(`WITH r AS (
  UPDATE %[2]s SET holds = holds - 1, expires_at = %[3]s
  WHERE name = :name AND owner = :owner AND token = :token AND holds > 0 AND %[4]s
  RETURNING name, holds = 0 AND expires_at <= now() AS last
)
SELECT count(*) FROM r LEFT JOIN LATERAL (
  SELECT pg_notify(:channel, r.name) WHERE r.last AND EXISTS (SELECT 1 FROM %[1]s h WHERE h.name = r.name AND h.waiters)
) n ON true`, heads, holders, releasedExpiry, durable))
	s.Head = dialect.X(fmt.Sprintf(`INSERT INTO %s (name) VALUES (:name) ON CONFLICT (name) DO NOTHING`, heads))
	s.LockHead = dialect.Q(fmt.Sprintf(`SELECT intent_owner, %[2]s, waiters FROM %[1]s WHERE name = :name AND %[3]s FOR UPDATE`,
		heads, left("intent_expires_at"), durable))
	s.Holders = dialect.Q(fmt.Sprintf(`SELECT owner, shared, upgradeable, token, holds, %[2]s FROM %[1]s
WHERE name = :name FOR UPDATE`, holders, left("expires_at")))
	s.Readers = dialect.Q(fmt.Sprintf(`SELECT name, owner, token FROM %s WHERE shared`, holders))
	s.Purge = dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE name = :name AND (holds = 0 OR expires_at <= now())`, holders))
	s.NextToken = dialect.Q(fmt.Sprintf(`UPDATE %s SET token = greatest(token, (SELECT %s)) + 1 WHERE name = :name RETURNING token`, heads, epoch))
	insert := `INSERT INTO %s (name, owner, shared, token, holds, acquired_at, expires_at)
VALUES (:name, :owner, %s, :token, 1, now(), ` + ttl + `)`
	s.InsertShared = dialect.X(fmt.Sprintf(insert, holders, "true"))
	s.InsertExclusive = dialect.X(fmt.Sprintf(insert, holders, "false"))
	s.InsertUpgradeable = dialect.X(fmt.Sprintf(`INSERT INTO %s (name, owner, shared, upgradeable, token, holds, acquired_at, expires_at)
VALUES (:name, :owner, true, true, :token, 1, now(), `+ttl+`)`, holders))
	s.Upgrade = dialect.X(fmt.Sprintf(`UPDATE %s SET shared = false, upgradeable = false
WHERE name = :name AND owner = :owner AND token = :token`, holders))
	// The write lease becomes a read lease in place: no instant without
	// it. Readers waiting for the name are announced, as by a release.
	s.Downgrade = dialect.Q(fmt.Sprintf(`WITH d AS (
  UPDATE %[2]s SET shared = true, upgradeable = false
  WHERE name = :name AND owner = :owner AND token = :token AND NOT shared AND holds > 0 AND expires_at > now()
    AND %[3]s AND %[4]s
  RETURNING name, EXISTS (SELECT 1 FROM %[1]s h WHERE h.name = :name AND h.waiters) AS waited
)
SELECT CASE WHEN d.waited THEN 2 ELSE 1 END FROM d LEFT JOIN LATERAL (
  SELECT pg_notify(:channel, d.name) WHERE d.waited
) n ON true`, heads, holders, onTimeline("token"), durable))
	s.Reenter = dialect.X(fmt.Sprintf(`UPDATE %s SET holds = holds + 1, expires_at = greatest(expires_at, %s)
WHERE name = :name AND owner = :owner AND token = :token`, holders, ttl))
	s.Intent = dialect.X(fmt.Sprintf(`UPDATE %s SET intent_owner = :owner, intent_expires_at = %s, waiters = true WHERE name = :name`, heads, ttl))
	s.MarkWaiters = dialect.X(fmt.Sprintf(`UPDATE %s SET waiters = true WHERE name = :name`, heads))
	s.ClearIntent = dialect.X(fmt.Sprintf(`UPDATE %s SET intent_owner = '', intent_expires_at = '-infinity'
WHERE name = :name AND intent_owner = :owner`, heads))
	s.Withdraw = dialect.Q(fmt.Sprintf(`WITH w AS (
  UPDATE %s SET intent_owner = '', intent_expires_at = '-infinity'
  WHERE name = :name AND intent_owner = :owner
  RETURNING name, waiters
)
SELECT count(*) FROM w LEFT JOIN LATERAL (SELECT pg_notify(:channel, w.name) WHERE w.waiters) n ON true`, heads))
	return s
}

// reapRWSQL deletes a batch of released and expired holder rows, skipping
// rows locked by a grant or a guarded transaction. Tokens are counted in
// the head rows, which are kept.
func reapRWSQL(holders string) dialect.SQL {
	return dialect.X(fmt.Sprintf(`DELETE FROM %[1]s WHERE (name, owner) IN (
  SELECT name, owner FROM %[1]s WHERE expires_at <= now() ORDER BY expires_at LIMIT :limit FOR UPDATE SKIP LOCKED
) AND expires_at <= now()`, holders))
}

// rwSQL declares the read/write lock statements in cat, and compiles the
// reaper's.
func (d *Dialect) rwSQL(c *sqlrun.Compiler, cat *dialect.Catalogue) {
	heads, holders := "sqllock_rwlock_heads", "sqllock_rwlock_holders"
	sqlrun.Qualify(d.schema, quote, &heads, &holders)
	s := rwLockSQL(heads, holders, d.channel, durable(d.syncCommit))
	s.TxOptions = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	cat.RWLocks = &s
	d.reap.rw = c.Compile(reapRWSQL(holders))
}
