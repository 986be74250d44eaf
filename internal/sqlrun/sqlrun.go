// Package sqlrun runs the statements of sqllock's dialects. A dialect
// declares its statements as data (dialect.SQL, in one declaration per
// primitive of its dialect.Catalogue), and Open builds every primitive's
// table from them; everything else — binding parameters, pinning
// connections, the grant protocol (cancelling grants on the server, undoing
// late ones), the ticket queues, telling a statement that was never sent
// from one whose outcome is unknown — is written once, here.
package sqlrun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// Runner runs a dialect's statements. Each runs on a connection pinned for
// it, so that the failure to obtain a connection (nothing was sent) is told
// apart from the failure of a statement (something may have been), and so
// that database/sql never runs a statement a second time on another
// connection after a driver reported driver.ErrBadConn for it. The hooks
// are the dialect's (see dialect.Hooks); Wrap must be set.
type Runner struct {
	DB *sql.DB
	dialect.Hooks
}

// full reports whether the pool is at its limit.
func (r *Runner) full() (bool, int) {
	if r.Full != nil {
		return r.Full()
	}
	st := r.DB.Stats()
	return st.MaxOpenConnections > 0 && st.InUse >= st.MaxOpenConnections, st.MaxOpenConnections
}

// goOff runs f through r.Go, or in the caller without it.
func (r *Runner) goOff(f func()) {
	if r.Go != nil {
		r.Go(f)
		return
	}
	f()
}

// afterTicketed calls r.AfterTicketed, if set, for name in q.
func (r *Runner) afterTicketed(ctx context.Context, q dialect.Queue, name string, ifFree bool) {
	if r.AfterTicketed != nil {
		r.AfterTicketed(ctx, q, name, ifFree)
	}
}

// ticket calls r.Ticket, if set.
func (r *Runner) ticket(id int64, live bool) {
	if r.Ticket != nil {
		r.Ticket(id, live)
	}
}

// check runs r.Check, if set.
func (r *Runner) check(ctx context.Context) error {
	if r.Check != nil {
		return r.Check(ctx)
	}
	return nil
}

// afterRelease calls r.AfterRelease, if set, for name.
func (r *Runner) afterRelease(ctx context.Context, name string) {
	if r.AfterRelease != nil {
		r.AfterRelease(ctx, name)
	}
}

// Bound returns ctx bounded by r.StatementTimeout (see
// dialect.Hooks.StatementTimeout): a context that ends with ctx, or when the
// timeout passes, with a cause wrapping dialect.ErrNoAnswer. Call stop when
// the call is done. Every call of the runner is bounded so; Settle turns
// its error into the one to return.
func (r *Runner) Bound(ctx context.Context) (bctx context.Context, stop context.CancelFunc) {
	if r.StatementTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, r.StatementTimeout, noAnswer(r.StatementTimeout))
}

// noAnswer is the cause of a context of Bound whose timeout passed.
func noAnswer(d time.Duration) error {
	return fmt.Errorf("%w (%v: the dialect's WithStatementTimeout)", dialect.ErrNoAnswer, d)
}

// cause returns the error to report for ctx, which ended: its cause when
// Bound's timeout ended it, else ctx.Err().
func cause(ctx context.Context) error {
	if c := context.Cause(ctx); errors.Is(c, dialect.ErrNoAnswer) {
		return c
	}
	return ctx.Err()
}

// WithCause returns err joined with ctx's error (see cause), which ended
// while the call that failed with err ran, unless err already says so: a
// driver that returns the context's error must not have it reported twice.
func WithCause(ctx context.Context, err error) error {
	c := cause(ctx)
	if c == nil || errors.Is(err, c) {
		return err
	}
	return errors.Join(c, err)
}

