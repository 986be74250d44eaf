package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// lockSets is the catalogue's Multi.
type lockSets struct{ *Dialect }

var _ dialect.MultiLockTable = lockSets{}

// releaseAllSQL drops one hold of each lease of :leases in one statement,
// as the lock table's Release does for one (announcing the names it frees
// that someone waits for), and selects the name of each lease it released,
// and whether the release freed a row marked by waiters with tickets (see
// lockSQL).
// The rows are locked first in the byte order of their names (COLLATE
// "C", whatever the column's collation), the order in which AcquireAll
// takes them, so that the release never waits for an acquisition in a
// cycle.
func releaseAllSQL(locks, durable string) sqlrun.SQL {
	return sqlrun.Q(fmt.Sprintf(`WITH k AS (
  SELECT name FROM %[1]s WHERE name IN (:names) AND (name, owner, token) IN (:leases) AND holds > 0
  ORDER BY name COLLATE "C" FOR UPDATE
), r AS (
  UPDATE %[1]s SET holds = holds - 1, expires_at = %[2]s
  WHERE name IN (SELECT name FROM k) AND (name, owner, token) IN (:leases) AND holds > 0 AND %[3]s
  RETURNING name, holds = 0 AND expires_at <= now() AS free, waiters, ticketed
)
SELECT r.name, r.free AND r.ticketed
FROM r LEFT JOIN LATERAL (SELECT pg_notify(:channel, r.name) WHERE r.free AND r.waiters) n ON true`,
		locks, releasedExpiry, durable))
}

// multiTx are the options of AcquireAll's transaction: each statement sees
// the rows committed before it, as in autocommit.
var multiTx = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// AcquireAll implements dialect.MultiLockTable: the lock table's Acquire
// statement for each name, in one READ COMMITTED transaction. Each
// statement takes its name's row lock (and fence) until the transaction
// ends; callers take names in the same order, so they never wait for each
// other in a cycle. Tokens are those of Acquire (the timeline in the high
// bits). Nothing outlives the transaction: it suits transaction poolers.
func (d lockSets) AcquireAll(ctx context.Context, p dialect.MultiAcquireParams) ([]int64, string, error) {
	return d.locks.AcquireAll(ctx, multiTx, p)
}

// ReleaseAll implements dialect.MultiLockTable, in one statement.
func (d lockSets) ReleaseAll(ctx context.Context, ls []dialect.Lease, minHold time.Duration) ([]bool, error) {
	return d.locks.ReleaseMany(ctx, &d.releaseAll, ls, minHold)
}
