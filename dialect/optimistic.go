package dialect

import (
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
