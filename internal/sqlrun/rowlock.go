package sqlrun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// RowLocker runs the pessimistic strategy's acquisition, leaving a dialect
// its statements and its way of cancelling a statement on the server.
type RowLocker struct {
	Run *Runner
	// Lock runs the locking statement (and draws the token) in tx. found
	// is false when name has no row.
	Lock func(ctx context.Context, tx *sql.Tx, p dialect.RowLockParams) (token int64, found bool, err error)
	// Create inserts name's row on conn, outside any transaction, doing
	// nothing if it exists.
	Create func(ctx context.Context, conn *sql.Conn, name string) error
	// Canceller cancels a waiting statement on the server.
	Canceller ConnCanceller
	// TxOptions, if not nil, are the options of the lock's transaction.
	TxOptions *sql.TxOptions
}

// ConnCanceller returns a function that cancels, on the server, the
// statement running on conn at the time it is called. It is prepared before
// a waiting statement starts.
type ConnCanceller func(ctx context.Context, conn *sql.Conn) (func(context.Context) error, error)

// maxRowCreates bounds how often LockRow creates a name's row: after the
// first time, only a reaper deleting the row between its creation and its
// lock makes LockRow create it again. Even reapers running back to back on
// a handful of names do that to about one creation in eight, so ten in a
// row do not happen unless something else deletes the rows.
const maxRowCreates = 10

// CancelGrace bounds how long a cancelled wait may take to end on the
// server before its connection is abandoned (closed by the driver).
const CancelGrace = 2 * time.Second

// LockRow implements dialect.Pessimistic.LockRow.
func (r *RowLocker) LockRow(ctx context.Context, p dialect.RowLockParams) (*dialect.RowLock, error) {
	conn, err := r.Run.Pin(ctx)
	if err != nil {
		return nil, err
	}
	var cancel func(context.Context) error
	if p.Wait {
		if cancel, err = r.Canceller(ctx, conn); err != nil {
			conn.Close()
			return nil, r.Run.Wrap(err)
		}
	}
	for creates := 0; ; creates++ {
		// The transaction must outlive ctx: the lock is held until released.
		tx, err := r.Run.BeginLasting(ctx, conn, r.TxOptions)
		if errors.Is(err, dialect.ErrNoAnswer) {
			_ = dialect.Discard(conn)
			return nil, err
		}
		if err != nil {
			conn.Close()
			return nil, r.Run.Wrap(err)
		}
		var token int64
		var found bool
		// A wait in the database's lock queue lasts as long as ctx; a
		// try is a statement like any other, bounded.
		lctx, lstop := ctx, context.CancelFunc(func() {})
		if !p.Wait {
			lctx, lstop = r.Run.Bound(ctx)
		}
		cancelled, err := Cancellable(lctx, cancel, func(qctx context.Context) error {
			var err error
			token, found, err = r.Lock(qctx, tx, p)
			return err
		})
		if cancelled || err != nil || !found {
			_ = tx.Rollback()
		}
		switch {
		case cancelled:
			// The server may still be acting on the cancel: the
			// connection's state is unknown.
			_ = dialect.Discard(conn)
			err = Settle(lctx, WithCause(lctx, r.Run.Wrap(err)))
			lstop()
			return nil, err
		case err != nil:
			lstop()
			conn.Close()
			return nil, r.Run.Wrap(err)
		case found:
			lstop()
			return &dialect.RowLock{RowTx: dialect.RowTx{Conn: conn, Tx: tx}, Token: token}, nil
		case creates == maxRowCreates:
			lstop()
			conn.Close()
			return nil, fmt.Errorf("%w: the row of lock %q was deleted %d times between its creation and its lock",
				dialect.ErrTransient, p.Name, creates)
		}
		// No row: the name's first use, or the reaper deleted the row
		// before this lock (or the one this call waited behind) took it.
		lstop()
		cctx, cstop := r.Run.Bound(ctx)
		err = r.Create(cctx, conn, p.Name)
		if err != nil {
			err = Settle(cctx, r.Run.Wrap(err))
			cstop()
			_ = dialect.Discard(conn)
			return nil, err
		}
		cstop()
	}
}

// RowModes are a dialect's four locking reads of a row-lock row.
type RowModes struct {
	Exclusive, ExclusiveNoWait, Shared, SharedNoWait string
}

// NewRowModes builds the four reads from lock, which appends a locking
// clause to the dialect's read, and the dialect's share clause.
func NewRowModes(lock func(mode string) string, share string) RowModes {
	return RowModes{
		Exclusive:       lock("FOR UPDATE"),
		ExclusiveNoWait: lock("FOR UPDATE NOWAIT"),
		Shared:          lock(share),
		SharedNoWait:    lock(share + " NOWAIT"),
	}
}

// For returns the read that p asks for.
func (m *RowModes) For(p dialect.RowLockParams) string {
	switch {
	case p.Shared && p.Wait:
		return m.Shared
	case p.Shared:
		return m.SharedNoWait
	case p.Wait:
		return m.Exclusive
	}
	return m.ExclusiveNoWait
}
