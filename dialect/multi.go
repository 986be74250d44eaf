package dialect

import (
	"context"
	"time"
)

// MaxMultiAcquire is the most names one MultiLockTable.AcquireAll call
// takes.
const MaxMultiAcquire = 64

// MultiAcquireParams are the parameters of MultiLockTable.AcquireAll.
type MultiAcquireParams struct {
	// Names are the names to acquire: at least one, at most
	// MaxMultiAcquire, distinct, in ascending byte order (the order in
	// which every caller takes them, so that two callers asking for
	// overlapping sets never wait for each other in a cycle; a dialect
	// that locks rows in another statement, as ReleaseAll may, locks them
	// in the same byte order).
	Names []string
	Owner string
	TTL   time.Duration
}

// MultiLockTable grants several names of the lock table at once: all of
// them, or none.
type MultiLockTable interface {
	// AcquireAll grants leases on every name of p.Names to p.Owner, or on
	// none. Each name is granted as LockTable.Acquire grants it (insert,
	// take over an expired or released row with a new token, or re-enter
	// a live lease of the same owner), by the same statement, run for each
	// name in the order given inside one short transaction that commits
	// only if every name was granted. It returns the tokens, in the order
	// of p.Names; when another owner holds a live lease on a name, nothing
	// is granted, and refused is that name (the first such in p.Names).
	//
	// If ctx ends while a statement runs, the statement is cancelled on
	// the server and the transaction rolled back: nothing is granted and
	// the error wraps ctx's. The commit itself is never cancelled. When the
	// commit's outcome is unknown, the error wraps ErrOutcomeUnknown and
	// tokens are those the commit would have granted, for the caller to
	// release (ReleaseAll) so that nothing is left behind.
	AcquireAll(ctx context.Context, p MultiAcquireParams) (tokens []int64, refused string, err error)
	// ReleaseAll drops one hold of each lease of ls (distinct names, at
	// most MaxMultiAcquire, ascending by name), as LeaseTable.Release
	// does for one, in one statement (a dialect may split a large set
	// into a few): releases of names someone waits for are announced as
	// Release announces them. It reports, for each lease, whether a hold
	// was dropped: false when the lease was taken over or already fully
	// released.
	ReleaseAll(ctx context.Context, ls []Lease, minHold time.Duration) ([]bool, error)
}
