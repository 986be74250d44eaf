package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// The statements of the lock and version tables, declared once for both
// through leaseSQL; sqlrun binds their named parameters. Times travel as
// integers computed on the server in UTC, and every state change is
// detected in a way that does not depend on whether the server counts
// matched or changed rows (clientFoundRows).

// now is the current time in UTC, on a clock that no session setting moves,
// whatever the session time zone.
//
// UTC_TIMESTAMP(6) and NOW(6) are the statement's start on the session's
// clock, which a session can set (SET timestamp = ..., as replication
// appliers, fixtures and some drivers' init statements do); SYSDATE(6) is
// the server's real clock, in the session time zone. Their difference is
// how far the session's clock is off (plus the time the statement has run),
// so adding it to UTC_TIMESTAMP(6) gives the real time in UTC. SYSDATE(6)
// is read at each use; every use within a statement agrees within the
// statement's run time, and the statements below are written so that only
// the order of such reads matters, never their equality. A server started
// with --sysdate-is-now makes SYSDATE() follow the session clock too: the
// dialect detects it once and refuses to grant leases (see checkServer).
const now = "(UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND)"

// released is the expiry a released row gets: before any real time.
const released = "'1000-01-01 00:00:00'"

// releasedExpiry is the expiry a release gives the row, in an UPDATE that
// first decrements holds (MySQL's assignments see the ones before them):
// unchanged while other holds remain; else the end of the minimum hold if
// that is still ahead, or the released value (free at once).
const releasedExpiry = `IF(holds > 0, expires_at,
    IF(acquired_at + INTERVAL :minhold MICROSECOND > ` + now + `, acquired_at + INTERVAL :minhold MICROSECOND, ` + released + `))`

// micros is the microseconds since the Unix epoch of a DATETIME(6) in UTC.
func micros(col string) string {
	return `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + col + `)`
}

// leaseSQL declares the lease statements of table, whose token column is
// token.
func leaseSQL(table, token string) dialect.LeaseSQL {
	// GREATEST(... + 1 µs) makes every renewal change the row, so the
	// affected-row count is 1 whether the DSN counts found or changed rows.
	const extend = `expires_at = GREATEST(expires_at + INTERVAL 1 MICROSECOND, ` + now + ` + INTERVAL :ttl MICROSECOND)`
	return dialect.LeaseSQL{
		RenewMany: dialect.X(fmt.Sprintf(`UPDATE %[1]s SET %[3]s
WHERE name IN (:names) AND (name, owner, %[2]s) IN (:leases) AND holds > 0 AND expires_at > %[4]s`, table, token, extend, now)),
		// No RETURNING: a lease of the batch is live afterwards exactly
		// when the update renewed it (nothing else makes the same
		// (name, owner, token) live again).
		Renewed: renewed(table, token, ""),
		Release: wakingRelease(table, token, false),
		Guard: dialect.Q(fmt.Sprintf(`SELECT 1 FROM %[1]s
WHERE name = :name AND owner = :owner AND %[2]s = :token AND holds > 0 AND expires_at > %[3]s
LOCK IN SHARE MODE`, table, token, now)),
		List: dialect.Q(fmt.Sprintf(`SELECT name, owner, %[2]s, holds, %[4]s, %[5]s, TIMESTAMPDIFF(MICROSECOND, %[3]s, expires_at)
FROM %[1]s WHERE holds > 0 OR expires_at > %[3]s ORDER BY name`, table, token, now, micros("acquired_at"), micros("expires_at"))),
	}
}

// renewed is LeaseSQL.Renewed of table, whose token column is token,
// selecting extra after each live lease's name, owner and token.
func renewed(table, token, extra string) dialect.SQL {
	return dialect.Q(fmt.Sprintf(`SELECT name, owner, %[2]s%[4]s FROM %[1]s
