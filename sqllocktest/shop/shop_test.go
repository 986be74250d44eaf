package shop_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/sqllocktest/shop"
)

func TestVerdict(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		r    shop.Result
		want string
	}{
		{shop.Result{Initial: 2, Sold: 2, Orders: 2, Left: 0, Recorded: 2, RecordedQty: 2}, "correct"},
		{shop.Result{Initial: 2, Sold: 1, Orders: 1, Refused: 4, Left: 1, Recorded: 1, RecordedQty: 1}, "correct"},
		{shop.Result{Initial: 2, Sold: 5, Orders: 5, Left: 1, Recorded: 5, RecordedQty: 5}, "OVERSOLD by 3"},
		{shop.Result{Initial: 2, Sold: 2, Orders: 2, Left: -1, Recorded: 2, RecordedQty: 2}, "OVERSOLD by 1"},
		{shop.Result{Initial: 2, Sold: 2, Orders: 2, Left: 0, Recorded: 1, RecordedQty: 1}, "LOST ORDER"},
		{shop.Result{Initial: 3, Sold: 2, Orders: 2, Left: 0, Recorded: 2, RecordedQty: 2}, "LOST UPDATE"},
	} {
		if got := c.r.Verdict(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
		if err := c.r.Check(); (err == nil) != (c.want == "correct") {
			t.Errorf("%+v: Check() = %v", c.r, err)
		}
	}
}

func TestQ(t *testing.T) {
	t.Parallel()
	q := "UPDATE {products} SET stock = ? WHERE id = ? -- {orders}"
	if got, want := shop.New(nil, `"s".`, true).Q(q), `UPDATE "s".products SET stock = $1 WHERE id = $2 -- "s".orders`; got != want {
		t.Errorf("dollar: %q, want %q", got, want)
	}
	if got, want := shop.New(nil, "demo_", false).Q(q), "UPDATE demo_products SET stock = ? WHERE id = ? -- demo_orders"; got != want {
		t.Errorf("question: %q, want %q", got, want)
	}
}

// Run counts what the buyers were told and what the database holds.
func TestRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "shop.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := shop.New(db, "", false)
	if err := s.Create(ctx); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // the lock the buyers take turns under
	res, err := s.Run(ctx, 3, 10, func(ctx context.Context, buyer int) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		var stock int
		if err := db.QueryRowContext(ctx, s.Q("SELECT stock FROM {products} WHERE id = 1")).Scan(&stock); err != nil {
			return 0, err
		}
		if stock < 1 {
			return 0, shop.ErrSoldOut
		}
		if _, err := db.ExecContext(ctx, s.Q("UPDATE {products} SET stock = stock - 1 WHERE id = 1")); err != nil {
			return 0, err
		}
		return 1, s.Order(ctx, db, buyer, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := shop.Result{Initial: 3, Sold: 3, Orders: 3, Refused: 7, Left: 0, Recorded: 3, RecordedQty: 3, Took: res.Took}
	if res != want || res.Check() != nil {
		t.Fatalf("Run: %+v, want %+v", res, want)
	}

	boom := errors.New("boom")
	if _, err := s.Run(ctx, 1, 2, func(context.Context, int) (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("Run with failing buyers: %v, want their error", err)
	}
	if err := s.Drop(ctx); err != nil {
		t.Fatal(err)
	}
}
