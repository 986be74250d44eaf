// Package sqlrun runs the statement shapes the dialects share, leaving them
// only their SQL text and their error mapping.
package sqlrun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// Wrap maps a driver error onto the dialect's sentinels.
type Wrap func(error) error

// Canceller returns a function that cancels, on the server, the statement
// running on conn at the time it is called. It is prepared before the
// statement starts; a nil Canceller (or a nil function) leaves cancelling to
// the driver's reaction to the context.
type Canceller func(ctx context.Context, conn *sql.Conn) (func(context.Context) error, error)

// Runner runs a dialect's statements. Each runs on a connection pinned for
// it, so that the failure to obtain a connection (nothing was sent) is told
// apart from the failure of a statement (something may have been), and so
// that database/sql never runs a statement a second time on another
// connection after a driver reported driver.ErrBadConn for it.
type Runner struct {
	DB   *sql.DB
	Wrap Wrap
	// Full, if not nil, reports whether every connection the pool may open
	// is in use, for a pool that database/sql does not bound itself (a
	// pgxpool behind stdlib.OpenDBFromPool). Nil: DB.Stats decides.
	Full func() (full bool, limit int)
}

// full reports whether the pool is at its limit.
func (r *Runner) full() (bool, int) {
	if r.Full != nil {
		return r.Full()
	}
	st := r.DB.Stats()
	return st.MaxOpenConnections > 0 && st.InUse >= st.MaxOpenConnections, st.MaxOpenConnections
}

// Pin takes a connection of the pool for the caller's exclusive use; the
// caller closes it. No statement has been sent when it fails: if ctx ended
// while the pool was at its limit, the error wraps dialect.ErrPoolExhausted
// as well as ctx's error; if ctx ended otherwise, it is ctx's error; if no
// connection could be established, it wraps dialect.ErrUnavailable.
func (r *Runner) Pin(ctx context.Context) (*sql.Conn, error) {
	conn, err := r.DB.Conn(ctx)
	if err == nil {
		return conn, nil
	}
	if cerr := ctx.Err(); cerr != nil {
		if full, limit := r.full(); full {
			return nil, fmt.Errorf("%w: all %d connections of the pool in use: %w",
				dialect.ErrPoolExhausted, limit, cerr)
		}
		return nil, cerr
	}
	return nil, fmt.Errorf("%w: %w", dialect.ErrUnavailable, err)
}

// Conn runs fn on a pinned connection.
func (r *Runner) Conn(ctx context.Context, fn func(conn *sql.Conn) error) error {
	conn, err := r.Pin(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return fn(conn)
}

// Exec runs q and returns its result; the error is wrapped.
func (r *Runner) Exec(ctx context.Context, q string, args ...any) (res sql.Result, err error) {
	err = r.Conn(ctx, func(conn *sql.Conn) error {
		res, err = conn.ExecContext(ctx, q, args...)
		return r.Wrap(err)
	})
	return res, err
}

// ExecOne runs q and reports whether it affected exactly one row.
func (r *Runner) ExecOne(ctx context.Context, q string, args ...any) (bool, error) {
	res, err := r.Exec(ctx, q, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// QueryRow runs q, which selects at most one row, into dest. ok is false
// when it selects none.
func (r *Runner) QueryRow(ctx context.Context, q string, args []any, dest ...any) (ok bool, err error) {
	err = r.Conn(ctx, func(conn *sql.Conn) error {
		err := conn.QueryRowContext(ctx, q, args...).Scan(dest...)
		if errors.Is(err, sql.ErrNoRows) {
			return err
		}
		return r.Wrap(err)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// Query runs q and calls scan for each row.
func (r *Runner) Query(ctx context.Context, q string, args []any, scan func(*sql.Rows) error) error {
	return r.Conn(ctx, func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, q, args...)
		if err != nil {
			return r.Wrap(err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return r.Wrap(err)
			}
		}
		return r.Wrap(rows.Err())
	})
}

// Micros runs q, which selects one integer count of microseconds; ok is
// false when it selects no row.
func (r *Runner) Micros(ctx context.Context, q string, args ...any) (d time.Duration, ok bool, err error) {
	var us int64
	ok, err = r.QueryRow(ctx, q, args, &us)
	return time.Duration(us) * time.Microsecond, ok, err
}

// ListMicros runs q, which selects name, owner, token, holds, and the
// acquisition time, the expiry time (both in microseconds since the Unix
// epoch) and the time left until expiry (in microseconds), and returns the
// rows as LockInfo.
func (r *Runner) ListMicros(ctx context.Context, q string) ([]dialect.LockInfo, error) {
	var out []dialect.LockInfo
	err := r.Query(ctx, q, nil, func(rows *sql.Rows) error {
		var (
			li                           dialect.LockInfo
			acquired, expires, expiresIn int64
		)
		if err := rows.Scan(&li.Name, &li.Owner, &li.Token, &li.Holds, &acquired, &expires, &expiresIn); err != nil {
			return err
		}
		li.AcquiredAt = time.UnixMicro(acquired).UTC()
		li.ExpiresAt = time.UnixMicro(expires).UTC()
		li.ExpiresIn = time.Duration(expiresIn) * time.Microsecond
		out = append(out, li)
		return nil
	})
	return out, err
}

// Grant runs fn, a statement that may grant a lock, on a pinned connection,
// such that nothing is granted after Grant has returned an error. When ctx
// ends while fn runs, cancel (if not nil) asks the server to end the
// statement, and Grant waits for fn to return (see Cancellable): if the
// statement completed anyway, Grant returns nil and the caller keeps what it
// obtained; if the server ended it, the error joins ctx's error with the
// statement's. Only if the server could not be told in time (the connection
// is then closed) may the statement still take effect; the error then wraps
// dialect.ErrOutcomeUnknown. The connection is discarded after a
// cancellation, since the server may still act on the cancel.
func (r *Runner) Grant(ctx context.Context, cancel Canceller, fn func(ctx context.Context, conn *sql.Conn) error) error {
	conn, err := r.Pin(ctx)
	if err != nil {
		return err
	}
	var stop func(context.Context) error
	if cancel != nil {
		if stop, err = cancel(ctx, conn); err != nil {
			_ = dialect.Discard(conn)
			return r.Wrap(err)
		}
	}
	cancelled, err := Cancellable(ctx, stop, func(qctx context.Context) error { return fn(qctx, conn) })
	if cancelled {
		_ = dialect.Discard(conn)
		if err != nil {
			return errors.Join(ctx.Err(), r.Wrap(err))
		}
		return nil
	}
	conn.Close()
	return r.Wrap(err)
}

// Exists runs q in tx and reports whether it selected a row.
func Exists(ctx context.Context, tx *sql.Tx, wrap Wrap, q string, args ...any) (bool, error) {
	var one int
	err := tx.QueryRowContext(ctx, q, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, wrap(err)
}

// Renewed reads (name, owner, token) rows of renewed leases and reports,
// for each of ls, whether it is among them. It closes rows.
func Renewed(rows *sql.Rows, ls []dialect.Lease, wrap Wrap) ([]bool, error) {
	defer rows.Close()
	got := make(map[dialect.Lease]bool, len(ls))
	for rows.Next() {
		var (
			l           dialect.Lease
			name, owner []byte
		)
		if err := rows.Scan(&name, &owner, &l.Token); err != nil {
			return nil, wrap(err)
		}
		l.Name, l.Owner = string(name), string(owner)
		got[l] = true
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err)
	}
	out := make([]bool, len(ls))
	for i, l := range ls {
		out[i] = got[l]
	}
	return out, nil
}
