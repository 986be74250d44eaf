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
//     of the token it granted (LockSQL.AcquiredToken), as TiDB's
//     LAST_INSERT_ID(expr) cannot carry a token out of an upsert; the
//     version table's Create is a short transaction, a locking read of the
//     floor, then the insert (VersionSQL.Floor). A grant whose transaction
//     the server rolled back runs again, up to grantTries in all.
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
	d    *Dialect
	reap tidbReap
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
	t := &tidb{d: d}
	hooks := d.cat.Hooks
	hooks.Wrap, hooks.GrantTries = wrapTiDB, grantTries
	// Nothing has run yet: the runner can still change.
	d.run = &sqlrun.Runner{DB: db, Hooks: hooks}
	d.cat = dialect.Catalogue{
		Style: dialect.Question, Hooks: hooks, Pessimistic: t, RowLocks: d.listRowLocks,
		Reasons: map[string]string{
			"Multi":          "lock sets are not supported on TiDB",
			"Fair":           "FIFO queues are not supported on TiDB",
			"Semaphores":     "semaphores are not supported on TiDB",
			"FairSemaphores": "semaphores are not supported on TiDB",
			"RWLocks":        "read/write locks are not supported on TiDB",
			"Elections":      "leader election is not offered on TiDB",
			"Runs":           "the run ledger is not offered on TiDB",
			"Latches":        "countdown latches are not offered on TiDB (not tested there)",
			"Barriers":       "barriers are not offered on TiDB (not tested there)",
		},
		NoSharedRowLock: true,
		Cache:           new(dialect.Cache),
	}
	if err := t.build(&d.cat); err != nil {
		return nil, err
	}
	d.tidb = t
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

// tidbLeaseSQL is leaseSQL with a Release that reads only the old row's
// columns (TiDB evaluates every assignment of an UPDATE on the old row,
// MySQL each on the row as the assignments before it left it: both give
// the same result here) — the last hold keeps the row unexpired until the
// end of a minimum hold (:minhold) still ahead — and a Guard that locks
// the row exclusively.
func tidbLeaseSQL(table, token string) dialect.LeaseSQL {
	s := leaseSQL(table, token)
	s.Release = dialect.X(fmt.Sprintf(`UPDATE %[1]s SET expires_at = IF(holds > 1, expires_at,
    IF(acquired_at + INTERVAL :minhold MICROSECOND > %[4]s, acquired_at + INTERVAL :minhold MICROSECOND, %[3]s)),
  holds = holds - 1
WHERE name = :name AND owner = :owner AND %[2]s = :token AND holds > 0`, table, token, released, now))
	s.Guard = dialect.Q(fmt.Sprintf(`SELECT 1 FROM %[1]s
WHERE name = :name AND owner = :owner AND %[2]s = :token AND holds > 0 AND expires_at > %[3]s
FOR UPDATE`, table, token, now))
	return s
}

// grantTries bounds how often a grant whose transaction the server rolled
// back (a deadlock, a retry limit) runs: each try is safe to repeat, as
// nothing of it was committed.
const grantTries = 3

// build declares the TiDB dialect's statements in cat, and compiles the
// reaper's.
func (t *tidb) build(cat *dialect.Catalogue) error {
	locks, floor, versions := "sqllock_locks", "sqllock_token_floor", "sqllock_versions"
	versionFloor, rowlocks := "sqllock_version_floor", "sqllock_rowlocks"
	sqlrun.Qualify(t.d.database, quote, &locks, &floor, &versions, &versionFloor, &rowlocks)

	// The lock table's Acquire is two statements (see tidb): an upsert,
	// then the read of the token it granted. A new row starts one above
	// the token floor, read under a lock that the reaper must wait for
	// (TiDB has no shared one). Every condition reads the row as it was:
	// TiDB evaluates each assignment on the old row, MySQL on the row as
	// the assignments before it left it, so each condition reads only
	// columns not yet assigned, but for expires_at's, whose owner and
	// holds read after their assignment still tell a grant from a
	// refusal. Leases are granted for at least a TTL: the lease the read
	// finds is the one the upsert granted.
	ls := dialect.LockSQL{LeaseSQL: tidbLeaseSQL(locks, "token"),
		Acquire: dialect.X(fmt.Sprintf(`INSERT INTO %[1]s (name, owner, token, holds, acquired_at, expires_at)
SELECT :name, :owner, f.token + 1, 1, t.at, t.at + INTERVAL :ttl MICROSECOND
FROM %[2]s f JOIN (SELECT %[3]s AS at) AS t WHERE f.id = 1 FOR UPDATE
ON DUPLICATE KEY UPDATE
  token       = IF(%[1]s.expires_at <= VALUES(acquired_at), %[1]s.token + 1, %[1]s.token),
  acquired_at = IF(%[1]s.expires_at <= VALUES(acquired_at), VALUES(acquired_at), %[1]s.acquired_at),
  holds       = IF(%[1]s.expires_at <= VALUES(acquired_at), 1,
                  IF(%[1]s.owner = VALUES(owner) AND %[1]s.holds > 0, %[1]s.holds + 1, %[1]s.holds)),
  owner       = IF(%[1]s.expires_at <= VALUES(acquired_at), VALUES(owner), %[1]s.owner),
  expires_at  = IF(%[1]s.expires_at <= VALUES(acquired_at) OR (%[1]s.owner = VALUES(owner) AND %[1]s.holds > 0),
                  VALUES(expires_at), %[1]s.expires_at)`, locks, floor, now)),
		AcquiredToken: dialect.Q(fmt.Sprintf(`SELECT token FROM %s
WHERE name = :name AND owner = :owner AND holds > 0 AND expires_at > %s`, locks, now)),
		AcquireUndo: dialect.X(fmt.Sprintf(`UPDATE %[1]s SET expires_at = IF(holds > 1, expires_at, %[2]s), holds = holds - 1
WHERE name = :name AND owner = :owner AND holds > 0`, locks, released)),
	}
	mine := lockSQL(locks, floor) // MySQL's
	ls.Remaining, ls.Holder = mine.Remaining, mine.Holder
	ls.Break = breakSQL(locks, false) // TiDB's waiters poll
	cat.Locks = &ls

	// The version table's Create reads and locks the version floor (so
	// that the reaper cannot raise it meanwhile), then inserts the row one
	// above it.
	vs := versionSQL(versions, versionFloor)
	vs.LeaseSQL = tidbLeaseSQL(versions, "version")
	vs.Floor = dialect.Q(fmt.Sprintf(`SELECT version FROM %s WHERE id = 1 FOR UPDATE`, versionFloor))
	vs.Create = dialect.X(fmt.Sprintf(`INSERT INTO %s (name, owner, version, holds, acquired_at, expires_at)
VALUES (:name, :owner, :version, 1, %[2]s, %[2]s + INTERVAL :ttl MICROSECOND)
ON DUPLICATE KEY UPDATE name = name`, versions, now))
	cat.Versions = &vs

	t.reap = tidbReap{
		locks:    newTiDBFloorReap(locks, "token", floor, "token"),
		versions: newTiDBFloorReap(versions, "version", versionFloor, "version"),
		rowLocks: rowLockReap{
			candidates: fmt.Sprintf(`SELECT name FROM %s LIMIT ?`, rowlocks),
			lock:       fmt.Sprintf(`SELECT 1 FROM %s WHERE name = ? FOR UPDATE NOWAIT`, rowlocks),
			delete:     deleteByName(rowlocks),
		},
	}
	_, err := sqlrun.Open(t.d)
	return err
}
