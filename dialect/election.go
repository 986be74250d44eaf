package dialect

import (
	"time"
)

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
