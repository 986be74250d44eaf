package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/internal/sqlrun"
)

// The statements of the lock and version tables, declared once for both
// through leaseSQL; sqlrun binds their named parameters.
//
// now() is the start of the statement's own transaction: in autocommit, the
// statement's start. The guard runs inside a user's transaction, where
// clock_timestamp() is the current time. No session setting moves either
// (SET TIME ZONE changes how times are shown, not the instant).

// ttl is the expiry of a lease granted or renewed now.
const ttl = `now() + :ttl::bigint * interval '1 microsecond'`

// micros is the microseconds since the Unix epoch of a timestamptz.
func micros(col string) string { return `(extract(epoch FROM ` + col + `) * 1000000)::bigint` }

// leaseSQL declares the lease statements of table, whose token column is
// token.
func leaseSQL(table, token string) sqlrun.LeaseSQL {
	return sqlrun.LeaseSQL{
		RenewMany: sqlrun.Q(fmt.Sprintf(`UPDATE %[1]s SET expires_at = %[3]s
WHERE name IN (:names) AND (name, owner, %[2]s) IN (:leases) AND holds > 0 AND expires_at > now()
RETURNING name, owner, %[2]s`, table, token, ttl)),
		Release: sqlrun.X(fmt.Sprintf(`UPDATE %[1]s SET holds = holds - 1,
  expires_at = CASE WHEN holds = 1 THEN '-infinity' ELSE expires_at END
WHERE name = :name AND owner = :owner AND %[2]s = :token AND holds > 0`, table, token)),
		Guard: sqlrun.Q(fmt.Sprintf(`SELECT 1 FROM %[1]s
WHERE name = :name AND owner = :owner AND %[2]s = :token AND holds > 0 AND expires_at > clock_timestamp()
FOR SHARE`, table, token)),
		List: sqlrun.Q(fmt.Sprintf(`SELECT name, owner, %[2]s, holds, %[3]s, %[4]s,
  (extract(epoch FROM expires_at - now()) * 1000000)::bigint
FROM %[1]s WHERE holds > 0 ORDER BY name`, table, token, micros("acquired_at"), micros("expires_at"))),
	}
}

// lockSQL declares the lock table's statements.
func lockSQL(locks, seq, channel string) sqlrun.LockSQL {
	s := sqlrun.LockSQL{LeaseSQL: leaseSQL(locks, "token")}
	s.Channel = channel
	// The token comes from the sequence; on takeover it is drawn in the
	// UPDATE, after the row lock, so it exceeds the token it replaces.
	s.Acquire = sqlrun.Q(fmt.Sprintf(`INSERT INTO %[1]s AS l (name, owner, token, holds, acquired_at, expires_at)
VALUES (:name, :owner, nextval('%[2]s'), 1, now(), %[3]s)
ON CONFLICT (name) DO UPDATE SET
  token       = CASE WHEN l.expires_at <= now() THEN nextval('%[2]s') ELSE l.token END,
  holds       = CASE WHEN l.expires_at <= now() THEN 1 ELSE l.holds + 1 END,
  acquired_at = CASE WHEN l.expires_at <= now() THEN now() ELSE l.acquired_at END,
  owner       = EXCLUDED.owner,
  expires_at  = EXCLUDED.expires_at
WHERE l.expires_at <= now() OR l.owner = EXCLUDED.owner
RETURNING token`, locks, seq, ttl))
	// Only waiters ask how long a lease has left: the same statement sets
	// the waiters hint (once), so that the release will NOTIFY.
	s.Remaining = sqlrun.Q(fmt.Sprintf(`WITH hint AS (
  UPDATE %[1]s SET waiters = true WHERE name = :name AND NOT waiters AND expires_at > now()
)
SELECT (extract(epoch FROM greatest(expires_at, now()) - now()) * 1000000)::bigint
FROM %[1]s WHERE name = :name`, locks))
	// The last release of a name someone waited for announces it.
	s.Release = sqlrun.Q(fmt.Sprintf(`WITH r AS (
  UPDATE %s SET holds = holds - 1,
    expires_at = CASE WHEN holds = 1 THEN '-infinity' ELSE expires_at END
  WHERE name = :name AND owner = :owner AND token = :token AND holds > 0
  RETURNING name, holds = 0 AND waiters AS wake
)
SELECT count(*) FROM r LEFT JOIN LATERAL (SELECT pg_notify(:channel, r.name) WHERE r.wake) n ON true`, locks))
	return s
}

