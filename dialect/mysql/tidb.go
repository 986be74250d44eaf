package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4/database"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/internal/sqlmigrate"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// tidb holds what differs on TiDB, which speaks MySQL's protocol but not
// all of its semantics, in a dialect made by NewTiDB:
//
//   - The lock table's Acquire is two statements, an upsert and the read
//     of the token it granted, as TiDB's LAST_INSERT_ID(expr) cannot carry
//     a token out of an upsert; the version table's Create is a short
//     transaction (a locking read of the floor, then the insert).
//   - Release decrements the hold count without relying on the order of
//     UPDATE assignments, which TiDB evaluates on the old row.
//   - Guard locks the lease's row exclusively (FOR UPDATE): TiDB has no
//     shared row lock.
//   - The reaper locks each candidate row with NOWAIT, re-checking its
//     expiry, instead of SKIP LOCKED, which TiDB ignores.
//   - Row locks (the pessimistic strategy) are exclusive only (a shared one
//     is refused with an error wrapping dialect.ErrUnsupported), and their
//     transaction runs at READ COMMITTED, so that its reads see what the
//     previous holder committed while this one waited (at TiDB's REPEATABLE
//     READ they would read the snapshot from before the wait). They need
//     tidb_txn_mode = 'pessimistic', TiDB's default.
//   - "pessimistic lock retry limit reached" (1105), write conflicts (9007)
//     and other retryable transaction errors wrap dialect.ErrTransient.
//   - The migrations are TiDBMigrations: the token table allocates ids in
//     order across TiDB servers (AUTO_ID_CACHE 1).
//   - Its catalogue has no lock sets, FIFO queues, semaphores, read/write
//     locks or elections, and no notifier: waiters poll.
//
// Its statements are portable: it runs on MySQL and MariaDB too (slower
// than New's dialect there).
type tidb struct {
	d        *Dialect
	locks    tidbLocks
	versions tidbVersions
	reap     tidbReap
}

var _ dialect.Pessimistic = (*tidb)(nil)

// NewTiDB returns the dialect for db, a pool opened with the "mysql"
// driver on a TiDB server. It takes New's options. Its Name is "tidb", and
// its catalogue is TiDB's (see Dialect.Catalogue).
func NewTiDB(db *sql.DB, opts ...Option) (*Dialect, error) {
	d, err := New(db, opts...)
	if err != nil {
		return nil, err
	}
	// Nothing has run yet: the runner can still change.
	d.run.Wrap = wrapTiDB
	t := &tidb{d: d}
	if err := t.tables(); err != nil {
		return nil, err
	}
	d.tidb = t
	d.cat = dialect.Catalogue{
		Locks: &t.locks, Versions: &t.versions, Pessimistic: t,
		Reasons: map[string]string{
			"Multi":          "lock sets are not supported on TiDB",
			"Fair":           "FIFO queues are not supported on TiDB",
			"Semaphores":     "semaphores are not supported on TiDB",
			"FairSemaphores": "semaphores are not supported on TiDB",
			"RWLocks":        "read/write locks are not supported on TiDB",
			"Elections":      "leader election is not offered on TiDB",
			"Runs":           "the run ledger is not offered on TiDB",
		},
		NoSharedRowLock: true,
	}
	return d, nil
}

// migrationDriver is Dialect.MigrationDriver on TiDB. TiDB ends a wait for
// the migration lock (GET_LOCK) with an error where MySQL returns 0: "lock
// wait timeout" when its timeout passes, or "pessimistic lock retry limit
// reached" when the lock changed hands too often meanwhile; the wait is
// then simply repeated, until the context ends.
func (t *tidb) migrationDriver(ctx context.Context, conn *sql.Conn) (database.Driver, error) {
	st := t.d.migrationStatements()
	st.Busy = getLockBusy
	drv, err := sqlmigrate.New(ctx, conn, st)
	return drv, wrapTiDB(err)
}

// Classify implements dialect.Pessimistic.
func (t *tidb) Classify(err error) error { return wrapTiDB(err) }

// BeginTx implements dialect.Pessimistic as the MySQL dialect's does (TiDB
// bounds pessimistic lock waits by innodb_lock_wait_timeout too).
func (t *tidb) BeginTx(ctx context.Context, opts *sql.TxOptions, lockTimeout time.Duration) (*dialect.RowTx, error) {
	return rowLocks{t.d}.BeginTx(ctx, opts, lockTimeout)
}