WHERE name IN (:names) AND (name, owner, %[2]s) IN (:leases) AND holds > 0 AND expires_at > %[3]s`, table, token, now, extra))
}

// lockSQL declares the lock table's statements.
func lockSQL(locks, floor string) dialect.LockSQL {
	s := dialect.LockSQL{LeaseSQL: leaseSQL(locks, "token")}
	s.Release = wakingRelease(locks, "token", true)
	// One statement, no RETURNING: the token travels back as the
	// statement's insert id via LAST_INSERT_ID(expr), and a refusal sets it
	// to 0. MySQL applies ON DUPLICATE KEY UPDATE assignments left to
	// right, each seeing the previous ones, so every condition below reads
	// only columns not yet assigned. A new row starts above the token
	// floor, read under a shared lock that the reaper must wait for. The
	// time is read in the SELECT, and the update reads it back with
	// VALUES(): every condition sees the same instant.
	//
	// A token is at least the grant's time in microseconds (see
	// clockToken): the one guard MySQL offers against a failover to a
	// replica that lacks the last grants.
	s.Acquire = lockAcquire(locks, floor, false)
	s.Campaign = lockAcquire(locks, floor, true)
	s.Proclaim, s.Leader = electionSQL(locks)
	s.Values = valuesSQL(locks)
	s.SetValue, s.Value, s.LockValues = lockValueSQL(locks)
	// A release request is kept for the token it was asked of (see
	// migration 33), and renewals read it back. The expiry moves on by one
	// microsecond, so that asking again with the same reason still counts
	// as a changed row.
	s.RequestRelease = dialect.X(fmt.Sprintf(`UPDATE %[1]s SET release_reason = :value, release_token = token,
  expires_at = expires_at + INTERVAL 1 MICROSECOND
WHERE name = :name AND holds > 0 AND expires_at > %[2]s`, locks, now))
	s.Renewed = renewed(locks, "token", `, IF(release_token = token, release_reason, NULL)`)
	s.ReleaseAll, s.MultiTx = releaseAllSQL(locks), multiTx
	s.Remaining = dialect.Q(fmt.Sprintf(`SELECT GREATEST(TIMESTAMPDIFF(MICROSECOND, %s, expires_at), 0) FROM %s WHERE name = :name`, now, locks))
	s.Holder = dialect.Q(fmt.Sprintf(`SELECT name, owner, token, holds, %[3]s, %[4]s, TIMESTAMPDIFF(MICROSECOND, %[2]s, expires_at)
FROM %[1]s WHERE name = :name AND expires_at > %[2]s`, locks, now, micros("acquired_at"), micros("expires_at")))
	s.Break = breakSQL(locks, true)
	return s
}

// lockAcquire is the lock table's acquire (see lockSQL); with value, it
// also stores :value as the value of the lease it grants or re-enters,
// with the lease's token as value_token: on a new row, read back with
// LAST_INSERT_ID() from the token's LAST_INSERT_ID(expr) before it; on an
// existing row, assigned first, while the conditions still read the row's
// own columns, from the same expression as the token's.
func lockAcquire(locks, floor string, value bool) dialect.SQL {
	cols, vals, sets := "", "", ""
	if value {
		cols = ", value, value_token"
		vals = ", :value, LAST_INSERT_ID()"
		sets = fmt.Sprintf(`
  value       = IF(%[1]s.expires_at <= VALUES(acquired_at) OR (%[1]s.owner = :owner AND %[1]s.holds > 0), VALUES(value), %[1]s.value),
  value_token = IF(%[1]s.expires_at <= VALUES(acquired_at), %[2]s,
                  IF(%[1]s.owner = :owner AND %[1]s.holds > 0, %[1]s.token, %[1]s.value_token)),`,
			locks, clockToken(locks+".token", "VALUES(acquired_at)"))
	}
	return dialect.XID(fmt.Sprintf(`INSERT INTO %[1]s (name, owner, token, holds, acquired_at, expires_at%[6]s)
