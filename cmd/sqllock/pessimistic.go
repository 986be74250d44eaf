package main

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

// newPessimistic builds the locker of --strategy pessimistic: the lock is a
// row lock of a transaction on a connection of its own, freed by the
// database the moment that connection dies.
func newPessimistic(d dialect.Dialect) (sqllock.Locker, error) {
	return sqllock.NewPessimistic(d, sqllock.PessimisticOptions{})
}

// buyPessimistic locks the product row (SELECT ... FOR UPDATE) in a
// transaction, so that buyers queue in the database; InTx runs it again
// after a deadlock, counted in retries.
func (s *shop) buyPessimistic(ctx context.Context, buyer int, retries *atomic.Int64) (bool, error) {
	runs := 0
	err := sqllock.InTx(ctx, s.d, sqllock.TxOptions{LockTimeout: time.Minute}, func(ctx context.Context, tx *sql.Tx) error {
		if runs++; runs > 1 {
			retries.Add(1)
		}
		var stock int
		if err := tx.QueryRowContext(ctx, "SELECT stock FROM sqllock_demo_products WHERE id = 1 FOR UPDATE").Scan(&stock); err != nil {
			return err
		}
		time.Sleep(s.think)
		if stock < 1 {
			return errSoldOut
		}
		return s.order(ctx, tx, buyer, stock-1, "UPDATE sqllock_demo_products SET stock = ? WHERE id = 1")
	})
	if errors.Is(err, errSoldOut) {
		return false, nil
	}
	return err == nil, err
}
