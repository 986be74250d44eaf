package mysql

import (
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// electionSQL are the statements of leader election on the lock table
// locks (dialect.LockSQL.Proclaim and Leader): a guarded write of a live
// lease's value, and the read of the live lease whose value was proclaimed
// for its token. The write also moves the expiry on by one microsecond, so
// that it changes the row whenever it matches and its affected-row count is
// 1 whether the DSN counts found or changed rows; a later expiry only
// delays a takeover, and the holder's trust window, counted from its own
// renewals, is unaffected.
func electionSQL(locks string) (proclaim, leader dialect.SQL) {
	proclaim = dialect.X(fmt.Sprintf(`UPDATE %[1]s SET value = :value, value_token = token, expires_at = expires_at + INTERVAL 1 MICROSECOND
WHERE name = :name AND owner = :owner AND token = :token AND holds > 0 AND expires_at > %[2]s`, locks, now))
	leader = dialect.Q(fmt.Sprintf(`SELECT owner, token, value, %[3]s, TIMESTAMPDIFF(MICROSECOND, %[2]s, expires_at)
FROM %[1]s WHERE name = :name AND holds > 0 AND expires_at > %[2]s AND value_token = token`, locks, now, micros("expires_at")))
	return proclaim, leader
}

// valuesSQL lists the values proclaimed for the tokens of the held leases
// of locks (dialect.LockSQL.Values).
func valuesSQL(locks string) dialect.SQL {
	return dialect.Q(fmt.Sprintf(`SELECT name, owner, token, value FROM %s WHERE holds > 0 AND value_token = token`, locks))
}

// lockValueSQL are the statements of the values holders keep on their
// locks (dialect.LockSQL.SetValue, Value and LockValues): election's, on
// columns of their own (lock_value, lock_value_token), so that a lock with
// a value is never taken for a leader. The write moves the expiry on by
// one microsecond, as Proclaim does.
func lockValueSQL(locks string) (set, value, list dialect.SQL) {
	set = dialect.X(fmt.Sprintf(`UPDATE %[1]s SET lock_value = :value, lock_value_token = token, expires_at = expires_at + INTERVAL 1 MICROSECOND
WHERE name = :name AND owner = :owner AND token = :token AND holds > 0 AND expires_at > %[2]s`, locks, now))
	value = dialect.Q(fmt.Sprintf(`SELECT name, owner, token, holds, %[3]s, %[4]s, TIMESTAMPDIFF(MICROSECOND, %[2]s, expires_at),
  IF(lock_value_token = token, lock_value, NULL)
FROM %[1]s WHERE name = :name AND expires_at > %[2]s`, locks, now, micros("acquired_at"), micros("expires_at")))
	list = dialect.Q(fmt.Sprintf(`SELECT name, owner, token, lock_value FROM %s WHERE holds > 0 AND lock_value_token = token`, locks))
	return set, value, list
}
