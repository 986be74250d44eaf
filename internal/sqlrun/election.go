package sqlrun

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// Proclaim runs a dialect's proclamation statement (text, with args) and
// reports whether it wrote the value: exactly one row affected, which the
// statement allows only while the lease is live.
func (r *Runner) Proclaim(ctx context.Context, text string, args ...any) (bool, error) {
	var n int64
	err := r.Conn(ctx, func(conn *sql.Conn) error {
		res, err := conn.ExecContext(ctx, text, args...)
		if err != nil {
			return r.Wrap(err)
		}
		n, err = res.RowsAffected()
		return r.Wrap(err)
	})
	return n == 1, err
}

// Leader runs a dialect's leader query (text, with args) for the election
// name. The query returns no row without a leader, else one: the owner,
// the term, the proclaimed value, the lease's expiry and its time left, both
// in µs (the expiry since the Unix epoch, on the database's clock).
func (r *Runner) Leader(ctx context.Context, name, text string, args ...any) (dialect.LeaderInfo, bool, error) {
	info := dialect.LeaderInfo{Name: name}
	var expires, left int64
	err := r.Conn(ctx, func(conn *sql.Conn) error {
		err := conn.QueryRowContext(ctx, text, args...).Scan(&info.Owner, &info.Term, &info.Value, &expires, &left)
		if errors.Is(err, sql.ErrNoRows) {
			return err
		}
		return r.Wrap(err)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return dialect.LeaderInfo{}, false, nil
	}
	if err != nil {
		return dialect.LeaderInfo{}, false, err
	}
	info.ExpiresAt = time.UnixMicro(expires).UTC()
	info.ExpiresIn = time.Duration(left) * time.Microsecond
	return info, true, nil
}
