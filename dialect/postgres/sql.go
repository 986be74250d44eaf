package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// The statements of the lock and version tables, declared once for both
// through leaseSQL; sqlrun binds their named parameters.
//
// now() is the start of the statement's own transaction: in autocommit, the
// statement's start. The guard runs inside a user's transaction, where
// clock_timestamp() is the current time. No session setting moves either
// (SET TIME ZONE changes how times are shown, not the instant).

// ttl is the expiry of a lease granted or renewed now.
const ttl = `now() + :ttl::bigint * interval '1 microsecond'`

// minHeld is the end of a released row's minimum hold.
const minHeld = `acquired_at + :minhold::bigint * interval '1 microsecond'`

// releasedExpiry is the expiry a release gives the row: unchanged while
// other holds remain; else the end of the minimum hold if that is still
// ahead, or -infinity (free at once).
const releasedExpiry = `CASE WHEN holds > 1 THEN expires_at
    WHEN ` + minHeld + ` > now() THEN ` + minHeld + `
    ELSE '-infinity' END`

// micros is the microseconds since the Unix epoch of a timestamptz.
func micros(col string) string { return `(extract(epoch FROM ` + col + `) * 1000000)::bigint` }

// leaseSQL declares the lease statements of table, whose token column is
// token.
func leaseSQL(table, token, durable string) dialect.LeaseSQL {
	return dialect.LeaseSQL{
		RenewMany: renewMany(table, token, durable, ""),
		Release: dialect.X(fmt.Sprintf(`UPDATE %[1]s SET holds = holds - 1, expires_at = %[3]s
WHERE name = :name AND owner = :owner AND %[2]s = :token AND holds > 0 AND %[4]s`, table, token, releasedExpiry, durable)),
		Guard: dialect.Q(fmt.Sprintf(`SELECT 1 FROM %[1]s
WHERE name = :name AND owner = :owner AND %[2]s = :token AND holds > 0 AND expires_at > clock_timestamp()
  AND %[3]s AND %[4]s
FOR SHARE`, table, token, onTimeline(token), durable)),
		List: dialect.Q(fmt.Sprintf(`SELECT name, owner, %[2]s, holds, %[3]s, %[4]s,
  (extract(epoch FROM expires_at - now()) * 1000000)::bigint
FROM %[1]s WHERE holds > 0 OR expires_at > now() ORDER BY name`, table, token, micros("acquired_at"), micros("expires_at"))),
	}
}

// renewMany is LeaseSQL.RenewMany of table, whose token column is token,
// selecting extra after the renewed lease's name, owner and token.
func renewMany(table, token, durable, extra string) dialect.SQL {
	return dialect.Q(fmt.Sprintf(`UPDATE %[1]s SET expires_at = %[3]s
WHERE name IN (:names) AND (name, owner, %[2]s) IN (:leases) AND holds > 0 AND expires_at > now()
  AND %[4]s AND %[5]s
RETURNING name, owner, %[2]s%[6]s`, table, token, ttl, onTimeline(token), durable, extra))
}

