package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/sqllock/sqllock"
)

// Both endings of a pessimistic lock's transaction, on every database with
// row locks: Abort rolls back and frees the lock; an Abort of a re-entered
// hold makes the last Release roll back and say so (ErrRolledBack); a
// transaction that its caller ended through Tx makes Release say that
// (sql.ErrTxDone), not ErrOutcomeUnknown; after a failed statement,
// PostgreSQL's aborted transaction makes Release report ErrRolledBack,
// while MySQL/MariaDB undo the failed statement only and Release commits
// the rest; Abort after a failed statement rolls everything back on both.
func TestPessimisticTxEndings(t *testing.T) {
	eachPessimistic(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.pessimistic(t, sqllock.PessimisticOptions{})
		if _, err := e.db.ExecContext(ctx, e.q("CREATE TABLE {stock} (id INT PRIMARY KEY, n INT NOT NULL)")); err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.ExecContext(ctx, e.q("INSERT INTO {stock} VALUES (1, 90)")); err != nil {
			t.Fatal(err)
		}
		stock := func() int {
			t.Helper()
			var n int
			if err := e.db.QueryRowContext(ctx, e.q("SELECT n FROM {stock} WHERE id = 1")).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		decrement := func(k *sqllock.Lock) {
			t.Helper()
			if _, err := k.Tx().ExecContext(ctx, e.q("UPDATE {stock} SET n = n - 1 WHERE id = 1")); err != nil {
				t.Fatal(err)
			}
		}
		fail := func(k *sqllock.Lock) {
			t.Helper()
			// A duplicate key: refused by the server, the session lives.
			if _, err := k.Tx().ExecContext(ctx, e.q("INSERT INTO {stock} VALUES (1, 0)")); err == nil {
				t.Fatal("duplicate insert succeeded")
			}
		}
		acquire := func(ctx context.Context) *sqllock.Lock {
			t.Helper()
			k, err := l.TryAcquire(ctx, "stock")
			if err != nil {
				t.Fatal(err)
			}
			return k
		}
		free := func(what string) {
			t.Helper()
			k, err := e.pessimistic(t, sqllock.PessimisticOptions{}).TryAcquire(ctx, "stock")
			if err != nil {
				t.Fatalf("after %s the lock is not free: %v", what, err)
			}
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		notUnknown := func(what string, err error) {
			t.Helper()
			if errors.Is(err, sqllock.ErrOutcomeUnknown) || errors.Is(err, sqllock.ErrLockLost) {
				t.Fatalf("%s: %v: the outcome is known and the lock was not lost", what, err)
			}
		}

		// Abort: nothing applied, the lock free, the handle spent.
		k := acquire(ctx)
		decrement(k)
		if err := k.Abort(ctx); err != nil {
			t.Fatalf("Abort: %v", err)
		}
		if n := stock(); n != 90 {
			t.Fatalf("after Abort the stock is %d, want 90", n)
		}
		if cause := context.Cause(k.Context()); !errors.Is(cause, sqllock.ErrNotHeld) {
			t.Fatalf("aborted lock's context: %v, want ErrNotHeld", cause)
		}
		if err := k.Release(ctx); !errors.Is(err, sqllock.ErrNotHeld) {
			t.Fatalf("Release after Abort: %v, want ErrNotHeld", err)
		}
		free("Abort")

		// Abort of a re-entered hold: the last Release rolls back.
		octx := sqllock.WithOwner(ctx, "owner-1")
		outer := acquire(octx)
		inner := acquire(octx)
		decrement(inner)
		if err := inner.Abort(ctx); err != nil {
			t.Fatalf("Abort of the inner hold: %v", err)
		}
		err := outer.Release(ctx)
		if !errors.Is(err, sqllock.ErrRolledBack) {
			t.Fatalf("Release after an inner Abort: %v, want ErrRolledBack", err)
		}
		notUnknown("Release after an inner Abort", err)
		if n := stock(); n != 90 {
			t.Fatalf("after an inner Abort the stock is %d, want 90", n)
		}
		free("an inner Abort")

		// The caller's own Rollback (or Commit) of Tx.
		k = acquire(ctx)
		decrement(k)
		if err := k.Tx().Rollback(); err != nil {
			t.Fatal(err)
		}
		err = k.Release(ctx)
		if !errors.Is(err, sql.ErrTxDone) {
			t.Fatalf("Release after Tx().Rollback(): %v, want sql.ErrTxDone", err)
		}
		notUnknown("Release after Tx().Rollback()", err)
		if n := stock(); n != 90 {
			t.Fatalf("after Tx().Rollback() the stock is %d, want 90", n)
		}
		free("Tx().Rollback()")

		// A failed statement, then Release.
		k = acquire(ctx)
		decrement(k)
		fail(k)
		err = k.Release(ctx)
		notUnknown("Release after a failed statement", err)
		switch e.kind {
		case "postgres": // the transaction was aborted: COMMIT became ROLLBACK
			if !errors.Is(err, sqllock.ErrRolledBack) {
				t.Fatalf("Release after a failed statement: %v, want ErrRolledBack", err)
			}
			if n := stock(); n != 90 {
				t.Fatalf("after the rolled-back release the stock is %d, want 90", n)
			}
		default: // statement-level rollback: the rest commits
			if err != nil {
				t.Fatalf("Release after a failed statement: %v", err)
			}
			if n := stock(); n != 89 {
				t.Fatalf("after the release the stock is %d, want 89 (the failed statement alone undone)", n)
			}
			if _, err := e.db.ExecContext(ctx, e.q("UPDATE {stock} SET n = 90 WHERE id = 1")); err != nil {
				t.Fatal(err)
			}
		}
		free("a release after a failed statement")

		// A failed statement, then Abort: the same on every database.
		k = acquire(ctx)
		decrement(k)
		fail(k)
		if err := k.Abort(ctx); err != nil {
			t.Fatalf("Abort after a failed statement: %v", err)
		}
		if n := stock(); n != 90 {
			t.Fatalf("after Abort the stock is %d, want 90", n)
		}
		free("Abort after a failed statement")
	})
}

// Abort of a lease-based lock is Release: there is no transaction.
func TestAbortLease(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.locker(t, sqllock.TableOptions{})
		k, err := l.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Abort(ctx); err != nil {
			t.Fatal(err)
		}
		if err := k.Abort(ctx); !errors.Is(err, sqllock.ErrNotHeld) {
			t.Fatalf("second Abort: %v, want ErrNotHeld", err)
		}
		k, err = l.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatalf("after Abort: %v", err)
		}
		_ = k.Release(ctx)
	})
}
