// Package dialect is the seam between sqllock's strategies and a database.
//
// This is an implementer's API: it may change between minor versions. Users
// pick a dialect (postgres.New, mysql.New, sqlite.New) and hand it to a
// strategy constructor of package sqllock; they do not call these methods.
// A new database is supported by a package that implements [Dialect],
// whose [Catalogue] declares the statements of each primitive it can hold
// ([LockSQL], [SemaphoreSQL], …) and the [Hooks] around them, and passes
// the conformance suite, dialecttest.Exercise.
//
// A strategy owns behaviour (leases, renewal, waiting, reentrancy, errors);
// sqllock's runner owns how statements run (binding, connections, the
// grant protocol, ticket queues); a dialect owns SQL text, the mapping of
// server error codes and its notifier. A grant is the fewest statements
// the database allows (one upsert for the lock and version tables, a short
// transaction for semaphores, sets and read/write locks), so the round
// trips of a strategy are those of the minimal raw SQL doing the same
// transition. Implementations of every interface here must be safe for
// concurrent use.
package dialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io/fs"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
)

// Errors a dialect reports in a form the strategies and users can test with
// errors.Is. The root package re-exports them under the same names.
var (
	// ErrSchemaMissing means the lock tables are missing or older than this
	// version of the package expects: run sqllock.Migrate (or apply the
	// dialect's migration files with your own tool).
	ErrSchemaMissing = errors.New("sqllock: lock schema missing or outdated: run sqllock.Migrate")

	// ErrLocked means another owner holds the lock (or, for a transaction's
	// own statements, that a lock wait timed out).
	ErrLocked = errors.New("sqllock: locked by another owner")

	// ErrPoolExhausted means no connection of the pool became free before
	// the context ended: every connection was in use, for instance pinned
	// by held pessimistic locks. See sqllock.NewPessimistic on sizing pools.
	ErrPoolExhausted = errors.New("sqllock: connection pool exhausted")

	// ErrTransient means the database rolled the statement back because of a
	// deadlock or serialization failure; repeating it is safe.
	ErrTransient = errors.New("sqllock: transient database conflict")

	// ErrOutcomeUnknown means a statement may or may not have been applied:
	// it was sent (or may have been), and the connection failed, or the
	// statement was abandoned, before the reply arrived. It is never
	// returned when no statement can have reached the server: see
	// ErrPoolExhausted and ErrUnavailable. The lock's fencing token settles
	// what happened later.
	ErrOutcomeUnknown = errors.New("sqllock: outcome unknown: the connection failed after the statement was sent")

	// ErrRolledBack means a transaction that was to commit was rolled back
	// instead, by the server (a PostgreSQL transaction aborted by a failed
	// statement turns COMMIT into ROLLBACK): none of its statements were
	// applied.
	ErrRolledBack = errors.New("sqllock: the transaction was rolled back: none of its statements were applied")

	// ErrUnavailable means no connection to the database could be
	// established or used (refused, unreachable, authentication failed, or
	// broken before the statement was written): no statement was sent, so
	// nothing was applied, and trying again later is safe.
	ErrUnavailable = errors.New("sqllock: database unavailable: no statement was sent")

	// ErrNoAnswer means the database did not answer within the statement
	// timeout (Hooks.StatementTimeout; the dialects' WithStatementTimeout),
	// although the caller's context had not ended: a server that accepts
	// connections and then says nothing, or a network that went silent. It
	// comes with ErrUnavailable when no statement was sent (the connection
	// was never established), else with ErrOutcomeUnknown.
	ErrNoAnswer = errors.New("sqllock: no answer from the database within the statement timeout")

	// ErrReadOnly means the server refuses writes: a standby (hot
	// standby, read replica) or a server set read-only, as a demoted
	// primary is after a failover. Locks are granted and renewed only on a
	// writable primary; a lease whose renewal meets a read-only server is
	// lost at once. The root package re-exports it.
	ErrReadOnly = errors.New("sqllock: the database server is read-only (a standby or replica?)")

	// ErrUnsupported means the database (or its configuration) cannot
	// offer what was asked for; the error says why. The root package
	// re-exports it.
	ErrUnsupported = errors.New("sqllock: not supported by this dialect")

	// ErrInvalidOptions is returned for options that are out of range or
	// inconsistent. The root package re-exports it.
	ErrInvalidOptions = errors.New("sqllock: invalid options")

	// ErrNilDB is returned for a nil *sql.DB, pool or dialect.
	ErrNilDB = errors.New("sqllock: nil database")

	// ErrInvalidIdentifier is returned for a schema or database name that is
	// not a plain SQL identifier (letters, digits and underscores, not
	// starting with a digit, at most 63 bytes).
	ErrInvalidIdentifier = errors.New("sqllock: invalid SQL identifier")
)

// driverBadConn, returned from sql.Conn.Raw, makes database/sql discard the
// connection.
var driverBadConn = driver.ErrBadConn

