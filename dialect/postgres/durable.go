package postgres

import (
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// WithSynchronousCommit makes lock statements durable on a synchronous
// standby: every grant, renewal and release, every pessimistic lock's
// transaction, and every transaction a lock guards (Lock.Guard) commits
// with synchronous_commit set to level for that transaction alone (by
// set_config in the statement itself: no extra round trip, no session
// state, so it works through transaction poolers). level is "remote_apply"
// (the standby has applied the commit: what a promoted standby would
// show), "on" (flushed to the standby's disk) or "remote_write".
//
// Without it, a grant acknowledged by an asynchronous primary can be lost
// by a failover, and with it the lease its holder trusts; fencing tokens
// still never go backwards (see Timeline), but two holders may overlap.
//
// A statement on a server whose synchronous_standby_names is empty fails
// with an error wrapping dialect.ErrUnsupported: it would not wait for any
// standby. (A server with a synchronous standby that is down waits for it,
// as every synchronous commit does.)
//
// A cancel request that reaches a commit waiting for the standby makes
// PostgreSQL commit locally and report success with a warning, which
// would hand out a lease the standby never saw. So the dialect never
// cancels a commit: a grant whose context ends is cancelled on the server
// as usual, but if it completed all the same it is released again and
// reported as failed; renewals and releases are not cancelled on the
// server (their connection is closed, an outcome-unknown error); and the
// commit of a pessimistic lock's transaction does not watch any context.
// Guarded transactions are the caller's: commit them with
// (*sql.Tx).Commit, which sends no cancel request either.
func WithSynchronousCommit(level string) Option {
	return func(d *Dialect) error {
		switch level {
		case "remote_apply", "on", "remote_write":
			d.syncCommit = level
			return nil
		}
		return fmt.Errorf("%w: synchronous_commit level %q: want remote_apply, on or remote_write", dialect.ErrInvalidOptions, level)
	}
}

// noStandby is the value durable sets synchronous_commit to when no
// synchronous standby is configured: an invalid one, so that the statement
// fails with an error that names the problem (see wrap).
const noStandby = "sqllock: no synchronous standby is configured (synchronous_standby_names is empty)"

// durable is the SQL condition that sets synchronous_commit to level for
// the statement's transaction: true when level is empty. In a WHERE clause
// it is evaluated for every row the statement changes, and set before the
// commit.
func durable(level string) string {
	if level == "" {
		return "true"
	}
	return fmt.Sprintf(`set_config('synchronous_commit', CASE WHEN current_setting('synchronous_standby_names') = '' THEN '%s' ELSE '%s' END, true) IS NOT NULL`,
		noStandby, level)
}
