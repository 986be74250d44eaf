package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// lockSets is the catalogue's Multi.
type lockSets struct{ *Dialect }

var _ dialect.MultiLockTable = lockSets{}

// releaseAllSQL drops one hold of each lease of :leases in one statement,
// as the lock table's Release does for one, and selects the name of each
// lease it released.
func releaseAllSQL() sqlrun.SQL {
	return sqlrun.Q(fmt.Sprintf(`UPDATE sqllock_locks SET holds = holds - 1, expires_at = %s
WHERE name IN (:names) AND (name, owner, token) IN (:leases) AND holds > 0
RETURNING name`, releasedExpiry))
}

// AcquireAll implements dialect.MultiLockTable: the lock table's Acquire
// statement for each name, in one transaction. Its first statement takes
// SQLite's write lock (a pool from Open begins every transaction
// IMMEDIATE), which the transaction keeps until it ends, so no other
// writer sees part of the set.
func (d lockSets) AcquireAll(ctx context.Context, p dialect.MultiAcquireParams) ([]int64, string, error) {
	return d.locks.AcquireAll(ctx, nil, p)
}

// ReleaseAll implements dialect.MultiLockTable, in one statement.
func (d lockSets) ReleaseAll(ctx context.Context, ls []dialect.Lease, minHold time.Duration) ([]bool, error) {
	return d.locks.ReleaseMany(ctx, &d.releaseAll, ls, minHold)
}
