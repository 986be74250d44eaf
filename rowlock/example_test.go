package rowlock_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/rowlock"
)

// Two hairdryers in stock, many buyers: a read, a version-checked write,
// and retries on conflict. Nothing is ever oversold.
func ExampleRetryOnConflict() {
	ctx := context.Background()
	var db *sql.DB
	errSoldOut := errors.New("sold out")
	buy := func(id, qty int) error {
		return rowlock.RetryOnConflict(ctx, rowlock.RetryOptions{}, func(ctx context.Context) error {
			var stock int
			var version int64
			err := db.QueryRowContext(ctx, "SELECT stock, version FROM products WHERE id = $1", id).Scan(&stock, &version)
			if err != nil {
				return err
			}
			if stock < qty {
				return errSoldOut // not a conflict: not retried
			}
			err = rowlock.CheckUpdate(db.ExecContext(ctx,
				"UPDATE products SET stock = $1, version = version + 1 WHERE id = $2 AND version = $3",
				stock-qty, id, version))
			if errors.Is(err, rowlock.ErrConflict) {
				// Optional: tell a deleted product from a concurrent sale.
				err = rowlock.ConflictOrMissing(ctx, db, "SELECT 1 FROM products WHERE id = $1", id)
			}
			return err
		})
	}
	if err := buy(1, 2); err != nil {
		log.Print(err) // errSoldOut, ErrNotFound, or ErrConflict after the last attempt
	}
}

// The inventory with row locks: SELECT ... FOR UPDATE, check, UPDATE, in a
// transaction that InTx runs again after a deadlock.
func ExampleInTx() {
	ctx := context.Background()
	var d *postgres.Dialect
	errSoldOut := errors.New("sold out")
	err := rowlock.InTx(ctx, d, rowlock.TxOptions{LockTimeout: 2 * time.Second}, func(ctx context.Context, tx *sql.Tx) error {
		var stock int
		if err := tx.QueryRowContext(ctx, "SELECT stock FROM products WHERE id = $1 FOR UPDATE", 1).Scan(&stock); err != nil {
			return err
		}
		if stock < 2 {
			return errSoldOut // returned as is, never retried
		}
		_, err := tx.ExecContext(ctx, "UPDATE products SET stock = stock - 2 WHERE id = $1", 1)
		return err
	})
	switch {
	case errors.Is(err, sqllock.ErrLocked):
		log.Print("the product row stayed locked longer than 2s")
	case errors.Is(err, sqllock.ErrOutcomeUnknown):
		log.Print("the connection failed during COMMIT: check whether the sale happened")
	case err != nil:
		log.Print(err)
	}
}
