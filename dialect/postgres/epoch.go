package postgres

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

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

// timelineEpoch is the SQL expression of the smallest token of the current
// timeline.
var timelineEpoch = fmt.Sprintf(`(%s << %d)`, timeline, TimelineShift)

// epoch stands for the smallest token of the current timeline in the
// statements of a grant of a lease of :ttl. The dialect's compiler expands
// it (see expandEpoch) to a call of sqllock_grant_epoch, which refuses
// grants during the failover grace, or, WithoutFailoverGrace, to
// timelineEpoch.
const epoch = `/*sqllock:epoch*/`

// expandEpoch returns the dialect's expansion of epoch: a call of the
// schema's sqllock_grant_epoch, or timelineEpoch without the grace.
//
// The call is a PL/pgSQL function's, which reads a sequence and a table:
// on a busy server, a good part of a grant's time (BENCHMARKS.md). So a
// session that the function let through notes it (graceNote): which
// schema's grace (its table's OID), the timeline, and the TTL it passed
// with. A grant on the same grace and timeline, of a TTL no longer, skips
// the call: the grace of a timeline, once over, does not come back (a
// promotion starts a new timeline, which no note names), and the function
// has already recorded a TTL at least as long as the grant's. The note is
// a custom setting of the session, set in the grant's transaction (undone
// if it rolls back), and a fact about the server, not about a client, so
// the sessions a pooler shares between clients may keep it.
func (d *Dialect) expandEpoch() func(string) string {
	if d.noGrace {
		return strings.NewReplacer(epoch, timelineEpoch).Replace
	}
	fn, grace := "sqllock_grant_epoch", "sqllock_grace"
	sqlrun.Qualify(d.schema, quote, &fn, &grace)
	// The grace table's OID names the schema's grace: a schema dropped
	// and migrated again has a new one, so notes taken before do not
	// skip the calls that record its TTLs anew.
	key := `'` + grace + `'::regclass::oid`
	part := func(i int) string {
		return fmt.Sprintf(`split_part(current_setting('%s', true), '/', %d)`, graceNote, i)
	}
	expr := fmt.Sprintf(`(CASE WHEN %[1]s = (%[4]s)::text AND %[2]s = (%[5]s)::text AND nullif(%[3]s, '')::bigint >= :ttl::bigint
  THEN %[6]s
  ELSE %[7]s(:ttl::bigint) + 0 * length(set_config('%[8]s', %[4]s || '/' || (%[5]s) || '/' || :ttl::bigint, false)) END)`,
		part(1), part(2), part(3), key, timeline, timelineEpoch, fn, graceNote)
	return strings.NewReplacer(epoch, expr).Replace
}

// graceNote is the custom setting in which a session notes that
// sqllock_grant_epoch let a grant through: "grace/timeline/ttl", where
// grace is the OID of the schema's sqllock_grace table (see expandEpoch).
const graceNote = "sqllock.grace"

// The failover grace (Chubby's master fail-over rule): after a promotion,
// the new primary lacks the grants that the old one made while the standby
// lagged, and their holders may trust them for up to their TTL. So
// sqllock_grant_epoch (migration 16) refuses every grant until the longest
// TTL ever granted has passed since the server was first seen granting on
// its timeline; the refusal (SQLSTATE SQLK1) says how long is left, and
// waiters sleep that long. Leases granted on the new timeline renew as
// usual; leases of the old one are lost (see above).

// WithoutFailoverGrace lets a promoted server grant leases at once, without
// waiting out the leases of the old primary (see the package
// documentation's failover section): two processes may then both believe
// they hold a lock for up to a TTL after an asynchronous failover, their
// fencing tokens still telling which one is current. With it, the dialect
// needs no migration beyond 15.
func WithoutFailoverGrace() Option {
	return func(d *Dialect) error {
		d.noGrace = true
		return nil
	}
}

// graceCode is the SQLSTATE of a grant refused during the failover grace.
const graceCode = "SQLK1"

// graceError returns the refusal of a grant during the failover grace,
// which waits the time left, from the error's detail.
func graceError(pe *pgconn.PgError) error {
	us, err := strconv.ParseInt(pe.Detail, 10, 64)
	if err != nil || us < 0 {
		us = 0
	}
	return &dialect.WaitError{Left: time.Duration(us) * time.Microsecond, Msg: pe.Message}
}

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