SELECT :name, :owner, LAST_INSERT_ID(%[4]s), 1, %[3]s, %[3]s + INTERVAL :ttl MICROSECOND%[7]s
FROM %[2]s f WHERE f.id = 1 LOCK IN SHARE MODE
ON DUPLICATE KEY UPDATE%[8]s
  token       = IF(%[1]s.expires_at <= VALUES(acquired_at), LAST_INSERT_ID(%[5]s),
                  IF(%[1]s.owner = :owner AND %[1]s.holds > 0, LAST_INSERT_ID(%[1]s.token), %[1]s.token + LAST_INSERT_ID(0))),
  holds       = IF(%[1]s.expires_at <= VALUES(acquired_at), 1, IF(%[1]s.owner = :owner AND %[1]s.holds > 0, %[1]s.holds + 1, %[1]s.holds)),
  owner       = IF(%[1]s.expires_at <= VALUES(acquired_at), :owner, %[1]s.owner),
  acquired_at = IF(%[1]s.expires_at <= VALUES(acquired_at), VALUES(acquired_at), %[1]s.acquired_at),
  expires_at  = IF(%[1]s.owner = :owner AND %[1]s.holds > 0, VALUES(expires_at), %[1]s.expires_at)`, locks, floor, now,
		clockToken("f.token", now), clockToken(locks+".token", "VALUES(acquired_at)"), cols, vals, sets))
}

// breakSQL ends the live lease (:name, :owner, :token) of the lock table
// locks, as a last release past its minimum hold does. With ring, its
// number, the insert id, is as the release's (see wakingRelease), so that
// the runner rings the waiters' bells as after a release; else it is the
// rows changed (the expiry always changes).
func breakSQL(locks string, ring bool) dialect.SQL {
	const where = `WHERE name = :name AND owner = :owner AND token = :token AND expires_at > ` + now
	if !ring {
		return dialect.X(fmt.Sprintf(`UPDATE %s SET holds = 0, expires_at = %s
%s`, locks, released, where))
	}
	return dialect.XID(fmt.Sprintf(`UPDATE %s SET holds = 0, expires_at = %s,
  token = token + 0 * LAST_INSERT_ID(1 + waiters + 2 * ticketed)
%s`, locks, released, where))
}

// versionSQL declares the version table's statements. Both swaps change a
// column whenever they match (version, holds), so rows affected is rows
// matched whatever clientFoundRows says.
func versionSQL(versions, floor string) dialect.VersionSQL {
	return dialect.VersionSQL{
		LeaseSQL: leaseSQL(versions, "version"),
		Read: dialect.Q(fmt.Sprintf(`SELECT version, owner, holds, expires_at > %[2]s,
  GREATEST(TIMESTAMPDIFF(MICROSECOND, %[2]s, expires_at), 0)
FROM %[1]s WHERE name = :name`, versions, now)),
		// A new row starts above the version floor, read under a shared
		// lock that the reaper must wait for, as the lock table's Acquire
		// does. The insert id is the new row's version, or 0 from the
		// no-op update of an existing row (the affected-row count cannot
		// tell, as it depends on clientFoundRows).
		Create: dialect.XID(fmt.Sprintf(`INSERT INTO %[1]s (name, owner, version, holds, acquired_at, expires_at)
SELECT :name, :owner, LAST_INSERT_ID(%[4]s), 1, %[3]s, %[3]s + INTERVAL :ttl MICROSECOND
FROM %[2]s f WHERE f.id = 1 LOCK IN SHARE MODE
ON DUPLICATE KEY UPDATE %[1]s.version = %[1]s.version + LAST_INSERT_ID(0)`, versions, floor, now, clockToken("f.version", now))),
		// The insert id is the new version, or 0 when no row matched.
		Take: dialect.XID(fmt.Sprintf(`UPDATE %[1]s SET owner = :owner, version = LAST_INSERT_ID(%[3]s), holds = 1,
  acquired_at = %[2]s, expires_at = %[2]s + INTERVAL :ttl MICROSECOND
