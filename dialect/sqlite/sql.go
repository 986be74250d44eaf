package sqlite

import (
	"context"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// The statements of the lock and version tables, declared once for both
// through leaseSQL; sqlrun binds their named parameters. Times are integer
// microseconds since the Unix epoch.

// now is the current time on the host's clock, in integer microseconds
// since the Unix epoch. SQLite reads the clock with millisecond resolution,
// once per statement execution, so every use within a statement agrees. No
// connection setting moves it: SQLite runs in the process, on the host's
// clock, the same for every process on the machine.
const now = `(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)`

// released is the expiry of a released row: before any real time.
const released = "0"

// releasedExpiry is the expiry a release gives the row: unchanged while
// other holds remain; else the end of the minimum hold if that is still
// ahead, or the released value (free at once).
const releasedExpiry = `CASE WHEN holds > 1 THEN expires_at
    WHEN acquired_at + :minhold > ` + now + ` THEN acquired_at + :minhold
    ELSE ` + released + ` END`

// leaseSQL declares the lease statements of table, whose token column is
// token. With rings, the runner rings the wake-ups (wake.go) after every
// release that dropped a hold: telling a freeing release apart would take
// a RETURNING clause, which costs every release more than the rare
// needless ring (after a re-entrant hold, or under a minimum hold) costs
// the waiters.
//
// The guard needs no FOR SHARE, which SQLite does not have: a takeover is a
// write, and SQLite lets one transaction at a time write to the database.
// The check reads the lease inside the caller's transaction, on the host's
// clock at that statement, and then:
//
//   - if the transaction holds the write lock (it was begun IMMEDIATE, as
//     every read-write transaction of a pool from Open is, or it wrote
//     before the check), no takeover can commit until it ends: the check
//     holds until Commit;
//   - if it only read so far (deferred BEGIN), a takeover may commit after
//     the check, but then the transaction's snapshot predates it, and its
//     first write fails with SQLITE_BUSY_SNAPSHOT instead of waiting: it
//     cannot commit a write made under a lease that was taken over
//     meanwhile.
//
// Either way a guarded transaction that writes commits only while the lease
// holds. One that never writes has nothing to commit; its reads come from
// one snapshot in which the lease was live. The transaction must belong to
// the same database file as the locks.
func leaseSQL(table, token string, rings bool) dialect.LeaseSQL {
	return dialect.LeaseSQL{
		RenewMany: renewMany(table, token, ""),
		Release: dialect.X(fmt.Sprintf(`UPDATE %[1]s SET holds = holds - 1, expires_at = %[3]s
WHERE name = :name AND owner = :owner AND %[2]s = :token AND holds > 0`, table, token, releasedExpiry)),
		RingsOnChange: rings,
		Guard: dialect.Q(fmt.Sprintf(`SELECT 1 FROM %[1]s
WHERE name = :name AND owner = :owner AND %[2]s = :token AND holds > 0 AND expires_at > %[3]s`, table, token, now)),
		List: dialect.Q(fmt.Sprintf(`SELECT name, owner, %[2]s, holds, acquired_at, expires_at, expires_at - %[3]s
FROM %[1]s WHERE holds > 0 OR expires_at > %[3]s ORDER BY name`, table, token, now)),
	}
}

// renewMany is LeaseSQL.RenewMany of table, whose token column is token,
// selecting extra after the renewed lease's name, owner and token.
func renewMany(table, token, extra string) dialect.SQL {
	return dialect.Q(fmt.Sprintf(`UPDATE %[1]s SET expires_at = %[3]s + :ttl
WHERE name IN (:names) AND (name, owner, %[2]s) IN (:leases) AND holds > 0 AND expires_at > %[3]s
RETURNING name, owner, %[2]s%[4]s`, table, token, now, extra))
}

// grantUpsert is the conflict clause of a grant on the lock table (l):
// the takeover of an expired or released row (a new token, one hold) or a
// re-entry (one more hold); the statement's WHERE says which may happen.
var grantUpsert = fmt.Sprintf(`ON CONFLICT (name) DO UPDATE SET
  token       = CASE WHEN l.expires_at <= %[1]s THEN l.token + 1 ELSE l.token END,
  holds       = CASE WHEN l.expires_at <= %[1]s THEN 1 ELSE l.holds + 1 END,
  acquired_at = CASE WHEN l.expires_at <= %[1]s THEN %[1]s ELSE l.acquired_at END,
  owner       = excluded.owner,
  expires_at  = excluded.expires_at`, now)

// lockSQL declares the lock table's statements. The acquire is one
// statement, under SQLite's write lock from start to end. A new row starts
// above the token floor; a takeover adds one to the row's token, which
// already exceeds every earlier token of the name. All SET expressions read
// the row as it was. The upsert returns no row when the WHERE refuses it:
// held by another owner.
func lockSQL() dialect.LockSQL {
	s := dialect.LockSQL{LeaseSQL: leaseSQL("sqllock_locks", "token", true)}
	s.Acquire = dialect.Q(fmt.Sprintf(`INSERT INTO sqllock_locks AS l (name, owner, token, holds, acquired_at, expires_at)
VALUES (:name, :owner, (SELECT token + 1 FROM sqllock_token_floor WHERE id = 1), 1, %[1]s, %[1]s + :ttl)
%[2]s
WHERE l.expires_at <= %[1]s OR (l.owner = excluded.owner AND l.holds > 0)
RETURNING token`, now, grantUpsert))
	// A campaign's value goes to the values' table in the grant's
	// transaction (see election.go).
	s.Proclaim, s.Leader, s.Values = dialect.X(proclaimSQL), dialect.Q(leaderSQL), dialect.Q(valuesSQL)
	s.SetValue, s.Value, s.LockValues = dialect.X(setValueSQL), dialect.Q(valueSQL), dialect.Q(lockValuesSQL)
	// A release request is kept for the token it was asked of, in a table
	// of its own (see migration 33), and renewals read it back.
	s.RequestRelease = dialect.X(`INSERT INTO sqllock_release_requests (name, token, reason)
SELECT name, token, :value FROM sqllock_locks WHERE name = :name AND holds > 0 AND expires_at > ` + now + `
ON CONFLICT (name) DO UPDATE SET token = excluded.token, reason = excluded.reason`)
	s.RenewMany = renewMany("sqllock_locks", "token", `,
  (SELECT r.reason FROM sqllock_release_requests r WHERE r.name = sqllock_locks.name AND r.token = sqllock_locks.token)`)
	s.ReleaseAll = releaseAllSQL()
	s.Remaining = dialect.Q(fmt.Sprintf(`SELECT max(expires_at - %s, 0) FROM sqllock_locks WHERE name = :name`, now))
	s.Holder = dialect.Q(fmt.Sprintf(`SELECT name, owner, token, holds, acquired_at, expires_at, expires_at - %[1]s
FROM sqllock_locks WHERE name = :name AND expires_at > %[1]s`, now))
	// A broken lease frees the row at once: 2 rings the wake-ups.
	s.Break = dialect.Q(fmt.Sprintf(`UPDATE sqllock_locks SET holds = 0, expires_at = %s
WHERE name = :name AND owner = :owner AND token = :token AND expires_at > %s
RETURNING 2`, released, now))
	return s
}

// versionSQL declares the version table's statements.
func versionSQL() dialect.VersionSQL {
	const versions = "sqllock_versions"
	return dialect.VersionSQL{
		LeaseSQL: leaseSQL(versions, "version", true),
		Read: dialect.Q(fmt.Sprintf(`SELECT version, owner, holds, expires_at > %[2]s, max(expires_at - %[2]s, 0)
FROM %[1]s WHERE name = :name`, versions, now)),
		// A new row starts above the version floor, which the trigger of
		// migration 6 raises with every deletion; the statement runs under
		// SQLite's write lock, so no deletion comes between.
		Create: dialect.Q(fmt.Sprintf(`INSERT INTO %[1]s (name, owner, version, holds, acquired_at, expires_at)
VALUES (:name, :owner, (SELECT version + 1 FROM sqllock_version_floor WHERE id = 1), 1, %[2]s, %[2]s + :ttl)
ON CONFLICT (name) DO NOTHING
RETURNING version`, versions, now)),
		Take: dialect.Q(fmt.Sprintf(`UPDATE %[1]s SET owner = :owner, version = version + 1, holds = 1, acquired_at = %[2]s, expires_at = %[2]s + :ttl
WHERE name = :name AND version = :version AND expires_at <= %[2]s
RETURNING version`, versions, now)),
		Reenter: dialect.X(fmt.Sprintf(`UPDATE %[1]s SET holds = holds + 1, expires_at = max(expires_at, %[2]s + :ttl)
WHERE name = :name AND version = :version AND owner = :owner AND holds > 0 AND expires_at > %[2]s`, versions, now)),
	}
}

// reapSQL deletes a batch of expired and released rows of table in one
// statement. SQLite runs it under the write lock, so concurrent reapers and
// acquirers take turns; a trigger raises the table's floor (the token floor
// of migration 1, the version floor of migration 6) to every deleted token
// or version in the same statement.
func reapSQL(table string) dialect.SQL {
	return dialect.X(fmt.Sprintf(`DELETE FROM %[1]s WHERE name IN (
  SELECT name FROM %[1]s WHERE expires_at <= %[2]s ORDER BY expires_at LIMIT :limit
)`, table, now))
}

// ptr returns a pointer to a copy of v: a catalogue's declaration.
func ptr[T any](v T) *T { return &v }

// build declares the dialect's statements in its catalogue and compiles
// the reaper's; Build checks them all.
func (d *Dialect) build() error {
	hooks := dialect.Hooks{Wrap: wrap, AfterRelease: d.wake.ring}
	d.run = &sqlrun.Runner{DB: d.db, Hooks: hooks}
	d.cat = dialect.Catalogue{
		Style: dialect.Question,
		Locks: ptr(lockSQL()), Fair: ptr(fairSQL()), Versions: ptr(versionSQL()),
		Semaphores: ptr(semaphoreSQL()), FairSemaphores: ptr(fairSemaphoreSQL()), RWLocks: ptr(rwLockSQL()),
		Runs: ptr(ledgerSQL()), Latches: ptr(latchSQL()), Barriers: ptr(barrierSQL()),
		Reasons:      map[string]string{"Pessimistic": "SQLite has no row locks"},
		Hooks:        hooks,
		SingleWriter: true,
		Cache:        new(dialect.Cache),
	}
	if hasWakeups && !d.noWakeups {
		d.cat.Notifier, d.cat.WatchesNames, d.cat.AnnouncesVersions = d.wake, true, true
	}
	c := sqlrun.NewCompiler(d.cat)
	d.reap = []sqlrun.Stmt{c.Compile(reapSQL("sqllock_locks")), c.Compile(reapSQL("sqllock_versions")),
		c.Compile(reapSemaphoresSQL()), c.Compile(reapRWSQL()), c.Compile(reapTicketsSQL()),
		c.Compile(reapTicketsOf("sqllock_semaphore_tickets"))}
	return sqlrun.Ready(d, c)
}

// Catalogue implements dialect.Dialect. SQLite has no row locks
// (Pessimistic). Releases of the lock and version tables (lock sets and
// broken leases included) and of read/write locks (withdrawn intents
// included) reach the waiters of other processes of the host through
// sockets beside the database file (wake.go; Notifier, which announces the
// names its subscriptions watch), as do fair tickets given up; the waiters
// of semaphores poll. Without Unix
// datagram sockets (Windows), or with WithoutWakeups, there is no Notifier
// and all waiters poll. Every write, a grant among them, holds the
// database's single write lock (SingleWriter).
func (d *Dialect) Catalogue() dialect.Catalogue { return d.cat }

// Reap implements dialect.Dialect: a batch of the lock table, then one of
// the version table, then one of the semaphore holders, then one of the
// read/write locks' holders, then one of expired FIFO tickets, each in a
// statement of its own.
func (d *Dialect) Reap(ctx context.Context, p dialect.ReapParams) (int, error) {
	total := 0
	for i := range d.reap {
		n, err := d.run.Int(ctx, &d.reap[i], &sqlrun.Params{Limit: p.Limit})
		total += int(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
