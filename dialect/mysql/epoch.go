package mysql

import "fmt"

// Fencing tokens across failovers.
//
// MySQL and MariaDB keep no counter that grows with every promotion:
// AUTO_INCREMENT counters and a row's token are replicated like any data,
// so after an asynchronous failover the promoted replica lacks the last
// grants and would hand their tokens out again. GTIDs do not help: a GTID's
// sequence number continues from what the replica applied (below what the
// old primary issued), @@server_uuid and server_id are not ordered, and
// MariaDB's gtid_domain_id changes only when an operator changes it.
//
// What every server does have is a clock. So a token of the lock table and
// a version of the version table is the larger of the previous token plus
// one and the grant's time on the server's real clock (see now), in
// microseconds since the Unix epoch. Grants of a name are serialised, and
// each takes longer than a microsecond, so a name's tokens track the time
// of its grants; one granted on a new primary after a failover is larger
// than every token granted on the old one, provided the new primary's clock
// is not behind the old one's by more than the failover took (seconds,
// against the milliseconds NTP keeps clocks within). That proviso is what
// cannot be guaranteed here: a primary whose clock is set back by more than
// the failover's duration could repeat tokens; on PostgreSQL, whose tokens
// carry the timeline, no clock is involved.
//
// Tokens of earlier versions of sqllock were small counters: every clock
// token is larger. Tokens of the pessimistic strategy come from an
// AUTO_INCREMENT counter and carry no such guard: after an asynchronous
// failover they may repeat.

// clockToken is the SQL expression of the next token after the one in col,
// for a grant at the time t (a DATETIME(6) in UTC).
func clockToken(col, t string) string {
	return fmt.Sprintf("GREATEST(%s + 1, %s)", col, micros(t))
}
