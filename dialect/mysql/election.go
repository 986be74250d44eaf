package mysql

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
// locks: a guarded write of a live lease's value, and the read of the live
// lease whose value was proclaimed for its token. The write also moves the
// expiry on by one microsecond, so that it changes the row whenever it
// matches and its affected-row count is 1 whether the DSN counts found or
// changed rows; a later expiry only delays a takeover, and the holder's
// trust window, counted from its own renewals, is unaffected.
func electionSQL(locks string) (proclaim, leader string) {
	proclaim = fmt.Sprintf(`UPDATE %[1]s SET value = ?, value_token = token, expires_at = expires_at + INTERVAL 1 MICROSECOND
WHERE name = ? AND owner = ? AND token = ? AND holds > 0 AND expires_at > %[2]s`, locks, now)
	leader = fmt.Sprintf(`SELECT owner, token, value, %[3]s, TIMESTAMPDIFF(MICROSECOND, %[2]s, expires_at)
FROM %[1]s WHERE name = ? AND holds > 0 AND expires_at > %[2]s AND value_token = token`, locks, now, micros("expires_at"))
	return proclaim, leader
}

func (d *Dialect) electionSQL(ctx context.Context) (proclaim, leader string, err error) {
	if err := d.check(ctx); err != nil {
		return "", "", err
	}
	locks := "sqllock_locks"
	sqlrun.Qualify(d.database, quote, &locks)
	proclaim, leader = electionSQL(locks)
	return proclaim, leader, nil
}

// Campaign implements dialect.Elections: the lock table's acquire that
// also stores the value.
func (d elections) Campaign(ctx context.Context, p dialect.AcquireParams, value string) (int64, error) {
	return d.locks.Campaign(ctx, p, value)
}

// Proclaim implements dialect.Elections.
func (d elections) Proclaim(ctx context.Context, l dialect.Lease, value string) (bool, error) {
	text, _, err := d.electionSQL(ctx)
	if err != nil {
		return false, err
	}
	return d.run.Proclaim(ctx, text, []byte(value), l.Name, l.Owner, l.Token)
}

// Leader implements dialect.Elections.
func (d elections) Leader(ctx context.Context, name string) (dialect.LeaderInfo, bool, error) {
	_, text, err := d.electionSQL(ctx)
	if err != nil {
		return dialect.LeaderInfo{}, false, err
	}
	return d.run.Leader(ctx, name, text, name)
}
