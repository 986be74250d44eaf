package postgres

import (
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// releaseAllSQL is the lock sets' release (dialect.LockSQL.ReleaseAll): it
// drops one hold of each lease of :leases in one statement, as the lock
// table's Release does for one (announcing the names it frees that someone
// waits for), and selects the name of each lease it released with
// Release's number (3 when it freed a row marked by waiters with tickets,
// see lockSQL).
// The rows are locked first in the byte order of their names (COLLATE
// "C", whatever the column's collation), the order in which AcquireAll
// takes them, so that the release never waits for an acquisition in a
// cycle.
func releaseAllSQL(locks, durable string) dialect.SQL {
	return dialect.Q(fmt.Sprintf(`WITH k AS (
  SELECT name FROM %[1]s WHERE name IN (:names) AND (name, owner, token) IN (:leases) AND holds > 0
  ORDER BY name COLLATE "C" FOR UPDATE
), r AS (
  UPDATE %[1]s SET holds = holds - 1, expires_at = %[2]s
  WHERE name IN (SELECT name FROM k) AND (name, owner, token) IN (:leases) AND holds > 0 AND %[3]s
  RETURNING name, holds = 0 AND expires_at <= now() AS free, waiters, ticketed
)
SELECT r.name, CASE WHEN r.free AND r.ticketed THEN 3 ELSE 1 END
FROM r LEFT JOIN LATERAL (SELECT pg_notify(:channel, r.name) WHERE r.free AND r.waiters) n ON true`,
		locks, releasedExpiry, durable))
}

// multiTx are the options of a lock set's transaction, in which each name's
// Acquire takes its row lock (and fence) until the transaction ends:
// callers take names in the same order, so they never wait for each other
// in a cycle. READ COMMITTED: each statement sees the rows committed
// before it, as in autocommit. Nothing outlives the transaction: it suits
// transaction poolers.
var multiTx = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
