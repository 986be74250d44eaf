package mysql

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
	return versionQueries{
		read: fmt.Sprintf(`SELECT version, owner, holds, holds > 0 AND expires_at > %[2]s,
  GREATEST(TIMESTAMPDIFF(MICROSECOND, %[2]s, expires_at), 0)
FROM %[1]s WHERE name = ?`, versions, now),
		// The insert id says whether the row was created: 1 from the
		// inserted values, 0 from the no-op update of an existing row (the
		// affected-row count cannot tell, as it depends on clientFoundRows).
		create: fmt.Sprintf(`INSERT INTO %[1]s (name, owner, version, holds, acquired_at, expires_at)
VALUES (?, ?, LAST_INSERT_ID(1), 1, %[2]s, %[2]s + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE version = version + LAST_INSERT_ID(0)`, versions, now),
		// Both swaps change a column whenever they match (version, holds),
		// so rows affected is rows matched whatever clientFoundRows says.
		take: fmt.Sprintf(`UPDATE %[1]s SET owner = ?, version = version + 1, holds = 1,
  acquired_at = %[2]s, expires_at = %[2]s + INTERVAL ? MICROSECOND
WHERE name = ? AND version = ? AND expires_at <= %[2]s`, versions, now),
		reenter: fmt.Sprintf(`UPDATE %[1]s SET holds = holds + 1,
  expires_at = GREATEST(expires_at, %[2]s + INTERVAL ? MICROSECOND)
WHERE name = ? AND version = ? AND owner = ? AND holds > 0 AND expires_at > %[2]s`, versions, now),
		lease: buildLeaseQueries(versions, "version"),
	}
}

// Versions implements dialect.Optimistic.
func (d *Dialect) Versions() dialect.Versions { return versions{d} }

type versions struct{ d *Dialect }

func (v versions) Read(ctx context.Context, name string) (dialect.VersionRow, bool, error) {
	var (
		r     dialect.VersionRow
		owner []byte
		us    int64
	)
	ok, err := v.d.run.QueryRow(ctx, v.d.q.versions.read, []any{name}, &r.Version, &owner, &r.Holds, &r.Live, &us)
	r.Owner = string(owner)
	r.Remaining = time.Duration(us) * time.Microsecond
	return r, ok, err
}

func (v versions) Create(ctx context.Context, p dialect.AcquireParams) (bool, error) {
	var id int64
	err := v.d.grant(ctx, func(ctx context.Context, conn *sql.Conn, mark string) error {
		res, err := conn.ExecContext(ctx, mark+v.d.q.versions.create, p.Name, p.Owner, p.TTL.Microseconds())
		if err != nil {
			return err
		}
		id, err = res.LastInsertId()
		return err
	})
	return id == 1 && err == nil, err
}

func (v versions) Take(ctx context.Context, p dialect.SwapParams) (bool, error) {
	return v.swap(ctx, v.d.q.versions.take, p.Owner, p.TTL.Microseconds(), p.Name, p.Version)
}

func (v versions) Reenter(ctx context.Context, p dialect.SwapParams) (bool, error) {
	return v.swap(ctx, v.d.q.versions.reenter, p.TTL.Microseconds(), p.Name, p.Version, p.Owner)
}

func (v versions) Renew(ctx context.Context, l dialect.Lease, ttl time.Duration) (bool, error) {
	return v.d.run.ExecOne(ctx, v.d.q.versions.lease.renew, ttl.Microseconds(), l.Name, l.Owner, l.Token)
}

func (v versions) RenewMany(ctx context.Context, ls []dialect.Lease, ttl time.Duration) ([]bool, error) {
	return v.d.renewMany(ctx, v.d.q.versions.lease, ls, ttl)
}

func (v versions) Release(ctx context.Context, l dialect.Lease) (bool, error) {
	return v.d.run.ExecOne(ctx, v.d.q.versions.lease.release, l.Name, l.Owner, l.Token)
}

func (v versions) Guard(ctx context.Context, tx *sql.Tx, l dialect.Lease) (bool, error) {
	return sqlrun.Exists(ctx, tx, wrap, v.d.q.versions.lease.guard, l.Name, l.Owner, l.Token)
}

func (v versions) List(ctx context.Context) ([]dialect.LockInfo, error) {
	return v.d.run.ListMicros(ctx, v.d.q.versions.lease.list)
}

// swap runs a version swap, which may grant a lease, as Dialect.grant does.
func (v versions) swap(ctx context.Context, q string, args ...any) (bool, error) {
	var n int64
	err := v.d.grant(ctx, func(ctx context.Context, conn *sql.Conn, mark string) error {
		res, err := conn.ExecContext(ctx, mark+q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1 && err == nil, err
}
