package sqlite

import (
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// releaseAllSQL is the lock sets' release (dialect.LockSQL.ReleaseAll): it
// drops one hold of each lease of :leases in one statement, as the lock
// table's Release does for one, and selects the name of each lease it
// released with Release's number: 2 when that freed the row at once, which
// rings the wake-ups. A lock set's Acquire statements run in one
// transaction whose first statement takes SQLite's write lock (a pool from
// Open begins every transaction IMMEDIATE), which the transaction keeps
// until it ends, so no other writer sees part of the set.
func releaseAllSQL() dialect.SQL {
	return dialect.Q(fmt.Sprintf(`UPDATE sqllock_locks SET holds = holds - 1, expires_at = %s
WHERE name IN (:names) AND (name, owner, token) IN (:leases) AND holds > 0
RETURNING name, CASE WHEN holds = 0 AND expires_at = %s THEN 2 ELSE 1 END`, releasedExpiry, released))
}
