package postgres

import "fmt"

// Fencing tokens across failovers.
//
// A sequence is replicated like any table: after an asynchronous failover
// the promoted standby lacks the last grants, and its sequences restart
// below tokens the old primary already handed out. So every token and
// version carries an epoch that grows with every promotion: the server's
// timeline ID, in the bits above TimelineShift. PostgreSQL starts a new,
// larger timeline at every promotion (and every point-in-time recovery),
// so any grant on a new timeline is larger than any grant on an old one,
// whatever the new primary lacks. Within a timeline, tokens grow with the
// sequence (or, for versions, by one per takeover).
//
// The timeline is read from the name of the WAL segment now being written,
// whose first 8 hex digits it is: right after a promotion that is already
// the new timeline, while pg_control_checkpoint() reports the old one until
// the first checkpoint after the promotion has completed (and reads the
// control file from disk). Both functions may be run by any role. On a
// standby the statements fail before reading it (a write in a read-only
// transaction), which the dialect reports as dialect.ErrReadOnly.
//
// Held leases are checked against the current timeline by their renewal
// (and by Guard): a lease granted on an earlier timeline is not renewed,
// so its holder learns that the lease is lost (sqllock.ErrLockLost)
// instead of trusting a grant the new primary may never have seen.
//
// Tokens handed out before this scheme (below 1<<TimelineShift, epoch 0)
// stay valid: a lease granted by an older version of sqllock keeps being
// renewed, and every new grant is larger than it.

// TimelineShift is the number of low bits of a token (or version) that
// count grants within one timeline; the bits above hold the timeline ID.
// 2^44 is about 1.8e13 grants per timeline, and 2^19-1 timelines fit
// before a token would leave the positive int64 range.
const TimelineShift = 44

// Timeline returns the timeline ID a token (or version) was granted on: 0
// for one granted before tokens carried it.
func Timeline(token int64) int64 { return token >> TimelineShift }

// timeline is the SQL expression of the server's current timeline ID: the
// first 8 hex digits of the name of the WAL segment being written.
const timeline = `('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint`

// epoch is the SQL expression of the smallest token of the current
// timeline.
var epoch = fmt.Sprintf(`(%s << %d)`, timeline, TimelineShift)

// onTimeline is the SQL condition that the token (or version) in col was
// granted on the current timeline, or before tokens carried one. The
// timeline is read once per statement (an uncorrelated subquery).
func onTimeline(col string) string {
	return fmt.Sprintf(`%[1]s >> %[2]d IN (0, (SELECT %[3]s))`, col, TimelineShift, timeline)
}

// epochOf is the SQL expression of the smallest token of the timeline of
// the token in col.
func epochOf(col string) string {
	return fmt.Sprintf(`((%[1]s >> %[2]d) << %[2]d)`, col, TimelineShift)
}
