package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/internal/sqlrun"
)

var _ dialect.Optimistic = (*Dialect)(nil)

type versionQueries struct {
	read, create, take, reenter string
	lease                       leaseQueries
}

func buildVersionQueries(versions string) versionQueries {
	const ttl = `now() + $3::bigint * interval '1 microsecond'`
	return versionQueries{
		read: fmt.Sprintf(`SELECT version, owner, holds, holds > 0 AND expires_at > now(),
  (extract(epoch FROM greatest(expires_at, now()) - now()) * 1000000)::bigint
FROM %s WHERE name = $1`, versions),
		create: fmt.Sprintf(`INSERT INTO %s (name, owner, version, holds, acquired_at, expires_at)
VALUES ($1, $2, 1, 1, now(), %s)
ON CONFLICT (name) DO NOTHING`, versions, ttl),
		take: fmt.Sprintf(`UPDATE %s SET owner = $2, version = version + 1, holds = 1, acquired_at = now(), expires_at = %s
WHERE name = $1 AND version = $4 AND expires_at <= now()`, versions, ttl),
		reenter: fmt.Sprintf(`UPDATE %s SET holds = holds + 1, expires_at = greatest(expires_at, %s)
WHERE name = $1 AND version = $4 AND owner = $2 AND holds > 0 AND expires_at > now()`, versions, ttl),
		lease: buildLeaseQueries(versions, "version"),
	}
}

// Versions implements dialect.Optimistic.
func (d *Dialect) Versions() dialect.Versions { return versions{d} }

type versions struct{ d *Dialect }

func (v versions) Read(ctx context.Context, name string) (dialect.VersionRow, bool, error) {
	var (
		r  dialect.VersionRow
		us int64
	)
	ok, err := v.d.run.QueryRow(ctx, v.d.q.versions.read, []any{name}, &r.Version, &r.Owner, &r.Holds, &r.Live, &us)
	r.Remaining = time.Duration(us) * time.Microsecond
	return r, ok, err
}

func (v versions) Create(ctx context.Context, p dialect.AcquireParams) (bool, error) {
	return v.swap(ctx, v.d.q.versions.create, p.Name, p.Owner, p.TTL.Microseconds())
}

func (v versions) Take(ctx context.Context, p dialect.SwapParams) (bool, error) {
	return v.swap(ctx, v.d.q.versions.take, p.Name, p.Owner, p.TTL.Microseconds(), p.Version)
}

func (v versions) Reenter(ctx context.Context, p dialect.SwapParams) (bool, error) {
	return v.swap(ctx, v.d.q.versions.reenter, p.Name, p.Owner, p.TTL.Microseconds(), p.Version)
}

func (v versions) Renew(ctx context.Context, l dialect.Lease, ttl time.Duration) (bool, error) {
	return v.d.run.ExecOne(ctx, v.d.q.versions.lease.renew, l.Name, l.Owner, l.Token, ttl.Microseconds())
}

func (v versions) RenewMany(ctx context.Context, ls []dialect.Lease, ttl time.Duration) ([]bool, error) {
	return v.d.renewMany(ctx, v.d.q.versions.lease.renewMany, ls, ttl)
}

func (v versions) Release(ctx context.Context, l dialect.Lease) (bool, error) {
	return v.d.run.ExecOne(ctx, v.d.q.versions.lease.release, l.Name, l.Owner, l.Token)
}

func (v versions) Guard(ctx context.Context, tx *sql.Tx, l dialect.Lease) (bool, error) {
	return sqlrun.Exists(ctx, tx, wrap, v.d.q.versions.lease.guard, l.Name, l.Owner, l.Token)
}

func (v versions) List(ctx context.Context) ([]dialect.LockInfo, error) {
	return v.d.list(ctx, v.d.q.versions.lease.list)
}

// swap runs a version swap, which may grant a lease, as Dialect.grant does.
func (v versions) swap(ctx context.Context, q string, args ...any) (bool, error) {
	var n int64
	err := v.d.grant(ctx, func(ctx context.Context, conn *sql.Conn) error {
		res, err := conn.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1 && err == nil, err
}
