package sqlite

import (
	"context"

	"github.com/sqllock/sqllock/dialect"
)

// elections is the catalogue's Elections.
type elections struct{ *Dialect }

var _ dialect.Elections = elections{}

// The statements of leader election: a guarded write of a live lease's
// value, with its token, into the value table (one statement: it writes
// only if the lease is live; the lock table's Proclaim), and the read of
// the live lease whose value was proclaimed for its token.
const (
	proclaimSQL = `INSERT INTO sqllock_lock_values (name, token, value)
SELECT name, token, :value FROM sqllock_locks
WHERE name = :name AND owner = :owner AND token = :token AND holds > 0 AND expires_at > ` + now + `
ON CONFLICT (name) DO UPDATE SET token = excluded.token, value = excluded.value`
	leaderSQL = `SELECT l.owner, l.token, v.value, l.expires_at, l.expires_at - ` + now + `
FROM sqllock_locks l JOIN sqllock_lock_values v ON v.name = l.name AND v.token = l.token
WHERE l.name = ? AND l.holds > 0 AND l.expires_at > ` + now
)

// Campaign implements dialect.Elections: the lock table's acquire that
// also stores the value.
func (d elections) Campaign(ctx context.Context, p dialect.AcquireParams, value string) (int64, error) {
	return d.locks.Campaign(ctx, p, value)
}

// Proclaim implements dialect.Elections.
func (d elections) Proclaim(ctx context.Context, l dialect.Lease, value string) (bool, error) {
	return d.locks.Proclaim(ctx, l, value)
}

// Leader implements dialect.Elections.
func (d elections) Leader(ctx context.Context, name string) (dialect.LeaderInfo, bool, error) {
	return d.run.Leader(ctx, name, leaderSQL, name)
}