// versionSQL declares the version table's statements.
func versionSQL(versions string) sqlrun.VersionSQL {
	return sqlrun.VersionSQL{
		LeaseSQL: leaseSQL(versions, "version"),
		Read: sqlrun.Q(fmt.Sprintf(`SELECT version, owner, holds, holds > 0 AND expires_at > now(),
  (extract(epoch FROM greatest(expires_at, now()) - now()) * 1000000)::bigint
FROM %s WHERE name = :name`, versions)),
		Create: sqlrun.X(fmt.Sprintf(`INSERT INTO %s (name, owner, version, holds, acquired_at, expires_at)
VALUES (:name, :owner, 1, 1, now(), %s)
ON CONFLICT (name) DO NOTHING`, versions, ttl)),
		Take: sqlrun.X(fmt.Sprintf(`UPDATE %s SET owner = :owner, version = version + 1, holds = 1, acquired_at = now(), expires_at = %s
WHERE name = :name AND version = :version AND expires_at <= now()`, versions, ttl)),
		Reenter: sqlrun.X(fmt.Sprintf(`UPDATE %s SET holds = holds + 1, expires_at = greatest(expires_at, %s)
WHERE name = :name AND version = :version AND owner = :owner AND holds > 0 AND expires_at > now()`, versions, ttl)),
	}
}

// reapSQL deletes expired rows of the lock table. SKIP LOCKED lets reapers
// in many processes share the work and never wait behind an acquirer; the
// outer condition re-checks expiry. Names that had waiters are announced.
func reapSQL(locks string) sqlrun.SQL {
	return sqlrun.Q(fmt.Sprintf(`WITH d AS (
  DELETE FROM %[1]s WHERE name IN (
    SELECT name FROM %[1]s WHERE expires_at <= now() ORDER BY expires_at LIMIT :limit FOR UPDATE SKIP LOCKED
  ) AND expires_at <= now()
  RETURNING name, waiters
)
SELECT count(*) FROM d LEFT JOIN LATERAL (SELECT pg_notify(:channel, d.name) WHERE d.waiters) n ON true`, locks))
}

// tables compiles the dialect's statements.
func (d *Dialect) tables() error {
	locks, seq, versions := "sqllock_locks", "sqllock_token_seq", "sqllock_versions"
	sqlrun.Qualify(d.schema, quote, &locks, &seq, &versions)
	c := &sqlrun.Compiler{Style: sqlrun.Dollar}
	d.locks = sqlrun.NewLockTable(d.run, c, lockSQL(locks, seq, d.channel))
	d.versions = sqlrun.NewVersionTable(d.run, c, versionSQL(versions))
	d.reap = c.Compile(reapSQL(locks))
	return c.Err
}

var _ dialect.Optimistic = (*Dialect)(nil)

// Locks implements dialect.Dialect.
func (d *Dialect) Locks() dialect.LockTable { return d.locks }

// Versions implements dialect.Optimistic.
func (d *Dialect) Versions() dialect.VersionTable { return d.versions }

// Reap implements dialect.Dialect. Tokens come from a sequence, so deleting
// rows cannot make a later token smaller.
func (d *Dialect) Reap(ctx context.Context, p dialect.ReapParams) (int, error) {
	n, err := d.run.Int(ctx, &d.reap, &sqlrun.Params{Limit: p.Limit, Channel: d.channel})
	return int(n), err
}

// cancelGrant prepares the cancelling of a grant on conn: a cancel request,
// sent on a connection of its own (pgx's own reaction to a cancelled context
// is to close the connection, which leaves the server running the
// statement: it would take the lock, for an owner nobody holds, once the row
// lock it waits for is free).
func cancelGrant(ctx context.Context, conn *sql.Conn) (string, func(context.Context) error, error) {
	cancel, err := canceller(ctx, conn)
	return "", cancel, err
}
