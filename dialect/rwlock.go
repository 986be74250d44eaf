package dialect

import (
	"context"
	"time"
)

// RWAcquireParams are the parameters of RWLockTable.Acquire.
type RWAcquireParams struct {
	Name  string
	Owner string
	TTL   time.Duration
	// Shared asks for the read side; false for the write side.
	Shared bool
	// Wait says that the caller will wait if refused: a refused writer
	// then records (or refreshes) its intent to write, which keeps new
	// readers out for TTL, and a refused caller marks the name as waited
	// for, so that releases are announced.
	Wait bool
}

// RWGrant is the outcome of RWLockTable.Acquire.
type RWGrant struct {
	// Token is the lease's token; 0 when refused.
	Token int64
	// Shared reports the side of the granted lease: a read asked for by the
	// owner of the write side re-enters the write lease (Shared false).
	Shared bool
	// Upgrade reports a refusal because the owner holds the read side and
	// asked for the write side (nothing was changed): two such owners
	// would wait for each other forever.
	Upgrade bool
	// Marked reports a refusal that marked the name as waited for the
	// first time (the mark stays): a release that raced with it may have
	// read no mark and gone unannounced, so the waiter should look again
	// soon rather than sleep for Left.
	Marked bool
	// Left is, after a refusal, how long the longest of the leases (and
	// the writer's intent) in the way has left on the database clock.
	Left time.Duration
}

// RWLockTable runs the statements of read/write locks: a table of holders,
// one row (a lease) per holder and name, and a head row per name that
// serialises grants and keeps a waiting writer's intent. Its LeaseTable
// methods act on the holders' leases, named by (name, owner, token).
type RWLockTable interface {
	LeaseTable
	// Acquire grants p.Owner a lease on the side of p.Name that p asks
	// for, in one short transaction that locks the name's head row: the
	// read side when no live writer holds the name and no other owner's
	// writer intent is live; the write side when no other owner holds a
	// live lease of either side. An owner that holds a live lease of the
	// name re-enters it (same token, one more hold), except that an owner
	// holding the read side asking for the write side is refused (Upgrade). A
	// new lease's token exceeds every token granted for the name before.
	// A write grant clears the owner's intent. Expiry is computed on the
	// database clock. An error leaves nothing granted unless it wraps
	// ErrOutcomeUnknown (the commit's reply was lost).
	Acquire(ctx context.Context, p RWAcquireParams) (RWGrant, error)
	// Withdraw removes owner's writer intent on name, if it has one, in
	// one statement, announcing it where releases are announced.
	Withdraw(ctx context.Context, name, owner string) error
	// Announces reports whether the releases of this table (and
	// withdrawn intents) reach the dialect's Notifier.
	Announces() bool
}