// WaitError is a refusal that knows when to ask again: the server refuses
// every grant for Left more (a PostgreSQL primary waiting out the leases of
// the one it replaced, say). It is a refusal (errors.Is(err, ErrLocked)),
// so TryAcquire callers see one; waiting callers sleep Left before they try
// again.
type WaitError struct {
	Left time.Duration
	Msg  string // why
}

// Error returns Msg.
func (e *WaitError) Error() string { return e.Msg }

// Is reports whether target is ErrLocked.
func (e *WaitError) Is(target error) bool { return target == ErrLocked }

// Lease names one acquisition of a lock in the lock table.
type Lease struct {
	Name  string
	Owner string
	Token int64
}

// AcquireParams are the parameters of a grant: a lease on Name for Owner, for TTL.
type AcquireParams struct {
	Name  string
	Owner string
	TTL   time.Duration
}

// ReapParams are the parameters of Dialect.Reap.
type ReapParams struct {
	// Limit bounds the number of rows one call deletes from each table.
	Limit int
}

// LockInfo describes one held lock, for operators.
type LockInfo struct {
	Name  string
	Owner string
	Token int64
	// Holds counts the unreleased holds; 0 for a lock released within its
	// minimum hold, which nobody holds and nobody can acquire before
	// ExpiresAt.
	Holds      int
	AcquiredAt time.Time // database clock, UTC
	ExpiresAt  time.Time // database clock, UTC
	// ExpiresIn is ExpiresAt minus the database's current time: negative
	// for a lease that expired and has not been taken over or reaped yet.
	ExpiresIn time.Duration
	// Value is the value the holder set on its lock (sqllock's
	// Lock.SetValue), or, for a Holder whose Primitive is "election", the
	// value its leader proclaimed; empty when it has none.
	Value string
}

// Holder is one holder of a lock of any primitive, as package inspect
// lists them for operators.
type Holder struct {
	// LockInfo is the holder's lease. A row lock (Primitive
	// "pessimistic") has none: its Owner is the server session holding
	// it, Holds is 1, AcquiredAt is the start of its transaction, and
	// Token, ExpiresAt and ExpiresIn are zero.
	LockInfo
	// Primitive is "table", "election" (a lease of the lock table whose
	// holder proclaimed a value for its token), "optimistic", "semaphore",
	// "rwlock" or "pessimistic".
	Primitive string
	// Mode is "exclusive" or "shared" (a semaphore's permit, a read
	// lock, a row lock in share mode); "unknown" for a PostgreSQL row lock
	// whose session has run another statement since it locked the row.
	Mode string
	// Limit is a semaphore's number of holders at once; 0 elsewhere.
	Limit int
	// Waiters counts those waiting for the lock where the database shows
	// them: the sessions queued for a row lock, the live tickets of a
	// lock table's name; 0 elsewhere.
	Waiters int
	// HeldFor is how long the holder has held the lock, on the database
	// clock.
	HeldFor time.Duration
}

// Dialect is what a database must provide for sqllock.
//
// Implementations map server errors onto ErrSchemaMissing, ErrTransient,
// ErrLocked, ErrUnavailable and ErrOutcomeUnknown (wrapping the original
// error), and never close the pool they were given.
type Dialect interface {
	// Name is the dialect's name, such as "postgres", "mysql" or "sqlite".
	Name() string
	// DB is the pool lock statements run on; it belongs to the caller.
	DB() *sql.DB

	// Migrations returns the dialect's golang-migrate files at the root of
	// the returned file system.
	Migrations() fs.FS
	// MigrationDriver returns a golang-migrate driver that runs on conn,
	// records versions in a table of its own, and serialises concurrent
	// migrators. Closing the driver closes conn, never the pool; so does a
	// failure to make the driver.
	MigrationDriver(ctx context.Context, conn *sql.Conn) (database.Driver, error)

	// Catalogue returns what the dialect offers: its statements, hooks and
	// facts. It is the same at every call.
	Catalogue() Catalogue
	// Reap deletes, in one call, a batch of up to p.Limit rows from each
	// table of the dialect's strategies that keeps rows nobody needs:
	//   - the lock table's and the version table's expired
	//     and released rows, on database time, never a live lease's;
	//   - the row-lock table's ([Pessimistic]) rows that no transaction
	//     holds or waits for, skipping locked rows instead of waiting;
	//   - a dialect's own bookkeeping, such as spent token rows.
	// It never lets a token or version handed out for a name after a
	// deletion be smaller than, or equal to, one handed out before it. It
	// returns the number of rows deleted from all tables together, so a
	// result below p.Limit means that no table had a full batch. A table's
	// batch may be short by the rows it passed over (locked or fenced by
	// acquirers) while more rows wait behind them: the reaper goes on while
	// a call deletes at least half of p.Limit.
	// Concurrent calls from many processes are safe.
	Reap(ctx context.Context, p ReapParams) (int, error)
}

// MaxRenewBatch is the most leases one RenewMany call takes.
const MaxRenewBatch = 1000
