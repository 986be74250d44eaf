package sqlrun

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// Querier runs statements: a *sql.Conn or a *sql.Tx.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Grant is the statements of one grant, run by Runner.Grant.
type Grant struct {
	// InTx runs Run in a transaction begun with TxOptions (nil: the
	// driver's default), committed when Run returns no error and rolled
	// back otherwise; else Run runs on the pinned connection itself.
	InTx      bool
	TxOptions *sql.TxOptions
	// Run runs the statements on q, each after prefix (see Canceller),
	// and returns the grant's number: a token, or 0 for a refusal. Its
	// errors are the driver's, or ErrRollback.
	Run func(ctx context.Context, q Querier, prefix string) (int64, error)
	// Undo releases the grant numbered n: see dialect.Hooks.Durable. Nil for a
	// grant that is never undone.
	Undo func(ctx context.Context, n int64) error
}

// ErrRollback, returned by Grant.Run, rolls the transaction back without
// an error: Runner.Grant returns 0 and nil. The caller says why.
var ErrRollback = errors.New("sqllock: grant rolled back")

// Grant runs g, after r.Check, on a connection pinned for it, such that
// nothing is granted after it returned an error. ctx is bounded by
// r.StatementTimeout first (see Bound and Settle). When ctx ends while g
// runs (its commit included), r.Cancel asks the server to end the
// statement running, and Grant waits for g to return (see Cancellable): if
// g completed anyway, Grant returns its number and no error, and the
// caller keeps what was granted (under r.Durable, g.Undo releases it and
// Grant returns an error); if the server ended it, the error joins ctx's
// error with the statement's. Only if the server
// could not be told in time (the connection is then closed) may the
// statement still take effect; the error then wraps
// dialect.ErrOutcomeUnknown. A connection that was cancelled, or whose
// outcome is unknown, is discarded.
func (r *Runner) Grant(ctx context.Context, g Grant) (int64, error) {
	bctx, stop := r.Bound(ctx)
	defer stop()
	n, err := r.grant(bctx, g)
	return n, Settle(bctx, err)
}

// grant is Grant on ctx, bounded.
func (r *Runner) grant(ctx context.Context, g Grant) (int64, error) {
	if err := r.check(ctx); err != nil {
		return 0, err
	}
	conn, err := r.Pin(ctx)
	if err != nil {
		return 0, err
	}
	var (
		prefix string
		cancel func(context.Context) error
	)
	if r.Cancel != nil && ctx.Done() != nil { // a context that never ends needs no cancel
		if prefix, cancel, err = r.Cancel(ctx, conn); err != nil {
			_ = dialect.Discard(conn)
			return 0, r.Wrap(err)
		}
	}
	var n int64
	cancelled, err := Cancellable(ctx, cancel, func(qctx context.Context) error {
		n, err = runGrant(qctx, conn, prefix, g)
		return err
	})
	if errors.Is(err, ErrRollback) {
		n, err = 0, nil
	}
	if cancelled {
		_ = dialect.Discard(conn)
		if err != nil {
			return 0, WithCause(ctx, r.Wrap(err))
		}
		if r.Durable && n != 0 && g.Undo != nil {
			return 0, r.undo(ctx, g, n)
		}
		return n, nil
	}
	if err != nil {
		err = r.Wrap(err)
		if errors.Is(err, dialect.ErrOutcomeUnknown) {
			_ = dialect.Discard(conn)
		} else {
			conn.Close()
		}
		return 0, err
	}
	conn.Close()
	return n, nil
}

// again reports whether a grant that failed with err at its try-th run
// runs again: its transaction was rolled back by the server
// (dialect.ErrTransient), dialect.Hooks.GrantTries allows another run, and ctx
// has not ended.
func (r *Runner) again(ctx context.Context, err error, try int) bool {
	return err != nil && try < r.GrantTries && ctx.Err() == nil && errors.Is(err, dialect.ErrTransient)
}

// runGrant runs g on conn, in its transaction if it has one.
func runGrant(ctx context.Context, conn *sql.Conn, prefix string, g Grant) (int64, error) {
	if !g.InTx {
		return g.Run(ctx, conn, prefix)
	}
	tx, err := conn.BeginTx(ctx, g.TxOptions)
	if err != nil {
		return 0, err
	}
	n, err := g.Run(ctx, tx, prefix)
	if err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	return n, tx.Commit()
}

// errUndurable marks a grant that completed after a cancel request under
// dialect.Hooks.Durable: it may be on the primary alone.
var errUndurable = errors.New("sqllock: a cancel request reached a grant that may have been waiting for the synchronous standby: it was released again")

// UndoTimeout bounds the release of a grant that may not be durable.
const UndoTimeout = 5 * time.Second

// undo releases, under dialect.Hooks.Durable, the grant n of g that completed
// after a cancel request, and returns the error to report: ctx's, joined
// with errUndurable and the release's.
func (r *Runner) undo(ctx context.Context, g Grant, n int64) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), UndoTimeout)
	defer cancel()
	return errors.Join(cause(ctx), errUndurable, g.Undo(uctx, n))
}

// GrantInt runs st as a grant (see Grant) and returns its number; undo,
// if not nil, releases the grant numbered n.
func (r *Runner) GrantInt(ctx context.Context, st *Stmt, p *Params, undo func(ctx context.Context, n int64) error) (int64, error) {
	return r.Grant(ctx, Grant{Run: func(ctx context.Context, q Querier, prefix string) (int64, error) {
		return intOn(ctx, q, prefix, st, p)
	}, Undo: undo})
}

// Cancellable runs run with a context that does not end with ctx: when ctx
// ends, cancel asks the server to cancel the running statement instead, so
// that the server stops waiting too and the connection stays usable; only
// if that fails, or run has not returned within CancelGrace, does run's
// context end (and the driver closes the connection). It reports whether
// ctx ended while run ran; the caller must then treat the connection's state
// as unknown. A nil cancel makes run's context end with ctx.
func Cancellable(ctx context.Context, cancel func(context.Context) error, run func(ctx context.Context) error) (cancelled bool, err error) {
	if cancel == nil || ctx.Done() == nil {
		// Nothing to cancel on the server, or a context that never ends:
		// run's context is ctx itself, which a driver need not watch.
		err = run(ctx)
		return ctx.Err() != nil && err != nil, err
	}
	qctx, qcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer qcancel()
	returned := make(chan struct{})
	finished := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(finished)
		// A cancel that reaches the server before the statement does is
		// lost: repeat it until run returns, for at most CancelGrace.
		deadline := time.NewTimer(CancelGrace)
		defer deadline.Stop()
		for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
			cctx, ccancel := context.WithTimeout(context.Background(), CancelGrace)
			err := cancel(cctx)
			ccancel()
			if err != nil {
				break
			}
			t := time.NewTimer(pause)
			select {
			case <-returned:
				t.Stop()
				return
			case <-deadline.C:
				t.Stop()
				qcancel()
				return
			case <-t.C:
			}
		}
		qcancel()
	})
	err = run(qctx)
	close(returned)
	if !stop() {
		<-finished
		return true, err
	}
	return false, err
}
