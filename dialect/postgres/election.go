package postgres

import (
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// electionSQL are the statements of leader election on the lock table
// locks (dialect.LockSQL.Proclaim and Leader): a guarded write of a live
// lease's value (which, like a renewal, matches only a lease of the
// current timeline), and the read of the live lease whose value was
// proclaimed for its token.
func electionSQL(locks, durableCond string) (proclaim, leader dialect.SQL) {
	proclaim = dialect.X(fmt.Sprintf(`UPDATE %[1]s SET value = :value::text, value_token = token
WHERE name = :name AND owner = :owner AND token = :token AND holds > 0 AND expires_at > now() AND %[2]s AND %[3]s`,
		locks, onTimeline("token"), durableCond))
	leader = dialect.Q(fmt.Sprintf(`SELECT owner, token, value, %[2]s, (extract(epoch FROM expires_at - now()) * 1000000)::bigint
FROM %[1]s WHERE name = :name AND holds > 0 AND expires_at > now() AND value_token = token AND %[3]s`,
		locks, micros("expires_at"), onTimeline("token")))
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
// a value is never taken for a leader.
func lockValueSQL(locks, durableCond string) (set, value, list dialect.SQL) {
	set = dialect.X(fmt.Sprintf(`UPDATE %[1]s SET lock_value = :value::text, lock_value_token = token
WHERE name = :name AND owner = :owner AND token = :token AND holds > 0 AND expires_at > now() AND %[2]s AND %[3]s`,
		locks, onTimeline("token"), durableCond))
	value = dialect.Q(fmt.Sprintf(`SELECT name, owner, token, holds, %[2]s, %[3]s,
  (extract(epoch FROM expires_at - now()) * 1000000)::bigint, CASE WHEN lock_value_token = token THEN lock_value END
FROM %[1]s WHERE name = :name AND expires_at > now()`, locks, micros("acquired_at"), micros("expires_at")))
	list = dialect.Q(fmt.Sprintf(`SELECT name, owner, token, lock_value FROM %s WHERE holds > 0 AND lock_value_token = token`, locks))
	return set, value, list
}