// lockSQL declares the lock table's statements.
func lockSQL(locks, seq, tickets, channel, durable string) dialect.LockSQL {
	s := dialect.LockSQL{LeaseSQL: leaseSQL(locks, "token", durable)}
	s.Channel = channel
	// The token comes from the sequence; on takeover it is drawn in the
	// UPDATE, after the row lock, so it exceeds the token it replaces.
	//
	// The new row's token is drawn before the insert meets a conflicting
	// row; if that row were deleted while the insert waits for it (the
	// reaper deleting a released row), the insert would go ahead with a
	// token drawn before the conflicting row's holder got a larger one.
	// So the statement first takes the name's fence (an advisory lock, in
	// shared mode, for this statement's transaction only), and the reaper
	// deletes no row whose fence it cannot take at once.
	//
	// Tokens carry the timeline in their high bits (see epoch.go): the
	// fence's subquery reads it once, and a takeover adds the same epoch,
	// read back from the excluded row's token, to its own draw. A live
	// lease of an earlier timeline is not re-entered: it is lost.
	s.Acquire = lockAcquire(locks, seq, durable, false)
	s.Campaign = lockAcquire(locks, seq, durable, true)
	s.Proclaim, s.Leader = electionSQL(locks, durable)
	s.Values = valuesSQL(locks)
	s.SetValue, s.Value, s.LockValues = lockValueSQL(locks, durable)
	// A release request is kept for the token it was asked of (see
	// migration 33), and renewals read it back.
	s.RequestRelease = dialect.X(fmt.Sprintf(`UPDATE %[1]s SET release_reason = :value::text, release_token = token
WHERE name = :name AND holds > 0 AND expires_at > now() AND %[2]s AND %[3]s`, locks, onTimeline("token"), durable))
	s.RenewMany = renewMany(locks, "token", durable, `, CASE WHEN release_token = token THEN release_reason END`)
	s.ReleaseAll, s.MultiTx = releaseAllSQL(locks, durable), multiTx
	// Only waiters ask how long a lease has left: the same statement sets
	// the waiters hint (once), so that the release will NOTIFY. The SELECT
	// reads the statement's snapshot, but the hint's UPDATE the latest
	// row: when the snapshot shows a live lease without the hint and the
	// UPDATE changed nothing, a release (or takeover) committed in
	// between — one that read no hint and announced nothing — and the
	// waiter must look again at once (0) rather than sleep until the lease
	// it saw would have ended.
	s.Remaining = dialect.Q(fmt.Sprintf(`WITH hint AS (
  UPDATE %[1]s SET waiters = true WHERE name = :name AND NOT waiters AND expires_at > now()
  RETURNING 1
)
SELECT CASE WHEN l.expires_at > now() AND NOT l.waiters AND NOT EXISTS (SELECT 1 FROM hint) THEN 0
  ELSE (extract(epoch FROM greatest(l.expires_at, now()) - now()) * 1000000)::bigint END
FROM %[1]s l WHERE l.name = :name`, locks))
	// The last release of a name someone waited for announces it, unless
	// a minimum hold keeps the lock: its waiters wake when it ends, as
	// they would for an expiring lease. A release of a row marked by
	// waiters with tickets reports it (3), and Wake wakes the oldest
	// ticket's process: the ticket table is not read by the releases of
	// other rows.
	s.Release = dialect.Q(fmt.Sprintf(`WITH r AS (
  UPDATE %s SET holds = holds - 1, expires_at = %s
  WHERE name = :name AND owner = :owner AND token = :token AND holds > 0 AND %s
  RETURNING name, holds = 0 AND expires_at <= now() AS free, waiters, ticketed
)
SELECT count(*) + 2 * count(*) FILTER (WHERE r.free AND r.ticketed)
FROM r LEFT JOIN LATERAL (SELECT pg_notify(:channel, r.name) WHERE r.free AND r.waiters) n ON true`, locks, releasedExpiry, durable))
	s.Wake = wakeOldestTicket(tickets)
	s.Holder = dialect.Q(fmt.Sprintf(`SELECT name, owner, token, holds, %[2]s, %[3]s,
  (extract(epoch FROM expires_at - now()) * 1000000)::bigint
FROM %[1]s WHERE name = :name AND expires_at > now()`, locks, micros("acquired_at"), micros("expires_at")))
	// A break frees the row as a last release past its minimum hold does,
	// and announces it the same way.
	s.Break = dialect.Q(fmt.Sprintf(`WITH b AS (
  UPDATE %s SET holds = 0, expires_at = '-infinity'
  WHERE name = :name AND owner = :owner AND token = :token AND expires_at > now() AND %s
  RETURNING name, waiters, ticketed
)
SELECT count(*) + 2 * count(*) FILTER (WHERE b.ticketed)
FROM b LEFT JOIN LATERAL (SELECT pg_notify(:channel, b.name) WHERE b.waiters) n ON true`, locks, durable))
	return s
}

