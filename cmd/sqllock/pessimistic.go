package main

import (
	"context"
	"database/sql"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/rowlock"
	"github.com/sqllock/sqllock/sqllocktest/shop"
)

// newPessimistic builds the locker of --strategy pessimistic: the lock is a
// row lock of a transaction on a connection of its own, freed by the
// database the moment that connection dies.
func newPessimistic(d dialect.Dialect) (sqllock.Locker, error) {
	return sqllock.NewPessimistic(d, sqllock.PessimisticOptions{})
}

// buyPessimistic locks the product row (SELECT ... FOR UPDATE) in a
// transaction, so that buyers queue in the database; InTx runs it again
// after a deadlock, counted in n.retried.
func (s *demo) buyPessimistic(ctx context.Context, buyer int, n *tally) error {
	runs := 0
	return rowlock.InTx(ctx, s.d, rowlock.TxOptions{LockTimeout: time.Minute}, func(ctx context.Context, tx *sql.Tx) error {
		if runs++; runs > 1 {
			n.retried.Add(1)
		}
		var stock int
		if err := tx.QueryRowContext(ctx, s.shop.Q("SELECT stock FROM {products} WHERE id = 1 FOR UPDATE")).Scan(&stock); err != nil {
			return err
		}
		time.Sleep(s.think)
		if stock < 1 {
			return shop.ErrSoldOut
		}
		return s.order(ctx, tx, buyer, stock-1)
	})
}
