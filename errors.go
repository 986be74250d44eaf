package sqllock

import (
	"context"
	"errors"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// Errors returned by lockers, locks and helpers. Test for them with errors.Is.
var (
	// ErrLocked means another owner holds the lock.
	ErrLocked = dialect.ErrLocked
	// ErrLockLost means the lock is no longer held by this acquisition: its
	// lease expired, was taken over, or could not be renewed within its trust
	// window. It is the cause of a lost lock's context.
	ErrLockLost = errors.New("sqllock: lock lost")
	// ErrNotHeld means the lock handle was already released. It is the cause
	// of a released lock's context.
	ErrNotHeld = errors.New("sqllock: lock not held")
	// ErrInvalidName is returned for a lock name that is empty, longer than
	// MaxNameLen bytes, not valid UTF-8, or contains a NUL byte.
	ErrInvalidName = errors.New("sqllock: invalid lock name")
	// ErrInvalidOwner is returned for an owner identity (see WithOwner) that
	// breaks the same rules as a name.
	ErrInvalidOwner = errors.New("sqllock: invalid owner")
	// ErrInvalidOptions is returned by constructors for options that are
	// out of range or inconsistent.
	ErrInvalidOptions = dialect.ErrInvalidOptions

	// ErrUnsupported means the dialect does not implement the requested
	// strategy. SQLite, for one, has no pessimistic strategy: it has no row
	// locks (a writing transaction locks the whole database, a reading one
	// nothing), so there is no SELECT ... FOR UPDATE to hold a lock with.
	ErrUnsupported = dialect.ErrUnsupported
	// ErrSchemaMissing means the lock tables are missing or outdated: run
	// Migrate, or apply the dialect's migration files with your own tool.
	ErrSchemaMissing = dialect.ErrSchemaMissing
	// ErrOutcomeUnknown means a statement may or may not have been applied:
	// the connection failed (or the statement was abandoned) after it was
	// sent. It is never returned when no statement was sent: that is
	// ErrPoolExhausted, ErrUnavailable or the context's error. See
	// Lock.Release.
	ErrOutcomeUnknown = dialect.ErrOutcomeUnknown
	// ErrRolledBack means the transaction of a pessimistic lock (Lock.Tx)
	// was rolled back instead of committed: none of its statements were
	// applied, and the lock is released. Lock.Release reports it when a
	// failed statement had aborted the transaction (PostgreSQL), or when
	// Abort of a re-entered hold had marked it for rollback.
	ErrRolledBack = dialect.ErrRolledBack
	// ErrUnavailable means no connection to the database could be
	// established: no statement was sent, nothing was applied, and trying
	// again later is safe.
	ErrUnavailable = dialect.ErrUnavailable
	// ErrNoAnswer means the database did not answer within the dialect's
	// statement timeout (postgres.WithStatementTimeout,
	// mysql.WithStatementTimeout; default 10 s), which bounds every call
	// even when its context never ends. It comes with ErrUnavailable when
	// no statement was sent, else with ErrOutcomeUnknown.
	ErrNoAnswer = dialect.ErrNoAnswer
	// ErrReadOnly means the server refuses writes: a standby, a read
	// replica, or a primary demoted after a failover. Locks are granted
	// and renewed only on a writable primary; a held lease whose renewal
	// reaches a read-only server is lost at once (its context is cancelled
	// with ErrLockLost).
	ErrReadOnly = dialect.ErrReadOnly
	// ErrPoolExhausted means no connection of the pool became free before
	// the context ended. Every held pessimistic lock pins a connection: see
	// NewPessimistic on sizing the pool.
	ErrPoolExhausted = dialect.ErrPoolExhausted
	// ErrNilDB is returned for a nil database, pool or dialect.
	ErrNilDB = dialect.ErrNilDB
	// ErrInvalidIdentifier is returned by dialects for a schema or database
	// name that is not a plain SQL identifier.
	ErrInvalidIdentifier = dialect.ErrInvalidIdentifier

	// ErrUpgrade is returned when an owner that holds a lock in shared mode
	// asks for it exclusively. Upgrading in place would deadlock as soon as
	// two readers tried it at once: release the shared holds first.
	ErrUpgrade = errors.New("sqllock: a shared hold cannot be upgraded to exclusive")
	// ErrTransient means the database rolled a transaction back because of
	// a deadlock or a serialization failure: running it again may succeed.
	// InTx retries it; it returns an error wrapping ErrTransient only when
	// attempts ran out.
	ErrTransient = dialect.ErrTransient
)

// Errors of leader election (NewElection).
var (
	// ErrNoLeader is returned by Election.Leader when the election has no
	// leader: nobody holds a live lease on its name with a proclaimed
	// value.
	ErrNoLeader = errors.New("sqllock: no leader")

	// ErrInvalidValue is returned for a leader value that is longer than
	// MaxValueLen, not valid UTF-8, or contains a NUL byte.
	ErrInvalidValue = errors.New("sqllock: invalid leader value")
)

// maxTransientRetries bounds immediate retries of an acquire statement that
// the database rolled back (deadlock, serialization failure).
const maxTransientRetries = 3

// acquireError describes a failed acquire statement, joining ctx's error
// when ctx ended meanwhile.
func acquireError(ctx context.Context, name string, err error) error {
	return fmt.Errorf("sqllock: acquire %q: %w", name, sqlrun.WithCause(ctx, err))
}
