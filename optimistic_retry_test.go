package sqllock_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock/rowlock"
	"github.com/sqllock/sqllock/sqllocktest/shop"
)

// hotRow runs the 200-buyer case: stock for every buyer, all buyers at once
// on one product row, each a read and a version-checked write through
// RetryOnConflict with opts. It returns the shop's count, the orders that
// failed (gave up on conflicts) and the attempts made in all.
func hotRow(t *testing.T, e *env, s *shop.Shop, buyers int, opts rowlock.RetryOptions) (shop.Result, int, int64) {
	t.Helper()
	ctx := ctxT(t)
	var failed, attempts atomic.Int64
	res, err := s.Run(ctx, buyers, buyers, func(ctx context.Context, buyer int) (int, error) {
		err := rowlock.RetryOnConflict(ctx, opts, func(ctx context.Context) error {
			attempts.Add(1)
			var stock int
			var version int64
			if err := e.db.QueryRowContext(ctx, s.Q("SELECT stock, version FROM {products} WHERE id = 1")).Scan(&stock, &version); err != nil {
				return err
			}
			if stock < 1 {
				return shop.ErrSoldOut
			}
			tx, err := e.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := rowlock.CheckUpdate(tx.ExecContext(ctx,
				s.Q("UPDATE {products} SET stock = ?, version = version + 1 WHERE id = 1 AND version = ?"), stock-1, version)); err != nil {
				return err
			}
			if err := s.Order(ctx, tx, buyer, 1); err != nil {
				return err
			}
			return tx.Commit()
		})
		if errors.Is(err, rowlock.ErrConflict) {
			failed.Add(1)
			return 0, shop.ErrSoldOut // counted apart: not an error of the run
		}
		return 1, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return res, int(failed.Load()), attempts.Load()
}

// 200 buyers on one hot row with RetryOnConflict's defaults: every order
// goes through (the default retries until ctx ends), nothing is oversold or
// lost. With SQLLOCK_TEST_HOTROW_COMPARE=1 it also runs the old default of
// 10 attempts side by side and logs how many orders that failed.
func TestRetryOnConflictHotRowDefaults(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		const buyers = 200
		s := e.shop(t)
		if compare, _ := strconv.ParseBool(os.Getenv("SQLLOCK_TEST_HOTROW_COMPARE")); compare {
			res, failed, attempts := hotRow(t, e, s, buyers, rowlock.RetryOptions{Attempts: 10})
			t.Logf("%s, Attempts 10: %d of %d orders failed, %d attempts, %v", e.kind, failed, buyers, attempts, res.Took.Round(time.Millisecond))
		}
		res, failed, attempts := hotRow(t, e, s, buyers, rowlock.RetryOptions{})
		t.Logf("%s, defaults: %d of %d orders failed, %d attempts, %v", e.kind, failed, buyers, attempts, res.Took.Round(time.Millisecond))
		if err := res.Check(); err != nil {
			t.Fatal(err)
		}
		if failed != 0 || res.Orders != buyers || res.Left != 0 {
			t.Fatalf("with the default retries %d of %d orders failed (%d sold, %d left)", failed, buyers, res.Orders, res.Left)
		}
	})
}

// By default RetryOnConflict has no bound on attempts: it retries until
// ctx ends.
func TestRetryOnConflictDefaultUntilContextEnds(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	fast := rowlock.RetryOptions{MinBackoff: time.Microsecond, MaxBackoff: time.Microsecond}
	calls := 0
	err := rowlock.RetryOnConflict(ctx, fast, func(context.Context) error {
		calls++
		if calls < 1000 {
			return rowlock.ErrConflict
		}
		return nil
	})
	if err != nil || calls != 1000 {
		t.Fatalf("err %v after %d calls, want success after 1000", err, calls)
	}
	cctx, cancel := context.WithCancel(ctx)
	calls = 0
	err = rowlock.RetryOnConflict(cctx, fast, func(context.Context) error {
		if calls++; calls == 50 {
			cancel()
		}
		return rowlock.ErrConflict
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, rowlock.ErrConflict) || calls != 50 {
		t.Fatalf("err %v after %d calls, want Canceled and ErrConflict after 50: no run once ctx ended", err, calls)
	}
}