// lockAcquire is the lock table's acquire (see lockSQL); with value, it
// also stores :value as the value of the lease it grants or re-enters,
// with the lease's token as value_token. The token of a takeover is drawn
// in the token column's assignment, and value_token's, which PostgreSQL
// evaluates after it (in column order: value_token was added later),
// reads it back with currval.
func lockAcquire(locks, seq, durable string, value bool) dialect.SQL {
	cols, vals, sets := "", "", ""
	if value {
		cols = ", value, value_token"
		vals = fmt.Sprintf(", :value::text, fence.epoch + currval('%s')", seq)
		sets = fmt.Sprintf(`,
  value       = EXCLUDED.value,
  value_token = CASE WHEN l.expires_at <= now() THEN %s + currval('%s') ELSE l.token END`, epochOf("EXCLUDED.token"), seq)
	}
	return dialect.Q(fmt.Sprintf(`INSERT INTO %[1]s AS l (name, owner, token, holds, acquired_at, expires_at%[9]s)
SELECT :name, :owner, fence.epoch + nextval('%[2]s'), 1, now(), %[3]s%[10]s
FROM (SELECT pg_advisory_xact_lock_shared(%[4]s), %[5]s AS epoch) AS fence WHERE %[8]s
ON CONFLICT (name) DO UPDATE SET
  token       = CASE WHEN l.expires_at <= now() THEN %[6]s + nextval('%[2]s') ELSE l.token END,
  holds       = CASE WHEN l.expires_at <= now() THEN 1 ELSE l.holds + 1 END,
  acquired_at = CASE WHEN l.expires_at <= now() THEN now() ELSE l.acquired_at END,
  owner       = EXCLUDED.owner,
  expires_at  = EXCLUDED.expires_at%[11]s
WHERE l.expires_at <= now() OR (l.owner = EXCLUDED.owner AND l.holds > 0 AND %[7]s IN (0, %[6]s))
RETURNING token`, locks, seq, ttl, fence(":name"), epoch, epochOf("EXCLUDED.token"), epochOf("l.token"), durable,
		cols, vals, sets))
}

// versionSQL declares the version table's statements.
func versionSQL(versions, floor, durable string) dialect.VersionSQL {
	return dialect.VersionSQL{
		LeaseSQL: leaseSQL(versions, "version", durable),
		Read: dialect.Q(fmt.Sprintf(`SELECT version, owner, holds, expires_at > now(),
  (extract(epoch FROM greatest(expires_at, now()) - now()) * 1000000)::bigint
FROM %s WHERE name = :name`, versions)),
		// A new row starts above the version floor, read under a shared
		// lock: a reaper raising it waits for the insert to commit, and an
		// insert after the reaper's deletions reads the raised floor.
		Create: dialect.Q(fmt.Sprintf(`INSERT INTO %[1]s (name, owner, version, holds, acquired_at, expires_at)
SELECT :name, :owner, greatest(f.version + 1, %[4]s), 1, now(), %[3]s FROM %[2]s f WHERE f.id = 1 AND %[5]s FOR SHARE
ON CONFLICT (name) DO NOTHING
RETURNING version`, versions, floor, ttl, epoch, durable)),
		// A takeover's version is one more, or the current timeline's
		// first when the row's is of an earlier timeline (see epoch.go).
		Take: dialect.Q(fmt.Sprintf(`UPDATE %s SET owner = :owner, version = greatest(version + 1, (SELECT %s)), holds = 1,
  acquired_at = now(), expires_at = %s
WHERE name = :name AND version = :version AND expires_at <= now() AND %s
RETURNING version`, versions, epoch, ttl, durable)),
		Reenter: dialect.X(fmt.Sprintf(`UPDATE %s SET holds = holds + 1, expires_at = greatest(expires_at, %s)
WHERE name = :name AND version = :version AND owner = :owner AND holds > 0 AND expires_at > now()
  AND %s AND %s`, versions, ttl, onTimeline("version"), durable)),
	}
}

