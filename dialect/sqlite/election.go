package sqlite

// The statements of leader election (dialect.LockSQL.Proclaim and Leader):
// a guarded write of a live lease's value, with its token, into the value
// table (one statement: it writes only if the lease is live; a Campaign is
// the lock table's Acquire and this in one transaction), and the read of
// the live lease whose value was proclaimed for its token.
const (
	proclaimSQL = `INSERT INTO sqllock_lock_values (name, token, value)
SELECT name, token, :value FROM sqllock_locks
WHERE name = :name AND owner = :owner AND token = :token AND holds > 0 AND expires_at > ` + now + `
ON CONFLICT (name) DO UPDATE SET token = excluded.token, value = excluded.value`
	leaderSQL = `SELECT l.owner, l.token, v.value, l.expires_at, l.expires_at - ` + now + `
FROM sqllock_locks l JOIN sqllock_lock_values v ON v.name = l.name AND v.token = l.token
WHERE l.name = :name AND l.holds > 0 AND l.expires_at > ` + now
	valuesSQL = `SELECT l.name, l.owner, l.token, v.value
FROM sqllock_locks l JOIN sqllock_lock_values v ON v.name = l.name AND v.token = l.token WHERE l.holds > 0`
)

// The statements of the values holders keep on their locks
// (dialect.LockSQL.SetValue, Value and LockValues): election's, on a table
// of their own, so that a lock with a value is never taken for a leader.
const (
	setValueSQL = `INSERT INTO sqllock_lock_holder_values (name, token, value)
SELECT name, token, :value FROM sqllock_locks
WHERE name = :name AND owner = :owner AND token = :token AND holds > 0 AND expires_at > ` + now + `
ON CONFLICT (name) DO UPDATE SET token = excluded.token, value = excluded.value`
	valueSQL = `SELECT l.name, l.owner, l.token, l.holds, l.acquired_at, l.expires_at, l.expires_at - ` + now + `, v.value
FROM sqllock_locks l LEFT JOIN sqllock_lock_holder_values v ON v.name = l.name AND v.token = l.token
WHERE l.name = :name AND l.expires_at > ` + now
	lockValuesSQL = `SELECT l.name, l.owner, l.token, v.value
FROM sqllock_locks l JOIN sqllock_lock_holder_values v ON v.name = l.name AND v.token = l.token WHERE l.holds > 0`
)