WHERE name = :name AND version = :version AND expires_at <= %[2]s`, versions, now, clockToken("version", now))),
		Reenter: dialect.X(fmt.Sprintf(`UPDATE %[1]s SET holds = holds + 1,
  expires_at = GREATEST(expires_at, %[2]s + INTERVAL :ttl MICROSECOND)
WHERE name = :name AND version = :version AND owner = :owner AND holds > 0 AND expires_at > %[2]s`, versions, now)),
	}
}

// floorReap are the reaper's statements on a table whose new rows start
// above a floor (the largest token, or version, of a deleted row): lock the
// floor, select a batch of expired and released rows (skipping rows that
// others have locked), delete them one by one (see deleteByName), raise the
// floor.
type floorReap struct {
	lockFloor, expired, raiseFloor sqlrun.Stmt
	delete                         string
}

// newFloorReap compiles the reaper's statements on table, whose token
// column is token, and on its floor, whose column is floorCol.
func newFloorReap(c *sqlrun.Compiler, table, token, floor, floorCol string) floorReap {
	return floorReap{
		lockFloor: c.Compile(dialect.Q(fmt.Sprintf(`SELECT %s FROM %s WHERE id = 1 FOR UPDATE`, floorCol, floor))),
		expired: c.Compile(dialect.Q(fmt.Sprintf(`SELECT name, %s FROM %s WHERE expires_at <= %s
