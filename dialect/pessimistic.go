package dialect

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"time"
)

// Pessimistic holds row locks in open transactions, for the pessimistic
// strategy (sqllock.NewPessimistic) and the transaction helper
// (rowlock.InTx).
type Pessimistic interface {
	// LockRow pins a connection of the pool, begins a transaction on it and
	// locks p.Name's row of the row-lock table, exclusively or (p.Shared)
	// in share mode. A missing row is first created in a short transaction
	// of its own, without duplicate-key errors. Once the row is locked, a
	// fencing token is drawn that is greater than every token drawn before
	// for any name, and never handed out twice, even if the transaction
	// rolls back.
	//
	// Without p.Wait, LockRow returns an error wrapping ErrLocked at once
	// when the row is locked in a conflicting mode (NOWAIT). With p.Wait it
	// waits in the database's lock queue; if ctx ends first, the wait is
	// cancelled on the server too before LockRow returns an error wrapping
	// ctx.Err(). When no connection of the pool frees up before ctx ends,
	// the error wraps ErrPoolExhausted. On error, nothing stays pinned.
	LockRow(ctx context.Context, p RowLockParams) (*RowLock, error)

	// BeginTx pins a connection and begins a transaction on it whose lock
	// waits each end with an error that Classify maps to ErrLocked after
	// lockTimeout (0: the server's setting). Closing the returned RowTx's
	// connection undoes any session setting BeginTx made.
	BeginTx(ctx context.Context, opts *sql.TxOptions, lockTimeout time.Duration) (*RowTx, error)

	// Classify wraps err, from a statement of a transaction or its commit,
	// with ErrLocked for a lock wait that timed out or a NOWAIT refusal,
	// ErrRolledBack for a commit that the server turned into a rollback,
	// ErrTransient for a deadlock or serialization failure (the transaction
	// was rolled back and may be run again), ErrSchemaMissing for missing
	// tables, and ErrOutcomeUnknown for every error that is not the server's
	// answer (a failed connection, a context that ended mid-statement): the
	// statement may have been applied. Other answers of the server (the
	// statement was refused) are returned as they are.
	Classify(err error) error
}

// RowLockParams are the parameters of Pessimistic.LockRow.
type RowLockParams struct {
	Name string
	// Shared takes the row in share mode (FOR SHARE): shared holders
	// coexist, and exclude exclusive ones.
	Shared bool
	// Wait waits for a conflicting lock to end instead of failing at once.
	Wait bool
}

// RowLock is a row lock held by an open transaction on a pinned connection.
// Committing or rolling back Tx releases it; Close must then be called to
// return the connection to the pool.
type RowLock struct {
	RowTx
	Token int64
}

// RowTx is a transaction on a connection pinned for it.
type RowTx struct {
	Conn *sql.Conn
	Tx   *sql.Tx
	// Reset, if not nil, undoes session settings on Conn; it runs after the
	// transaction ends and before Conn goes back to the pool.
	Reset func(ctx context.Context) error
}

// Close returns the connection to the pool, after undoing session settings.
// If those cannot be undone, the connection is discarded instead. Call it
// after the transaction ended.
func (t *RowTx) Close(ctx context.Context) error {
	var err error
	if t.Reset != nil {
		err = t.Reset(ctx)
	}
	if err != nil {
		_ = Discard(t.Conn)
		return err
	}
	return t.Conn.Close()
}

// Discard closes the driver connection behind conn instead of returning it to
// the pool: for a connection whose session state is unknown, such as one
// whose statement was cancelled on the server.
//
// Discard is safe while database/sql closes conn on a goroutine of its own,
// as it may after a transaction on conn whose context ended.
func Discard(conn *sql.Conn) error {
	if !markBad(conn) {
		return sql.ErrConnDone
	}
	return conn.Close()
}

// markBad has database/sql discard conn's driver connection when conn is
// closed, and reports whether conn was still open.
//
// When a transaction's context ends, database/sql rolls the transaction
// back on a goroutine of its own and, if the driver reports the
// connection bad (pgx does once a cancel closed it), closes conn there. A
// close that lands between sql.Conn.Raw's check that conn is open and its
// lock of conn leaves Raw a nil driver connection, and Raw panics (Go 1.26,
// database/sql's Conn.grabConn). conn is then closed already, which is all
// Discard asks for; the read lock Raw took is never released, and nothing
// waits for it, as a closed Conn is never locked again.
func markBad(conn *sql.Conn) (open bool) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(runtime.Error); !ok {
				panic(r)
			}
			open = false
		}
	}()
	err := conn.Raw(func(any) error { return driverBadConn })
	return !errors.Is(err, sql.ErrConnDone)
}
