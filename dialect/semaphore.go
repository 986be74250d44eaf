package dialect

import (
	"context"
	"errors"
	"time"
)

// ErrLimitMismatch means an acquire asked for a semaphore with another limit
// than the one its current holders were granted under. A name's limit is
// set by the acquire that finds the semaphore without holders; while any
// holder remains, every acquire must ask for the same limit. The root
// package re-exports it.
var ErrLimitMismatch = errors.New("sqllock: semaphore limit differs from the one its holders use")

// Semaphores is implemented by dialects that offer counting semaphores
// (sqllock.NewSemaphore). A dialect without it, such as TiDB's, makes
// sqllock.NewSemaphore fail with ErrUnsupported.
type Semaphores interface {
	// Semaphores returns the statements of the semaphore tables.
	Semaphores() SemaphoreTable
}

// SemaphoreParams are the parameters of SemaphoreTable.Acquire.
type SemaphoreParams struct {
	Name  string
	Owner string
	TTL   time.Duration
	// Limit is the number of holders the semaphore admits at once, at
	// least 1.
	Limit int
}

// SemaphoreTable runs the statements of the semaphore tables: a row per
// name (its limit, and what its next token must exceed) and a row per
// holder, keyed by (name, owner), holding a lease like a row of the lock
// table. Its LeaseTable methods act on the holders' rows; List returns
// one entry per holder, ordered by name.
type SemaphoreTable interface {
	LeaseTable
	// Acquire grants p.Owner one of p.Limit permits of p.Name, in one
	// short transaction that serialises the grants of p.Name (a database
	// with one writer at a time, SQLite, serialises all grants): it drops the name's expired holders, re-enters a
	// holder of the same owner (same token, one more hold), or, if fewer
	// than p.Limit holders remain, adds p.Owner with a new token, larger
	// than every token granted on p.Name before. It returns 0 when the
	// semaphore is full, and an error wrapping ErrLimitMismatch when the
	// name's holders were granted under another limit. Expiry is computed
	// from the database clock. If ctx ends meanwhile, the transaction is
	// ended on the server and Acquire returns only once it has ended (see
	// LockTable.Acquire).
	Acquire(ctx context.Context, p SemaphoreParams) (token int64, err error)
	// Remaining reports how long the semaphore's first lease to end has
	// left on the database clock; ok is false when it has no holder. Only
	// waiters ask: a dialect that announces releases marks the name as
	// waited for.
	Remaining(ctx context.Context, name string) (d time.Duration, ok bool, err error)
	// Announces reports whether releases of permits are announced through
	// the dialect's Notifier, so that waiters need not poll.
	Announces() bool
}