ORDER BY expires_at LIMIT :limit FOR UPDATE SKIP LOCKED`, token, table, now))),
		raiseFloor: c.Compile(dialect.X(fmt.Sprintf(`UPDATE %[1]s SET %[2]s = GREATEST(%[2]s, :token) WHERE id = 1`, floor, floorCol))),
		delete:     deleteByName(table),
	}
}

// deleteByName deletes the row of one name. The reaper deletes the rows it
// locked one statement each, by primary key: a DELETE ... WHERE name IN
// (list) naming most rows of a small table is run as a full scan, which
// waits for every row that another transaction has locked (a guarded
// transaction's, a held pessimistic lock's), and would hold the rows and
// the floor the reaper locked for as long.
func deleteByName(table string) string {
	return fmt.Sprintf(`DELETE FROM %s WHERE name = ?`, table)
}

// reapStmts are the reaper's statements.
type reapStmts struct {
	locks, versions floorReap
	// rowLocks selects a batch of rows of the row-lock table that no
	// transaction has locked, locking them; deleteRowLock deletes one.
	rowLocks      sqlrun.Stmt
	deleteRowLock string
	// rwExpired selects, locking them, a batch of expired holder rows of
	// the read/write locks; rwDelete deletes one.
	rwExpired sqlrun.Stmt
	rwDelete  string
	tickets   string // deletes a batch of expired FIFO tickets (fair.go)
	// semTickets deletes a batch of expired tickets of the semaphores'
	// queue (fairsem.go).
	semTickets string
}

// ptr returns a pointer to a copy of v: a catalogue's declaration.
func ptr[T any](v T) *T { return &v }

// build declares the dialect's statements in its catalogue and compiles
// the reaper's; Build checks them all.
func (d *Dialect) build() error {
	locks, floor, versions := "sqllock_locks", "sqllock_token_floor", "sqllock_versions"
	versionFloor, rowlocks, waiters := "sqllock_version_floor", "sqllock_rowlocks", "sqllock_waiters"
	tickets, sems, holders := "sqllock_tickets", "sqllock_semaphores", "sqllock_semaphore_holders"
	semTickets, rwHeads, rwHolders := "sqllock_semaphore_tickets", "sqllock_rwlock_heads", "sqllock_rwlock_holders"
	sqlrun.Qualify(d.database, quote, &locks, &floor, &versions, &versionFloor, &rowlocks, &waiters, &tickets, &sems, &holders,
		&semTickets, &rwHeads, &rwHolders)
	hooks := dialect.Hooks{Wrap: wrap, Cancel: d.cancelGrant, Check: d.check, StatementTimeout: d.stmtTimeout}
	d.wakeUps(&hooks, waiters, []ticketQueue{
		dialect.LockQueue: {tickets, fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM %s l WHERE l.name = %%[1]s AND l.expires_at > %s)`, locks, now)},
		dialect.SemaphoreQueue: {semTickets, fmt.Sprintf(`(SELECT COUNT(*) FROM %[1]s h WHERE h.name = %%[1]s AND h.expires_at > %[3]s)
  < (SELECT s.lim FROM %[2]s s WHERE s.name = %%[1]s)`, holders, sems, now)},
	}, locks, versions, sems, holders, rwHeads, rwHolders)
	d.run = &sqlrun.Runner{DB: d.db, Hooks: hooks}
	d.cat = dialect.Catalogue{
		Style:    dialect.Question,
		Locks:    ptr(lockSQL(locks, floor)),
		Versions: ptr(versionSQL(versions, versionFloor)),
		Fair:     ptr(fairSQL(locks, tickets, d.waker, !d.noWakeups)),
		Runs:     d.runsSQL(),
		Hooks:    hooks, Pessimistic: rowLocks{d}, RowLocks: d.listRowLocks,
		Notifier: bellNotifier{d}, WatchesNames: !d.noWakeups, AnnouncesVersions: true, CheckPessimistic: d.checkPessimistic,
		Cache: new(dialect.Cache),
	}
	if !d.noWakeups {
		d.cat.Waking = ptr(wakingSQL(locks, tickets, d.waker))
	}
	c := sqlrun.NewCompiler(d.cat)
	d.reap = reapStmts{
		locks:         newFloorReap(c, locks, "token", floor, "token"),
		versions:      newFloorReap(c, versions, "version", versionFloor, "version"),
		rowLocks:      c.Compile(dialect.Q(fmt.Sprintf(`SELECT name FROM %s LIMIT :limit FOR UPDATE SKIP LOCKED`, rowlocks))),
		deleteRowLock: deleteByName(rowlocks),
		tickets:       reapTicketsSQL(tickets),
	}
	d.semaphoreSQLs(c, &d.cat)
	d.latchSQLs(&d.cat)
	d.barrierSQLs(&d.cat)
	d.rwSQL(c, &d.cat)
	return sqlrun.Ready(d, c)
}

// Catalogue implements dialect.Dialect: MySQL and MariaDB hold every
// primitive; TiDB (NewTiDB) the lock table, the version table and
// exclusive row locks, whose waiters poll. A release of a name some process waits for (of a lock, a
// version, a semaphore permit or a read/write lock, or a withdrawn writer
// intent) rings that process's bell, the Notifier's connection (see
// wake.go); without wake-ups (WithoutWakeups, a Galera cluster), waiters
// poll. The FIFO queues serve the woken waiters in ticket order. Row locks
// are refused on a Galera cluster (CheckPessimistic).
func (d *Dialect) Catalogue() dialect.Catalogue { return d.cat }

// cancelGrant prepares the cancelling of a grant: a mark to put in front of
// the statement, by which another connection of the pool finds it in the
// process list and ends it with KILL QUERY. The driver's own reaction to a
// cancelled context is to close the connection, which leaves the server
// running the statement: it would take the lock, for an owner nobody holds,
// once the row lock it waits for is free. Finding the statement by its mark
// costs nothing unless ctx ends (asking each connection for its
// CONNECTION_ID() would cost a round trip per acquire).
func (d *Dialect) cancelGrant(context.Context, *sql.Conn) (string, func(context.Context) error, error) {
	mark := d.marks.next()
	return mark, func(ctx context.Context) error { return d.killMarked(ctx, mark) }, nil
}
