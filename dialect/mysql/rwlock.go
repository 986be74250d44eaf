package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// leftUntil is the microseconds from now to the time in col, 0 if past.
func leftUntil(col string) string {
	return `GREATEST(TIMESTAMPDIFF(MICROSECOND, ` + now + `, ` + col + `), 0)`
}

// rwLockSQL declares the read/write lock statements on the heads and
// holders tables. Tokens are counted per name in the head row; like the
// lock table's, a token is at least the grant's time in microseconds (see
// clockToken).
func rwLockSQL(heads, holders string) dialect.RWLockSQL {
	s := dialect.RWLockSQL{LeaseSQL: leaseSQL(holders, "token"), Announces: true}
	s.Head = dialect.X(fmt.Sprintf(`INSERT INTO %s (name) VALUES (:name) ON DUPLICATE KEY UPDATE name = name`, heads))
	s.LockHead = dialect.Q(fmt.Sprintf(`SELECT intent_owner, %s, waiters FROM %s WHERE name = :name FOR UPDATE`,
		leftUntil("intent_expires_at"), heads))
	s.Holders = dialect.Q(fmt.Sprintf(`SELECT owner, shared, upgradeable, token, holds, %s FROM %s WHERE name = :name FOR UPDATE`,
		leftUntil("expires_at"), holders))
	s.Readers = dialect.Q(fmt.Sprintf(`SELECT name, owner, token FROM %s WHERE shared`, holders))
	s.Purge = dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE name = :name AND (holds = 0 OR expires_at <= %s)`, holders, now))
	s.NextToken = dialect.XID(fmt.Sprintf(`UPDATE %s SET token = LAST_INSERT_ID(%s) WHERE name = :name`,
		heads, clockToken("token", now)))
	// The head row, locked by the transaction, gives its waiters hint.
	insert := `INSERT INTO %[1]s (name, owner, shared, upgradeable, token, holds, acquired_at, expires_at, waiters)
SELECT :name, :owner, %[3]s, %[4]s, :token, 1, t.now, t.now + INTERVAL :ttl MICROSECOND, h.waiters
FROM (SELECT ` + now + ` AS now) t JOIN %[2]s h ON h.name = :name`
	s.InsertShared = dialect.X(fmt.Sprintf(insert, holders, heads, "TRUE", "FALSE"))
	s.InsertUpgradeable = dialect.X(fmt.Sprintf(insert, holders, heads, "TRUE", "TRUE"))
	s.InsertExclusive = dialect.X(fmt.Sprintf(insert, holders, heads, "FALSE", "FALSE"))
	s.Upgrade = dialect.X(fmt.Sprintf(`UPDATE %s SET shared = FALSE, upgradeable = FALSE
WHERE name = :name AND owner = :owner AND token = :token`, holders))
	// The write lease becomes a read lease in place: no instant without
	// it. The row's waiters hint (the head's, as of the grant, as for a
	// release) travels back in LAST_INSERT_ID(expr): 2 when the name is
	// waited for, so that the runner rings. The assignment of holds to
	// itself only carries it; shared changes, so the row counts as
	// changed whether the DSN counts found or changed rows.
	s.Downgrade = dialect.XID(fmt.Sprintf(`UPDATE %s SET shared = TRUE, upgradeable = FALSE,
  holds = holds + 0 * LAST_INSERT_ID(IF(waiters, 2, 1))
WHERE name = :name AND owner = :owner AND token = :token AND NOT shared AND holds > 0 AND expires_at > %s`, holders, now))
	s.Reenter = dialect.X(fmt.Sprintf(`UPDATE %s SET holds = holds + 1,
  expires_at = GREATEST(expires_at, %s + INTERVAL :ttl MICROSECOND)
WHERE name = :name AND owner = :owner AND token = :token`, holders, now))
	s.Intent = dialect.X(fmt.Sprintf(`UPDATE %s SET intent_owner = :owner, intent_expires_at = %s + INTERVAL :ttl MICROSECOND,
  waiters = TRUE WHERE name = :name`, heads, now))
	s.MarkWaiters = dialect.X(fmt.Sprintf(`UPDATE %s SET waiters = TRUE WHERE name = :name`, heads))
	s.ClearIntent = dialect.X(fmt.Sprintf(`UPDATE %s SET intent_owner = '', intent_expires_at = %s
WHERE name = :name AND intent_owner = :owner`, heads, released))
	// The assignment of waiters to itself carries the result in
	// LAST_INSERT_ID(expr), for a matched row only: 2 when the name is
	// waited for.
	s.Withdraw = dialect.XID(fmt.Sprintf(`UPDATE %s SET intent_owner = '', intent_expires_at = %s,
  waiters = waiters + 0 * LAST_INSERT_ID(IF(waiters, 2, 1))
WHERE name = :name AND intent_owner = :owner`, heads, released))
	return s
}

// rwSQL declares the read/write lock statements in cat, and compiles the
// reaper's.
func (d *Dialect) rwSQL(c *sqlrun.Compiler, cat *dialect.Catalogue) {
	heads, holders := "sqllock_rwlock_heads", "sqllock_rwlock_holders"
	sqlrun.Qualify(d.database, quote, &heads, &holders)
	s := rwLockSQL(heads, holders)
	s.TxOptions = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	cat.RWLocks = &s
	d.reap.rwExpired = c.Compile(dialect.Q(fmt.Sprintf(`SELECT name, owner FROM %s WHERE expires_at <= %s
ORDER BY expires_at LIMIT :limit FOR UPDATE SKIP LOCKED`, holders, now)))
	d.reap.rwDelete = fmt.Sprintf(`DELETE FROM %s WHERE name = ? AND owner = ?`, holders)
}

// reapRW deletes a batch of released and expired holder rows of the
// read/write locks (see reapHolders).
func (d *Dialect) reapRW(ctx context.Context, conn *sql.Conn, limit int) (int, error) {
	return reapHolders(ctx, conn, &d.reap.rwExpired, d.reap.rwDelete, limit)
}