// Settle returns err, the error of a call bounded by Bound(ctx), saying
// so when the bound ended the call: with dialect.ErrNoAnswer, and with
// dialect.ErrOutcomeUnknown unless err says that nothing was sent
// (dialect.ErrUnavailable, dialect.ErrPoolExhausted, NotSent) or that the
// outcome is unknown already.
func Settle(bctx context.Context, err error) error {
	if err == nil || bctx.Err() == nil || errors.Is(err, dialect.ErrNoAnswer) {
		return err
	}
	c := context.Cause(bctx)
	if !errors.Is(c, dialect.ErrNoAnswer) {
		return err
	}
	if errors.Is(err, dialect.ErrUnavailable) || errors.Is(err, dialect.ErrPoolExhausted) ||
		errors.Is(err, dialect.ErrOutcomeUnknown) || NotSent(err) {
		return fmt.Errorf("%w: %w", c, err)
	}
	return fmt.Errorf("%w: %w: %w", dialect.ErrOutcomeUnknown, c, err)
}

// Pin takes a connection of the pool for the caller's exclusive use; the
// caller closes it. Connecting is bounded by r.StatementTimeout (see
// Bound). No statement has been sent when it fails: if ctx ended (or the
// bound passed) while the pool was at its limit, the error wraps
// dialect.ErrPoolExhausted as well as ctx's error; if ctx ended otherwise,
// it is ctx's error; if no connection could be established (within the
// bound: the error wraps dialect.ErrNoAnswer too), it wraps
// dialect.ErrUnavailable.
func (r *Runner) Pin(ctx context.Context) (*sql.Conn, error) {
	bctx, stop := r.Bound(ctx)
	defer stop()
	conn, err := r.DB.Conn(bctx)
	if err == nil {
		return conn, nil
	}
	if bctx.Err() != nil {
		cerr := cause(bctx)
		if full, limit := r.full(); full {
			return nil, fmt.Errorf("%w: all %d connections of the pool in use: %w",
				dialect.ErrPoolExhausted, limit, cerr)
		}
		if errors.Is(cerr, dialect.ErrNoAnswer) {
			return nil, fmt.Errorf("%w: %w: %w", dialect.ErrUnavailable, cerr, err)
		}
		return nil, cerr
	}
	return nil, fmt.Errorf("%w: %w", dialect.ErrUnavailable, err)
}

// BeginLasting begins a transaction on conn that outlives ctx (a held row
// lock's), its BEGIN bounded by r.StatementTimeout all the same: if the
// server does not answer in time, the call fails with dialect.ErrNoAnswer
// and dialect.ErrUnavailable (nothing is locked yet), and the caller must
// discard conn.
func (r *Runner) BeginLasting(ctx context.Context, conn *sql.Conn, opts *sql.TxOptions) (*sql.Tx, error) {
	tx, _, err := r.begin(context.WithoutCancel(ctx), conn, opts, "beginning the lock's transaction")
	return tx, err // nothing cancels the transaction's context: it lasts
}

// BeginBounded begins a transaction on conn that ends with ctx, as
// conn.BeginTx's does, its BEGIN bounded by r.StatementTimeout: if the
// server does not answer in time, the call fails with dialect.ErrNoAnswer
// and dialect.ErrUnavailable (nothing was done yet), and the caller must
// discard conn. After the transaction ended, the caller calls done, which
// frees what ties it to ctx.
func (r *Runner) BeginBounded(ctx context.Context, conn *sql.Conn, opts *sql.TxOptions) (tx *sql.Tx, done func(), err error) {
	tx, cancel, err := r.begin(ctx, conn, opts, "beginning a transaction")
	if err != nil {
		return nil, nil, err
	}
	return tx, func() { cancel(nil) }, nil
}

// begin begins a transaction on conn whose context is a child of base,
// with the child's cancel, its BEGIN bounded by r.StatementTimeout (what
// names the call in the error).
func (r *Runner) begin(base context.Context, conn *sql.Conn, opts *sql.TxOptions, what string) (*sql.Tx, context.CancelCauseFunc, error) {
	tctx, cancel := context.WithCancelCause(base)
	stop := func() bool { return true }
	var limit error
	if r.StatementTimeout > 0 {
		limit = noAnswer(r.StatementTimeout)
		stop = time.AfterFunc(r.StatementTimeout, func() { cancel(limit) }).Stop
	}
	tx, err := conn.BeginTx(tctx, opts)
	switch {
	case !stop():
		if err == nil {
			_ = tx.Rollback() // begun as the bound passed, and ended by it
		}
		cancel(limit) // done already, by the timer
		return nil, nil, fmt.Errorf("%w: %w: %s", dialect.ErrUnavailable, limit, what)
	case err != nil:
		cancel(nil)
		return nil, nil, err
	}
	return tx, cancel, nil
}

