package observe

import (
	"context"
	"time"
)

// The events of a run ledger (package ledger): the attempts of each
// occurrence of a job, the occurrences it did not run, and those no
// replica ran at all.

// Run states, as the events of a ledger report them.
const (
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	// RunAbandoned: the attempt's runner died (or lost its lease) before
	// it recorded an outcome; the next claimer marked it so.
	RunAbandoned = "abandoned"
	// RunRunning: a live attempt holds the occurrence.
	RunRunning = "running"
)

// RunEvent identifies one attempt of an occurrence of a ledger's job.
type RunEvent struct {
	Dialect    string // the dialect's Name
	Job        string
	Occurrence string // the occurrence's key
	Attempt    int    // 1 for the first attempt of the occurrence
	Owner      string
	Token      int64 // the attempt's fencing token
}

// RunClaimedEvent describes an attempt claimed: it starts to run.
type RunClaimedEvent struct {
	RunEvent
	// TookOver says an earlier attempt of the occurrence had a runner
	// that died mid-run: its lease ended, and this claim recorded it as
	// RunAbandoned.
	TookOver bool
}

// RunEndedEvent describes the end of an attempt.
type RunEndedEvent struct {
	RunEvent
	// State is RunSucceeded or RunFailed as recorded, or RunAbandoned
	// when the attempt lost its lease and could record nothing.
	State string
	// Took is the time from the claim to the end.
	Took time.Duration
	Err  error // the job's error, unless it succeeded
}

// RunSkippedEvent describes a call that did not run an occurrence.
type RunSkippedEvent struct {
	Dialect    string
	Job        string
	Occurrence string
	// State is why: RunSucceeded (done already), RunRunning (a live
	// attempt holds it, elsewhere), or RunFailed (no retry left, or not
	// yet: its backoff has not passed).
	State string
}

// MissedEvent describes one check of a job for missed occurrences: those
// expected by its period that no replica claimed within the grace time.
type MissedEvent struct {
	Dialect string
	Job     string
	// Missed is the number of missed occurrences the check found (0 when
	// none); Oldest is the expected time of the oldest of them.
	Missed int
	Oldest time.Time
}

// RunObserver is told of the attempts of a ledger's occurrences.
type RunObserver interface {
	// RunClaimed reports an attempt claimed; ctx is the claiming call's.
	RunClaimed(ctx context.Context, e RunClaimedEvent)
	// RunEnded reports how an attempt claimed through the same ledger
	// ended.
	RunEnded(ctx context.Context, e RunEndedEvent)
}

// RunSkippedObserver is told of calls that left an occurrence alone.
type RunSkippedObserver interface {
	// RunSkipped reports a call that ran nothing: the occurrence was done,
	// ran elsewhere, or had no attempt left.
	RunSkipped(ctx context.Context, e RunSkippedEvent)
}

// MissedObserver is told of each check for missed occurrences: the dead
// man's switch of periodic jobs.
type MissedObserver interface {
	// Missed reports the outcome of one check of one job, missed
	// occurrences or none, so that a gauge can fall back to 0.
	Missed(ctx context.Context, e MissedEvent)
}