// LockRow implements dialect.Pessimistic with exclusive locks only, in a
// READ COMMITTED transaction (see tidb). A shared lock, and any lock on a
// TiDB whose sessions run optimistic transactions (where FOR UPDATE does
// not wait, nor exclude), is refused with an error wrapping
// dialect.ErrUnsupported.
func (t *tidb) LockRow(ctx context.Context, p dialect.RowLockParams) (*dialect.RowLock, error) {
	if p.Shared {
		return nil, fmt.Errorf("%w: shared row locks on TiDB: FOR SHARE fails there unless "+
			"tidb_enable_shared_lock_promotion makes it exclusive", dialect.ErrUnsupported)
	}
	if err := t.d.check(ctx); err != nil {
		return nil, err
	}
	if mode := t.d.flavor.txnMode; mode != "" && mode != "pessimistic" {
		return nil, fmt.Errorf("%w: row locks need tidb_txn_mode = 'pessimistic' (TiDB's default), "+
			"the sessions of this pool have %q", dialect.ErrUnsupported, mode)
	}
	r := t.d.rowLocker()
	r.TxOptions = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	return r.LockRow(ctx, p)
}

// retryLimit reports TiDB's "pessimistic lock retry limit reached": a lock
// (a row's, GET_LOCK's) changed hands too often while the statement
// waited for it; the transaction may be repeated.
func retryLimit(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1105 && strings.Contains(me.Message, "retry limit")
}

// getLockBusy reports the errors with which TiDB ends a GET_LOCK wait
// that another session's lock kept from succeeding (see MigrationDriver).
func getLockBusy(err error) bool {
	var me *mysql.MySQLError
	return retryLimit(err) || errors.As(err, &me) && me.Number == 1105 && strings.Contains(me.Message, "lock wait timeout")
}

// wrapTiDB is wrap, plus TiDB's retryable transaction errors.
func wrapTiDB(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch {
		case retryLimit(err),
			me.Number == 9007, // write conflict (optimistic transactions)
			me.Number == 8022, // "transaction retry" error: safe to retry
			me.Number == 8028: // the schema changed during the transaction
			return fmt.Errorf("%w: %w", dialect.ErrTransient, err)
		}
	}
	return wrap(err)
}

// tidbSQL are the TiDB dialect's own statements, with ? placeholders.
type tidbSQL struct {
	// The lock table's Acquire: the upsert that inserts, takes over or
	// re-enters; the read of the token of the lease granted; and the
	// release of a grant whose token could not be read.
	lockUpsert, lockToken, lockUndo string
	// The version table's Create: read (and lock) the floor, insert.
	versionFloor, versionInsert string
}

// tidbLocks is the lock table: MySQL's statements but for Acquire, Release
// and Guard.
type tidbLocks struct {
	*sqlrun.LockTable
	t *tidb
	q *tidbSQL
}

// tidbVersions is the version table: MySQL's statements but for Create,
// Release and Guard.
type tidbVersions struct {
	*sqlrun.VersionTable
	t *tidb
	q *tidbSQL
}

// tidbLeaseSQL is leaseSQL with a Release that reads only the old row's
// columns (TiDB evaluates every assignment of an UPDATE on the old row,
// MySQL each on the row as the assignments before it left it: both give
// the same result here) — the last hold keeps the row unexpired until the
// end of a minimum hold (:minhold) still ahead — and a Guard that locks
// the row exclusively.
func tidbLeaseSQL(table, token string) sqlrun.LeaseSQL {
	s := leaseSQL(table, token)
	s.Release = sqlrun.X(fmt.Sprintf(`UPDATE %[1]s SET expires_at = IF(holds > 1, expires_at,
    IF(acquired_at + INTERVAL :minhold MICROSECOND > %[4]s, acquired_at + INTERVAL :minhold MICROSECOND, %[3]s)),
  holds = holds - 1
WHERE name = :name AND owner = :owner AND %[2]s = :token AND holds > 0`, table, token, released, now))
	s.Guard = sqlrun.Q(fmt.Sprintf(`SELECT 1 FROM %[1]s
WHERE name = :name AND owner = :owner AND %[2]s = :token AND holds > 0 AND expires_at > %[3]s
FOR UPDATE`, table, token, now))
	return s
}