// Conn runs fn on a pinned connection, with ctx bounded by
// r.StatementTimeout (see Bound): fn runs its statements with the ctx it
// is given. Errors of fn are returned as they are (fn wraps them), save
// that a call the bound ended says so (see Settle).
func (r *Runner) Conn(ctx context.Context, fn func(ctx context.Context, conn *sql.Conn) error) error {
	bctx, stop := r.Bound(ctx)
	defer stop()
	conn, err := r.Pin(bctx)
	if err != nil {
		return Settle(bctx, err)
	}
	err = fn(bctx, conn)
	if err != nil && bctx.Err() != nil {
		// Ended mid-statement: the driver may not have noticed.
		_ = dialect.Discard(conn)
	} else {
		conn.Close()
	}
	return Settle(bctx, err)
}

// Int runs st and returns its number: see Kind.
func (r *Runner) Int(ctx context.Context, st *Stmt, p *Params) (n int64, err error) {
	err = r.Conn(ctx, func(ctx context.Context, conn *sql.Conn) error {
		n, err = intOn(ctx, conn, "", st, p)
		return r.Wrap(err)
	})
	return n, err
}

// Row runs st, which selects at most one row, into dest; ok is false when
// it selects none.
func (r *Runner) Row(ctx context.Context, st *Stmt, p *Params, dest ...any) (ok bool, err error) {
	err = r.Conn(ctx, func(ctx context.Context, conn *sql.Conn) error {
		text, args := st.bind(p)
		err := conn.QueryRowContext(ctx, text, args...).Scan(dest...)
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

// Each runs st and calls scan for each row it selects.
func (r *Runner) Each(ctx context.Context, st *Stmt, p *Params, scan func(*sql.Rows) error) error {
	return r.Conn(ctx, func(ctx context.Context, conn *sql.Conn) error { return eachOn(ctx, conn, r.Wrap, st, p, scan) })
}

// intOn runs st on q, after prefix, and returns its number. The error is
// the driver's.
func intOn(ctx context.Context, q Querier, prefix string, st *Stmt, p *Params) (int64, error) {
	text, args := st.bind(p)
	text = prefix + text
	if st.Kind == dialect.Query {
		var n int64
		err := q.QueryRowContext(ctx, text, args...).Scan(&n)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, nil
		}
		return n, err
	}
	res, err := q.ExecContext(ctx, text, args...)
	if err != nil {
		return 0, err
	}
	if st.Kind == dialect.ExecID {
		// An insert id with no row changed is not this statement's
		// grant: TiDB can report one set by an execution of the statement
		// that it abandoned and retried after a write conflict, although
		// the retry changed no row (concurrent takeovers of a version
		// row, beside a reaper).
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return 0, err
		}
		return res.LastInsertId()
	}
	return res.RowsAffected()
}

// eachOn runs st on q and calls scan for each row; the error is wrapped.
func eachOn(ctx context.Context, q Querier, wrap func(error) error, st *Stmt, p *Params, scan func(*sql.Rows) error) error {
	text, args := st.bind(p)
	rows, err := q.QueryContext(ctx, text, args...)
	if err != nil {
		return wrap(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return wrap(err)
		}
	}
	return wrap(rows.Err())
}

// IntOn runs st in tx and returns its number (see Kind); the error is the
// driver's. For statements of a dialect's own transactions.
func IntOn(ctx context.Context, tx *sql.Tx, st *Stmt, p *Params) (int64, error) {
	return intOn(ctx, tx, "", st, p)
}

// EachOn runs st in tx and calls scan for each row; the error is wrapped.
func EachOn(ctx context.Context, tx *sql.Tx, wrap func(error) error, st *Stmt, p *Params, scan func(*sql.Rows) error) error {
	return eachOn(ctx, tx, wrap, st, p, scan)
}
