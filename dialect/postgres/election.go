package postgres

import (
	"context"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// elections is the catalogue's Elections.
type elections struct{ *Dialect }

var _ dialect.Elections = elections{}

// electionSQL are the statements of leader election on the lock table
// locks: a guarded write of a live lease's value (which, like a renewal,
// matches only a lease of the current timeline), and the read of the live
// lease whose value was proclaimed for its token.
func electionSQL(locks, durableCond string) (proclaim, leader string) {
	proclaim = fmt.Sprintf(`UPDATE %[1]s SET value = $4, value_token = token
WHERE name = $1 AND owner = $2 AND token = $3 AND holds > 0 AND expires_at > now() AND %[2]s AND %[3]s`,
		locks, onTimeline("token"), durableCond)
	leader = fmt.Sprintf(`SELECT owner, token, value, %[2]s, (extract(epoch FROM expires_at - now()) * 1000000)::bigint
FROM %[1]s WHERE name = $1 AND holds > 0 AND expires_at > now() AND value_token = token AND %[3]s`,
		locks, micros("expires_at"), onTimeline("token"))
	return proclaim, leader
}

func (d *Dialect) electionSQL() (proclaim, leader string) {
	locks := "sqllock_locks"
	sqlrun.Qualify(d.schema, quote, &locks)
	return electionSQL(locks, durable(d.syncCommit))
}

// Campaign implements dialect.Elections: the lock table's acquire that
// also stores the value.
func (d elections) Campaign(ctx context.Context, p dialect.AcquireParams, value string) (int64, error) {
	return d.locks.Campaign(ctx, p, value)
}

// Proclaim implements dialect.Elections.
func (d elections) Proclaim(ctx context.Context, l dialect.Lease, value string) (bool, error) {
	text, _ := d.electionSQL()
	return d.run.Proclaim(ctx, text, d.args(l.Name, l.Owner, l.Token, value)...)
}

// Leader implements dialect.Elections.
func (d elections) Leader(ctx context.Context, name string) (dialect.LeaderInfo, bool, error) {
	_, text := d.electionSQL()
	return d.run.Leader(ctx, name, text, d.args(name)...)
}