// tables compiles the TiDB dialect's statements.
func (t *tidb) tables() error {
	locks, floor, versions := "sqllock_locks", "sqllock_token_floor", "sqllock_versions"
	versionFloor, rowlocks := "sqllock_version_floor", "sqllock_rowlocks"
	sqlrun.Qualify(t.d.database, quote, &locks, &floor, &versions, &versionFloor, &rowlocks)
	c := &sqlrun.Compiler{Style: sqlrun.Question}

	ls := lockSQL(locks, floor)
	ls.LeaseSQL = tidbLeaseSQL(locks, "token")
	ls.Acquire = sqlrun.SQL{}         // tidbLocks.Acquire
	ls.Break = breakSQL(locks, false) // TiDB's waiters poll
	vs := versionSQL(versions, versionFloor)
	vs.LeaseSQL = tidbLeaseSQL(versions, "version")
	vs.Create = sqlrun.SQL{} // tidbVersions.Create

	const lease = `, 1, ` + now + `, ` + now + ` + INTERVAL ? MICROSECOND)`
	q := &tidbSQL{
		// A new row starts one above the token floor, read under a lock
		// that the reaper must wait for (TiDB has no shared one). Every
		// condition reads the row as it was: TiDB evaluates each
		// assignment on the old row, MySQL on the row as the assignments
		// before it left it, so each condition reads only columns not
		// yet assigned, but for expires_at's, whose owner and holds read
		// after their assignment still tell a grant from a refusal.
		lockUpsert: fmt.Sprintf(`INSERT INTO %[1]s (name, owner, token, holds, acquired_at, expires_at)
SELECT ?, ?, f.token + 1, 1, t.at, t.at + INTERVAL ? MICROSECOND
FROM %[2]s f JOIN (SELECT %[3]s AS at) AS t WHERE f.id = 1 FOR UPDATE
ON DUPLICATE KEY UPDATE
  token       = IF(%[1]s.expires_at <= VALUES(acquired_at), %[1]s.token + 1, %[1]s.token),
  acquired_at = IF(%[1]s.expires_at <= VALUES(acquired_at), VALUES(acquired_at), %[1]s.acquired_at),
  holds       = IF(%[1]s.expires_at <= VALUES(acquired_at), 1,
                  IF(%[1]s.owner = VALUES(owner) AND %[1]s.holds > 0, %[1]s.holds + 1, %[1]s.holds)),
  owner       = IF(%[1]s.expires_at <= VALUES(acquired_at), VALUES(owner), %[1]s.owner),
  expires_at  = IF(%[1]s.expires_at <= VALUES(acquired_at) OR (%[1]s.owner = VALUES(owner) AND %[1]s.holds > 0),
                  VALUES(expires_at), %[1]s.expires_at)`, locks, floor, now),
		lockToken: fmt.Sprintf(`SELECT token FROM %s WHERE name = ? AND owner = ? AND holds > 0 AND expires_at > %s`, locks, now),
		lockUndo: fmt.Sprintf(`UPDATE %[1]s SET expires_at = IF(holds > 1, expires_at, %[2]s), holds = holds - 1
WHERE name = ? AND owner = ? AND holds > 0`, locks, released),

		versionFloor:  fmt.Sprintf(`SELECT version FROM %s WHERE id = 1 FOR UPDATE`, versionFloor),
		versionInsert: fmt.Sprintf(`INSERT INTO %s (name, owner, version, holds, acquired_at, expires_at) VALUES (?, ?, ?`+lease, versions),
	}
	t.locks = tidbLocks{LockTable: sqlrun.NewLockTable(t.d.run, c, ls), t: t, q: q}
	t.versions = tidbVersions{VersionTable: sqlrun.NewVersionTable(t.d.run, c, vs), t: t, q: q}
	t.reap = tidbReap{
		locks:    newTiDBFloorReap(locks, "token", floor, "token"),
		versions: newTiDBFloorReap(versions, "version", versionFloor, "version"),
		rowLocks: rowLockReap{
			candidates: fmt.Sprintf(`SELECT name FROM %s LIMIT ?`, rowlocks),
			lock:       fmt.Sprintf(`SELECT 1 FROM %s WHERE name = ? FOR UPDATE NOWAIT`, rowlocks),
			delete:     deleteByName(rowlocks),
		},
	}
	return c.Err
}

