package dialect

import (
	"context"
	"time"
)

// VersionRow is the state of one row of the version table.
type VersionRow struct {
	Version int64
	Owner   string
	Holds   int
	// Live reports an unexpired row on the database clock: a held lease,
	// or a released one within its minimum hold (Holds 0), which no one
	// may take yet.
	Live bool
	// Remaining is how long a live row has left on the database clock.
	Remaining time.Duration
}

// SwapParams are the parameters of the compare-and-swap transitions.
type SwapParams struct {
	Name  string
	Owner string
	TTL   time.Duration
	// Version is the version the caller read; the swap applies only if the
	// row still has it.
	Version int64
}

// VersionTable is the version table of the optimistic strategy: a
// LeaseTable whose rows change only by compare-and-swap on the version,
// which is the lease's token. The grants (Create, Take, Reenter) behave as
// LockTable.Acquire when ctx ends while they run.
type VersionTable interface {
	LeaseTable
	// Read returns name's row; ok is false when there is none.
	Read(ctx context.Context, name string) (row VersionRow, ok bool, err error)
	// Create inserts name's row, held by p.Owner for p.TTL, at a version
	// above the version floor: above every version of a row that was
	// deleted (reaped), so that a name's versions keep growing across
	// reaping. It returns the new row's version, or 0, without error or
	// log noise, if the row exists.
	Create(ctx context.Context, p AcquireParams) (version int64, err error)
	// Take sets owner, a new version, one hold and a new expiry if the row
	// still has p.Version and is free or expired, and returns the new
	// version, or 0 if it did not. The new version is greater than
	// p.Version; a dialect whose tokens carry an epoch (see the postgres
	// dialect's timeline) may make it larger than p.Version + 1.
	Take(ctx context.Context, p SwapParams) (version int64, err error)
	// Reenter adds a hold and extends the lease if the row still has
	// p.Version and a live lease held by p.Owner.
	Reenter(ctx context.Context, p SwapParams) (bool, error)
}
