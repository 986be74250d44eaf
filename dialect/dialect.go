// Package dialect is the seam between sqllock's strategies and a database.
//
// This is an implementer's API: it may change between minor versions. Users
// pick a dialect (postgres.New, mysql.New, sqlite.New) and hand it to a
// strategy constructor of package sqllock; they do not call these methods.
// A new database is supported by a package that implements [Dialect],
// whose [Catalogue] lists the primitives it can hold, and passes the
// conformance suite, dialecttest.Exercise.
//
// A strategy owns behaviour (leases, renewal, waiting, reentrancy, errors);
// a dialect owns SQL text and the mapping of server error codes. Every
// lease-based table is a [LeaseTable], so the lease machinery is written
// once against that interface. A grant is the fewest statements the
// database allows (one upsert for the lock and version tables, a short
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

// AcquireParams are the parameters of Dialect.Acquire.
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

	// Catalogue returns what the dialect offers: its tables, hooks and
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
	// result below p.Limit means that no table had a full batch.
	// Concurrent calls from many processes are safe.
	Reap(ctx context.Context, p ReapParams) (int, error)
}

// LeaseTable runs the statements on leases of a table with a row per lock
// name holding an owner, a fencing token, a hold count and an expiry on the
// database clock: the lock table and the version table. A lease is named by
// (name, owner, token); on the version table the token is the version.
// Every method is one statement (RenewMany: at most two), run on a
// connection of its own.
type LeaseTable interface {
	// RenewMany extends the live leases among ls to ttl from now and
	// reports, for each, whether it was renewed: false when the lease is no
	// longer held (expired, released, or taken over). Callers pass at most
	// MaxRenewBatch leases.
	RenewMany(ctx context.Context, ls []Lease, ttl time.Duration) ([]bool, error)
	// Release drops one hold of the lease; the last hold frees the lock while
	// keeping what the next token must exceed. It reports false when the
	// lease was taken over or already fully released.
	//
	// A last hold released before the lease's acquisition time plus
	// minHold, on the database clock, does not free the lock at once: the
	// row keeps no hold and stays unexpired until that instant, so that
	// no one (its owner included) acquires it before; then it is free
	// like any expired lease, with nobody left to renew or release it.
	// With minHold 0 (or once it has passed) the lock is free at once.
	Release(ctx context.Context, l Lease, minHold time.Duration) (bool, error)
	// Guard checks, inside tx, that the lease is live, and share-locks its
	// row until tx ends so that no takeover can commit before tx does. It
	// reports false when the lease is not live.
	Guard(ctx context.Context, tx *sql.Tx, l Lease) (bool, error)
	// List returns the held locks, and the released ones within their
	// minimum hold, ordered by name.
	List(ctx context.Context) ([]LockInfo, error)
}

// LockTable is the lock table: a LeaseTable whose rows are granted by one
// upsert.
type LockTable interface {
	LeaseTable
	// Acquire grants a lease on p.Name to p.Owner in one statement: it
	// inserts the row, takes over an expired or released row (with a new
	// token), or re-enters a live lease held by the same owner (same token,
	// one more hold). It returns the lease's token, or 0 when another owner
	// holds a live lease. Expiry is computed from the database clock. If ctx
	// ends while the statement runs, the statement is cancelled on the
	// server and Acquire returns only once it has ended: with the token if
	// it was applied anyway, else with an error wrapping ctx's (or
	// ErrOutcomeUnknown if the server could not be told).
	Acquire(ctx context.Context, p AcquireParams) (token int64, err error)
	// Remaining reports how long the live lease on name has left on the
	// database clock; ok is false when there is no row. Only waiters ask:
	// a dialect that announces releases marks the row as waited for.
	Remaining(ctx context.Context, name string) (d time.Duration, ok bool, err error)
	// Break ends the live lease on name now, whoever holds it, for an
	// operator: the row keeps its token, so the next grant's is larger;
	// the holder's renewals and guards fail from then on, and its release
	// reports the lease gone. A lock released within its minimum hold is
	// freed as well. It returns the lease it ended, and false (with no
	// error) when nothing held name.
	Break(ctx context.Context, name string) (broken LockInfo, ok bool, err error)
}

// MaxRenewBatch is the most leases one RenewMany call takes.
const MaxRenewBatch = 1000