// Acquire implements dialect.LockTable in two statements, outside a
// transaction: the upsert inserts a missing row one above the token floor,
// takes an expired or released row over with the next token, or re-enters
// the held lease of p.Owner, and changes nothing when another owner's live
// lease, or a minimum hold, keeps the row; then, if it changed a row, the
// token of p.Owner's live lease is read. Leases are granted for at least
// a TTL: the lease read is the one the upsert granted. Should the read
// fail, the hold granted is released again.
func (l *tidbLocks) Acquire(ctx context.Context, p dialect.AcquireParams) (int64, error) {
	var granted bool
	run := func(ctx context.Context, q sqlrun.Querier, mark string) (int64, error) {
		granted = false
		res, err := q.ExecContext(ctx, mark+l.q.lockUpsert, p.Name, p.Owner, p.TTL.Microseconds())
		if err != nil {
			return 0, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return 0, err
		}
		granted = true
		var token int64
		err = q.QueryRowContext(ctx, mark+l.q.lockToken, p.Name, p.Owner).Scan(&token)
		if errors.Is(err, sql.ErrNoRows) { // refused (a driver counting rows found, not changed)
			return 0, nil
		}
		return token, err
	}
	for try := 1; ; try++ {
		n, err := l.t.d.run.Grant(ctx, sqlrun.Grant{Run: run})
		if err != nil && granted {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sqlrun.UndoTimeout)
			_, uerr := l.t.d.db.ExecContext(uctx, l.q.lockUndo, p.Name, p.Owner)
			cancel()
			return 0, errors.Join(err, wrapTiDB(uerr))
		}
		if err == nil || try == maxGrantTries || ctx.Err() != nil || !errors.Is(err, dialect.ErrTransient) {
			return n, err
		}
	}
}

// Create implements dialect.VersionTable in a transaction: the version
// floor is read and locked (so that the reaper cannot raise it meanwhile),
// and the row inserted one above it.
func (v *tidbVersions) Create(ctx context.Context, p dialect.AcquireParams) (int64, error) {
	ttl := p.TTL.Microseconds()
	return v.t.grantTx(ctx, func(ctx context.Context, tx sqlrun.Querier, mark string) (int64, error) {
		var floor int64
		if err := tx.QueryRowContext(ctx, mark+v.q.versionFloor).Scan(&floor); err != nil {
			return 0, err
		}
		err := execOne(ctx, tx, mark+v.q.versionInsert, p.Name, p.Owner, floor+1, ttl)
		if isDuplicate(err) { // the row exists
			return 0, nil
		}
		return floor + 1, err
	})
}

// isDuplicate reports a duplicate-key error.
func isDuplicate(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// execOne runs query in tx and makes sure it changed one row. The error is
// the driver's.
func execOne(ctx context.Context, tx sqlrun.Querier, query string, args ...any) error {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err == nil && n != 1 {
		err = fmt.Errorf("sqllock: %d rows changed by a statement on a locked row, want 1", n)
	}
	return err
}

// maxGrantTries bounds how often grantTx runs a grant whose transaction
// the server rolled back (a deadlock, a retry limit): each try is safe to
// repeat, as nothing of it was committed.
const maxGrantTries = 3

// grantTx runs fn, the statements of a grant, as a transaction grant (see
// sqlrun.Runner.Grant): fn returns its number (a token, a version, 0 for a
// refusal) and the driver's errors, and puts mark in front of each
// statement. Its reads are all locking reads, which read the newest rows at
// any isolation level; READ COMMITTED spares it MySQL's gap locks, on which
// first uses of new names would deadlock.
func (t *tidb) grantTx(ctx context.Context, fn func(ctx context.Context, tx sqlrun.Querier, mark string) (int64, error)) (int64, error) {
	g := sqlrun.Grant{InTx: true, TxOptions: &sql.TxOptions{Isolation: sql.LevelReadCommitted}, Run: fn}
	for try := 1; ; try++ {
		n, err := t.d.run.Grant(ctx, g)
		if err == nil || try == maxGrantTries || ctx.Err() != nil || !errors.Is(err, dialect.ErrTransient) {
			return n, err
		}
	}
}
