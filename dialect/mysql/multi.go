package mysql

import (
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// multiTx are the options of a lock set's transaction, in which each name's
// Acquire locks its row until the transaction ends: callers take names in
// the same order, so they do not wait for each other in a cycle (a
// deadlock InnoDB still reports, through a gap lock, wraps
// dialect.ErrTransient: the transaction was rolled back, and may be run
// again). READ COMMITTED takes no gap locks where REPEATABLE READ would,
// which keeps transactions that insert neighbouring new names apart.
var multiTx = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// releaseAllSQL is the lock sets' release (dialect.LockSQL.ReleaseAll):
// it drops one hold of each lease of :leases (:names lists their names, in
// the same order) in one statement, as the lock table's Release does for
// one. MySQL's UPDATE returns no rows, so the statement reports through its
// insert id, LAST_INSERT_ID(expr) evaluated for each row it changes (after
// holds and expires_at, as MySQL assigns left to right), in the bits that
// sqlrun.LockTable.ReleaseAll reads: bit i, the i-th lease was released;
// bit 16+i, the release freed a row marked as waited for, by waiters with
// tickets or without (at once, not within a minimum hold); bits from 32 on,
// the call's nonce (:token).
func releaseAllSQL(locks string) dialect.SQL {
	return dialect.XID(fmt.Sprintf(`UPDATE %[1]s SET holds = holds - 1, expires_at = %[2]s,
  token = token + 0 * LAST_INSERT_ID(
    IF(LAST_INSERT_ID() >> 32 = :token, LAST_INSERT_ID(), :token << 32)
    | (1 << (FIELD(name, :names) - 1))
    | IF(holds = 0 AND (waiters OR ticketed) AND expires_at = %[3]s, 1 << (15 + FIELD(name, :names)), 0))
WHERE name IN (:names) AND (name, owner, token) IN (:leases) AND holds > 0`, locks, releasedExpiry, released))
}
