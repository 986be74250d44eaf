package dialect

import (
	"context"
	"time"
)

// Elections stores a value with each lease of the lock table (schema
// version 11), on which sqllock.NewElection builds leader
// election: a leader is the holder of a live lease on the election's name
// that has proclaimed a value for its token. Acquire's takeover of a row
// gives it a new token, so a value proclaimed for an earlier token is never
// read as the new holder's.
type Elections interface {
	// Campaign grants a lease as LockTable.Acquire does, and stores value
	// as the value of the lease it grants (or re-enters), in the same
	// statement: a Campaign's lease is a leader from its grant on.
	Campaign(ctx context.Context, p AcquireParams, value string) (token int64, err error)
	// Proclaim stores value as the value of the live lease l, in one
	// guarded statement that changes nothing unless l is still live (not
	// expired, released or taken over; on PostgreSQL, granted on the
	// current timeline). It reports false when l is not live.
	Proclaim(ctx context.Context, l Lease, value string) (bool, error)
	// Leader reads the live lease on name that has proclaimed a value;
	// ok is false when there is none (no row, an expired or released row,
	// or a holder that has not proclaimed).
	Leader(ctx context.Context, name string) (info LeaderInfo, ok bool, err error)
}

// LeaderInfo describes the leader of an election: the live lease on its
// name and the value its holder proclaimed.
type LeaderInfo struct {
	Name  string
	Owner string
	// Term is the lease's fencing token.
	Term  int64
	Value string
	// ExpiresAt is the lease's expiry on the database clock, in UTC, as of
	// the read; the leader's renewals push it on.
	ExpiresAt time.Time
	// ExpiresIn is ExpiresAt minus the database's time of the read.
	ExpiresIn time.Duration
}