// reapSQL deletes expired rows of the lock table. SKIP LOCKED lets reapers
// in many processes share the work and never wait behind an acquirer; the
// outer condition re-checks expiry. Names that had waiters are announced.
//
// The reaper's deletes name their batch as = ANY(ARRAY(subquery)): the
// batch is selected once and its rows are found by primary key. With IN
// (subquery), the planner, given a large table's statistics, joins the
// batch with a sequential scan of the whole table, at every batch.
//
// A row whose name's fence an acquire holds (see lockSQL) is left for a
// later pass: the acquire may have drawn its token before the row's holder
// drew a larger one. So is a row marked by waiters with tickets (ticketed)
// while a live ticket of its name is left: their waiters sleep on the
// mark, which a new row would lack.
func reapSQL(locks, tickets string) dialect.SQL {
	return dialect.Q(fmt.Sprintf(`WITH d AS (
  DELETE FROM %[1]s WHERE name = ANY(ARRAY(
    SELECT r.name FROM %[1]s r WHERE r.expires_at <= now() AND NOT (r.ticketed AND %[3]s)
    ORDER BY r.expires_at LIMIT :limit FOR UPDATE SKIP LOCKED
  )) AND expires_at <= now() AND pg_try_advisory_xact_lock(%[2]s)
  RETURNING name, waiters
)
SELECT count(*) FROM d LEFT JOIN LATERAL (SELECT pg_notify(:channel, d.name) WHERE d.waiters) n ON true`, locks, fence("name"),
		fmt.Sprintf(`EXISTS (SELECT 1 FROM %s t WHERE t.name = r.name AND t.expires_at > now())`, tickets)))
}

// fenceClass is the first key of the fences' advisory locks ("sqlk"): the
// two-key form keeps them apart from an application's one-key advisory
// locks. They are transaction-scoped, so they never outlive a statement of
// sqllock and survive no pooler.
const fenceClass = 0x73716c6b

// fence is the advisory lock key of the lock named by the expression name.
func fence(name string) string {
	return fmt.Sprintf("%d, hashtext(%s)", fenceClass, name)
}

// reapVersionsSQL are the statements of the reaper's transaction on the
// version table: the first locks the version floor, so that no new row
// reads it until the transaction ends (a Create holding it shared makes the
// reaper wait; the reaper never waits for anything else while holding it);
// the second deletes a batch of expired and released rows, skipping locked
// ones, and raises the floor to the largest version deleted.
func reapVersionsSQL(versions, floor string) (lockFloor, reap dialect.SQL) {
	return dialect.Q(fmt.Sprintf(`SELECT version FROM %s WHERE id = 1 FOR UPDATE`, floor)),
		dialect.Q(fmt.Sprintf(`WITH d AS (
  DELETE FROM %[1]s WHERE name = ANY(ARRAY(
    SELECT name FROM %[1]s WHERE expires_at <= now() ORDER BY expires_at LIMIT :limit FOR UPDATE SKIP LOCKED
  )) AND expires_at <= now()
  RETURNING version
), f AS (
  UPDATE %[2]s f SET version = m.top FROM (SELECT max(version) AS top FROM d) m
  WHERE f.id = 1 AND f.version < m.top
)
SELECT count(*) FROM d`, versions, floor))
}

// reapRowLocksSQL deletes a batch of rows of the row-lock table that no
// transaction has locked: a held row is locked by its holder, and a waiter
// waits for a holder, so SKIP LOCKED passes over both. A waiter granted a
// row the reaper deleted meanwhile finds no row, and LockRow creates it
// again. Tokens come from a sequence: deleting rows changes none.
func reapRowLocksSQL(rowlocks string) dialect.SQL {
	return dialect.X(fmt.Sprintf(`DELETE FROM %[1]s WHERE name = ANY(ARRAY(
  SELECT name FROM %[1]s LIMIT :limit FOR UPDATE SKIP LOCKED
))`, rowlocks))
}

// reapStmts are the reaper's statements.
type reapStmts struct {
	locks, versionFloor, versions, rowLocks, tickets sqlrun.Stmt
	rw                                               sqlrun.Stmt // the read/write lock holders
}

// ptr returns a pointer to a copy of v: a catalogue's declaration.
func ptr[T any](v T) *T { return &v }

