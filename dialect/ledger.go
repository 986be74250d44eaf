package dialect

import (
	"context"
	"database/sql"
	"time"
)

// RunLedger is the run ledger's tables (package ledger, schema version 17
// on PostgreSQL, 16 on MySQL, 15 on SQLite): one row per attempt of an
// occurrence of a job, and one per job with its period. The ledger holds
// each attempt's lease on the lock table; the writes run in the caller's
// transaction, which the caller has guarded by that lease
// (LeaseTable.Guard) before, so that an attempt whose lease ended records
// nothing. Times are the database's, in UTC, to the microsecond.
type RunLedger interface {
	// Now returns the database's time.
	Now(ctx context.Context) (time.Time, error)
	// Attempts returns, inside tx, the attempts of (job, occurrence),
	// the first first, and the database's time as it read them (zero
	// when there are none).
	Attempts(ctx context.Context, tx *sql.Tx, job, occurrence string) ([]RunRecord, time.Time, error)
	// Abandon marks, inside tx, the running attempts of (job, occurrence)
	// abandoned, finished now, and returns how many it marked.
	Abandon(ctx context.Context, tx *sql.Tx, job, occurrence string) (int, error)
	// Start inserts, inside tx, the attempt r (Job, Occurrence, Attempt,
	// Owner, Token), running since now, and records the job's schedule s
	// (Job, Period, Phase, Grace): a job seen first, or whose period or
	// phase changed, is first seen now; every start sets last seen to now.
	Start(ctx context.Context, tx *sql.Tx, r RunRecord, s JobSchedule) error
	// Finish records, inside tx, the outcome of the running attempt r
	// (named by Job, Occurrence, Attempt and Token): r.State and r.Err,
	// finished now. It reports false when no such attempt is running.
	Finish(ctx context.Context, tx *sql.Tx, r RunRecord) (bool, error)
	// Runs returns up to limit attempts of job (of every job for ""),
	// the latest started first.
	Runs(ctx context.Context, job string, limit int) ([]RunRecord, error)
	// Jobs returns the schedules of job (of every job for "") that have a
	// period, and the database's time.
	Jobs(ctx context.Context, job string) ([]JobSchedule, time.Time, error)
	// Occurrences returns the distinct occurrences of job that have an
	// attempt, from from to to (both included, compared byte for byte),
	// in ascending order.
	Occurrences(ctx context.Context, job, from, to string) ([]string, error)
	// Reap deletes up to limit attempts that finished (or, unfinished,
	// started) more than age ago, and moves the first seen time of every
	// job first seen before then to then. It returns the number of
	// attempts deleted.
	Reap(ctx context.Context, age time.Duration, limit int) (int, error)
}

// RunRecord is a row of the run ledger: one attempt of an occurrence.
type RunRecord struct {
	Job, Occurrence string
	Attempt         int
	// State is "running", "succeeded", "failed" or "abandoned".
	State string
	Owner string
	Token int64
	// StartedAt is when the attempt was claimed; FinishedAt when its
	// outcome was recorded (zero while it runs).
	StartedAt, FinishedAt time.Time
	// Err is a failed attempt's error text.
	Err string
}

// JobSchedule is a job's row of the run ledger.
type JobSchedule struct {
	Job string
	// Period is the time between occurrences (0: the caller names the
	// occurrences), Phase their offset from the multiples of Period
	// since the Unix epoch, Grace how long after its time an occurrence
	// with no attempt counts as missed (0: the reader's default).
	Period, Phase, Grace time.Duration
	// FirstSeen is the start of the job's history under this period;
	// LastSeen its latest start of an attempt.
	FirstSeen, LastSeen time.Time
}
