package sqlite

import (
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// rwLockSQL declares the read/write lock statements. A grant is a
// transaction under SQLite's write lock, so grants take turns with every
// other write to the database. Tokens are counted per name in the head
// row, which is kept. A release that drops a hold, and a withdrawn intent
// of a name waited for, ring the wake-ups (wake.go), as the lock table's
// releases do: the readers of other processes are let in when a writer
// leaves, not at their next poll.
func rwLockSQL() dialect.RWLockSQL {
	const heads, holders = "sqllock_rwlock_heads", "sqllock_rwlock_holders"
	s := dialect.RWLockSQL{LeaseSQL: leaseSQL(holders, "token", true), Announces: true}
	s.Head = dialect.X(`INSERT INTO ` + heads + ` (name) VALUES (:name) ON CONFLICT (name) DO NOTHING`)
	s.LockHead = dialect.Q(fmt.Sprintf(`SELECT intent_owner, max(intent_expires_at - %s, 0), waiters FROM %s WHERE name = :name`, now, heads))
	s.Holders = dialect.Q(fmt.Sprintf(`SELECT owner, shared, upgradeable, token, holds, max(expires_at - %s, 0) FROM %s WHERE name = :name`, now, holders))
	s.Readers = dialect.Q(fmt.Sprintf(`SELECT name, owner, token FROM %s WHERE shared`, holders))
	s.Purge = dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE name = :name AND (holds = 0 OR expires_at <= %s)`, holders, now))
	s.NextToken = dialect.Q(`UPDATE ` + heads + ` SET token = token + 1 WHERE name = :name RETURNING token`)
	insert := `INSERT INTO %s (name, owner, shared, upgradeable, token, holds, acquired_at, expires_at)
VALUES (:name, :owner, %d, %d, :token, 1, ` + now + `, ` + now + ` + :ttl)`
	s.InsertShared = dialect.X(fmt.Sprintf(insert, holders, 1, 0))
	s.InsertUpgradeable = dialect.X(fmt.Sprintf(insert, holders, 1, 1))
	s.InsertExclusive = dialect.X(fmt.Sprintf(insert, holders, 0, 0))
	s.Upgrade = dialect.X(`UPDATE ` + holders + ` SET shared = 0, upgradeable = 0 WHERE name = :name AND owner = :owner AND token = :token`)
	// The write lease becomes a read lease in place: no instant without
	// it. Its number is 2 when the name is waited for, so that the runner
	// rings, letting the readers of other processes in.
	s.Downgrade = dialect.Q(fmt.Sprintf(`UPDATE %s SET shared = 1, upgradeable = 0
WHERE name = :name AND owner = :owner AND token = :token AND NOT shared AND holds > 0 AND expires_at > %s
RETURNING CASE WHEN (SELECT waiters FROM %s WHERE name = :name) THEN 2 ELSE 1 END`, holders, now, heads))
	s.Reenter = dialect.X(fmt.Sprintf(`UPDATE %s SET holds = holds + 1, expires_at = max(expires_at, %s + :ttl)
WHERE name = :name AND owner = :owner AND token = :token`, holders, now))
	s.Intent = dialect.X(fmt.Sprintf(`UPDATE %s SET intent_owner = :owner, intent_expires_at = %s + :ttl, waiters = 1 WHERE name = :name`, heads, now))
	s.MarkWaiters = dialect.X(`UPDATE ` + heads + ` SET waiters = 1 WHERE name = :name`)
	clear := `UPDATE ` + heads + ` SET intent_owner = '', intent_expires_at = ` + released + ` WHERE name = :name AND intent_owner = :owner`
	s.ClearIntent = dialect.X(clear)
	// A withdrawn intent lets readers in: its number is 2 when the name is
	// waited for, so that the runner rings (see Catalogue).
	s.Withdraw = dialect.Q(clear + ` RETURNING CASE WHEN waiters THEN 2 ELSE 1 END`)
	return s
}

// reapRWSQL deletes a batch of released and expired holder rows of the
// read/write locks. Tokens are counted in the head rows, which are kept.
func reapRWSQL() dialect.SQL {
	return dialect.X(fmt.Sprintf(`DELETE FROM sqllock_rwlock_holders WHERE (name, owner) IN (
  SELECT name, owner FROM sqllock_rwlock_holders WHERE expires_at <= %s ORDER BY expires_at LIMIT :limit
)`, now))
}