// build declares the dialect's statements in its catalogue and compiles
// the reaper's; Build checks them all.
func (d *Dialect) build() error {
	locks, seq, versions := "sqllock_locks", "sqllock_token_seq", "sqllock_versions"
	floor, rowlocks, tickets := "sqllock_version_floor", "sqllock_rowlocks", "sqllock_tickets"
	sqlrun.Qualify(d.schema, quote, &locks, &seq, &versions, &floor, &rowlocks, &tickets)
	durable := durable(d.syncCommit)
	hooks := dialect.Hooks{Wrap: wrap, Cancel: cancelGrant, Durable: d.syncCommit != "", Full: d.full,
		StatementTimeout: d.stmtTimeout}
	d.run = &sqlrun.Runner{DB: d.db, Hooks: hooks}
	d.cat = dialect.Catalogue{
		Style: dialect.Dollar, Lead: d.lead, Expand: d.expandEpoch(),
		Locks:    ptr(lockSQL(locks, seq, tickets, d.channel, durable)),
		Versions: ptr(versionSQL(versions, floor, durable)),
		Fair:     ptr(fairSQL(locks, seq, tickets, d.waker, durable)),
		Waking:   ptr(wakingSQL(locks, seq, tickets, d.waker, durable)),
		Runs:     d.runsSQL(),
		Hooks:    hooks, Pessimistic: rowLocks{d}, RowLocks: d.listRowLocks,
		Notifier: d.hub, Busy: busy, Ping: ping,
		Cache: new(dialect.Cache),
	}
	c := sqlrun.NewCompiler(d.cat)
	lockFloor, reapVersions := reapVersionsSQL(versions, floor)
	d.reap = reapStmts{
		locks:        c.Compile(reapSQL(locks, tickets)),
		versionFloor: c.Compile(lockFloor),
		versions:     c.Compile(reapVersions),
		rowLocks:     c.Compile(reapRowLocksSQL(rowlocks)),
		tickets:      c.Compile(reapTicketsSQL(tickets)),
	}
	d.semaphoreSQLs(c, &d.cat)
	d.latchSQLs(&d.cat)
	d.barrierSQLs(&d.cat)
	d.rwSQL(c, &d.cat)
	return sqlrun.Ready(d, c)
}

// Reap implements dialect.Dialect: a batch of the lock table, of the
// version table, of the row-lock table, of the semaphore holders and of
// the read/write locks' holders and of expired FIFO tickets, in turn.
// Lock-table, row-lock and semaphore tokens come from sequences, which
// deleting rows cannot set back; versions start above the version floor
// (see reapVersionsSQL).
func (d *Dialect) Reap(ctx context.Context, p dialect.ReapParams) (int, error) {
	params := &sqlrun.Params{Limit: p.Limit, Channel: d.channel}
	n, err := d.run.Int(ctx, &d.reap.locks, params)
	total := int(n)
	if err != nil {
		return total, err
	}
	n, err = d.reapVersions(ctx, params)
	total += int(n)
	if err != nil {
		return total, err
	}
	n, err = d.run.Int(ctx, &d.reap.rowLocks, params)
	total += int(n)
	if err != nil {
		return total, err
	}
	n, err = d.reapSemaphores(ctx, params)
	total += int(n)
	if err != nil {
		return total, err
	}
	n, err = d.run.Int(ctx, &d.reap.rw, params)
	total += int(n)
	if err != nil {
		return total, err
	}
	n, err = d.run.Int(ctx, &d.reap.tickets, params)
	return total + int(n), err
}

// reapVersions runs the reaper's transaction on the version table.
func (d *Dialect) reapVersions(ctx context.Context, p *sqlrun.Params) (n int64, err error) {
	err = d.run.Conn(ctx, func(ctx context.Context, conn *sql.Conn) error {
		tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return wrap(err)
		}
		defer tx.Rollback()
		if _, err := sqlrun.IntOn(ctx, tx, &d.reap.versionFloor, p); err != nil {
			return wrap(err)
		}
		if n, err = sqlrun.IntOn(ctx, tx, &d.reap.versions, p); err != nil {
			return wrap(err)
		}
		return wrap(tx.Commit())
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// cancelGrant prepares the cancelling of a grant on conn: a cancel request,
// sent on a connection of its own (pgx's own reaction to a cancelled context
// is to close the connection, which leaves the server running the
// statement: it would take the lock, for an owner nobody holds, once the row
// lock it waits for is free).
func cancelGrant(ctx context.Context, conn *sql.Conn) (string, func(context.Context) error, error) {
	cancel, err := canceller(ctx, conn)
	return "", cancel, err
}
