// Package ledger runs each occurrence of a periodic job at most once to
// success across replicas, and keeps a record of every attempt: a run
// ledger in the database that holds sqllock's locks.
//
// Every replica calls Run for the same job and occurrence, from its own
// timer (a crontab line, a scheduler's tick):
//
//	l, err := ledger.New(d, ledger.Options{TTL: 30 * time.Second})
//	res, err := l.Run(ctx, "nightly-report", ledger.Every(24*time.Hour).Phase(2*time.Hour),
//		func(ctx context.Context, r *ledger.Run) error { return report(ctx) })
//	if !res.Ran { /* another replica ran it, or runs it now (res.State) */ }
//
// The occurrence is named by the caller (At, Key) or derived from a period
// on the database's clock (Every), so replicas whose timers or clocks
// differ by up to half a period agree on it. A claim holds a lease on
// sqllock's lock table, named after the job and occurrence, while the
// function runs: renewed in the background, its loss cancels the
// function's context with cause sqllock.ErrLockLost, and a runner that
// dies or stops lets the next replica that asks take the occurrence over
// after one TTL, with a greater fencing token, marking the dead attempt
// abandoned. Every write to the ledger is made in a transaction guarded by
// the attempt's lease (sqllock.Lock.Guard), so an attempt whose lease ended
// records nothing: at most one attempt per occurrence is recorded as
// succeeded. Run.Guard guards the function's own writes the same way.
//
// Failed attempts are retried as Options.Retries and RetryBackoff say (the
// backoff on the database's clock). Runs lists the recorded attempts;
// Missed lists the occurrences of periodic jobs that no replica claimed,
// for an alert; Reap deletes old records.
//
// The ledger's tables are created by sqllock.Migrate (PostgreSQL, MySQL,
// MariaDB, SQLite; not TiDB).
package ledger
