package sqlite

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
// as the lock table's Release does for one, and selects the name of each
// lease it released, and whether that freed the row at once.
func releaseAllSQL() sqlrun.SQL {
	return sqlrun.Q(fmt.Sprintf(`UPDATE sqllock_locks SET holds = holds - 1, expires_at = %s
WHERE name IN (:names) AND (name, owner, token) IN (:leases) AND holds > 0
RETURNING name, holds = 0 AND expires_at = %s`, releasedExpiry, released))
}

// AcquireAll implements dialect.MultiLockTable: the lock table's Acquire
// statement for each name, in one transaction. Its first statement takes
// SQLite's write lock (a pool from Open begins every transaction
// IMMEDIATE), which the transaction keeps until it ends, so no other
// writer sees part of the set.
func (d lockSets) AcquireAll(ctx context.Context, p dialect.MultiAcquireParams) ([]int64, string, error) {
	return d.locks.AcquireAll(ctx, nil, p)
}

// ReleaseAll implements dialect.MultiLockTable, in one statement. The
// names it frees ring the wake-ups, as Release does.
func (d lockSets) ReleaseAll(ctx context.Context, ls []dialect.Lease, minHold time.Duration) ([]bool, error) {
	var freed []string
	got := make(map[string]bool, len(ls))
	err := d.run.Each(ctx, &d.releaseAll, &sqlrun.Params{Leases: ls, MinHold: minHold}, func(rows *sql.Rows) error {
		var (
			name []byte
			free bool
		)
		if err := rows.Scan(&name, &free); err != nil {
			return err
		}
		got[string(name)] = true
		if free {
			freed = append(freed, string(name))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, name := range freed {
		d.wake.ring(ctx, name)
	}
	out := make([]bool, len(ls))
	for i, l := range ls {
		out[i] = got[l.Name]
	}
	return out, nil
}
