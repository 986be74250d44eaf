// Package shop is a test kit: the inventory scenario that sqllock's tests
// and its command's demo (sqllock demo) share, "2 hairdryers in stock, many
// buyers at once": a product row with a stock and a version, an orders
// table, buyers that all order at the same moment, and the count of what
// they were told against what the database holds afterwards. Nothing may be
// oversold, and no order or stock update may be lost. It uses database/sql
// alone, none of sqllock, so a program may check its own way of selling
// with it.
//
// How a buyer buys (without a lock, under a lock, with a version check, in a
// transaction with a row lock) is the caller's: that is what a test or the
// demo is about.
package shop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrSoldOut is what a purchase returns when too few items are left.
var ErrSoldOut = errors.New("sold out")

// Shop is the scenario's two tables on one pool:
//
//	products (id INT PRIMARY KEY, stock INT, version BIGINT), one row, id 1
//	orders   (buyer INT PRIMARY KEY, qty INT)
type Shop struct {
	db               *sql.DB
	products, orders string
	dollar           bool
}

// New returns the shop whose tables are prefix+"products" and
// prefix+"orders" on db. The prefix qualifies or sets apart the names (a
// quoted schema and a dot, or "sqllock_demo_"); it is not escaped. dollar
// selects PostgreSQL's $1, $2, ... placeholders for the statements of Q.
func New(db *sql.DB, prefix string, dollar bool) *Shop {
	return &Shop{db: db, products: prefix + "products", orders: prefix + "orders", dollar: dollar}
}

// Q rewrites query for the shop's database: {products} and {orders} become
// the tables' names, and each ? becomes $1, $2, ... where the database
// wants those.
func (s *Shop) Q(query string) string {
	query = strings.NewReplacer("{products}", s.products, "{orders}", s.orders).Replace(query)
	if !s.dollar {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Create creates the tables.
func (s *Shop) Create(ctx context.Context) error {
	for _, q := range []string{
		"CREATE TABLE {products} (id INT PRIMARY KEY, stock INT NOT NULL, version BIGINT NOT NULL)",
		"CREATE TABLE {orders} (buyer INT PRIMARY KEY, qty INT NOT NULL)",
	} {
		if _, err := s.db.ExecContext(ctx, s.Q(q)); err != nil {
			return fmt.Errorf("shop: %w", err)
		}
	}
	return nil
}

// Drop drops the tables, if they exist.
func (s *Shop) Drop(ctx context.Context) error {
	for _, q := range []string{"DROP TABLE IF EXISTS {orders}", "DROP TABLE IF EXISTS {products}"} {
		if _, err := s.db.ExecContext(ctx, s.Q(q)); err != nil {
			return fmt.Errorf("shop: %w", err)
		}
	}
	return nil
}

// Execer runs statements: a *sql.DB, *sql.Conn or *sql.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Order records buyer's order of qty items, on q (the transaction that
// changed the stock, say).
func (s *Shop) Order(ctx context.Context, q Execer, buyer, qty int) error {
	_, err := q.ExecContext(ctx, s.Q("INSERT INTO {orders} (buyer, qty) VALUES (?, ?)"), buyer, qty)
	return err
}

// Buyer makes buyer's purchase, and returns the number of items bought, or
// an error: ErrSoldOut when too few are left.
type Buyer func(ctx context.Context, buyer int) (qty int, err error)

// Result is the count of one run.
type Result struct {
	Initial int // items in stock before the run
	// As the buyers were told.
	Sold    int // items
	Orders  int // buyers who bought
	Refused int // buyers told ErrSoldOut
	// As the database has it afterwards.
	Left        int // the product's stock
	Recorded    int // rows of the orders table
	RecordedQty int // their items
	Took        time.Duration
}

// Verdict sums up r: "correct", "OVERSOLD by N" (more sold than there was,
// or a stock below zero), "LOST ORDER" (an order told to a buyer is not in
// the orders table, or the other way round) or "LOST UPDATE" (what was sold
// and what is left do not add up to what there was).
func (r Result) Verdict() string {
	switch {
	case r.Sold > r.Initial || r.Left < 0:
		return fmt.Sprintf("OVERSOLD by %d", max(r.Sold-r.Initial, -r.Left))
	case r.Recorded != r.Orders || r.RecordedQty != r.Sold:
		return "LOST ORDER"
	case r.Sold+r.Left != r.Initial:
		return "LOST UPDATE"
	}
	return "correct"
}

// Check returns nil when r's verdict is "correct", else an error saying what
// went wrong.
func (r Result) Check() error {
	if v := r.Verdict(); v != "correct" {
		return fmt.Errorf("shop: %s: %d in stock, sold %d in %d orders (recorded: %d items in %d orders), %d buyers refused, %d left",
			v, r.Initial, r.Sold, r.Orders, r.RecordedQty, r.Recorded, r.Refused, r.Left)
	}
	return nil
}

// Run restocks the product with stock items at version 1 and no orders,
// lets buyers buyers call buy all at the same moment (buyer numbers 0 to
// buyers-1), and counts. The error joins the buyers' errors other than
// ErrSoldOut, and a failure to restock or to read the result; the result
// is complete only without one.
func (s *Shop) Run(ctx context.Context, stock, buyers int, buy Buyer) (Result, error) {
	r := Result{Initial: stock}
	for _, q := range []string{"DELETE FROM {orders}", "DELETE FROM {products}"} {
		if _, err := s.db.ExecContext(ctx, s.Q(q)); err != nil {
			return r, fmt.Errorf("shop: %w", err)
		}
	}
	if _, err := s.db.ExecContext(ctx, s.Q("INSERT INTO {products} (id, stock, version) VALUES (1, ?, 1)"), stock); err != nil {
		return r, fmt.Errorf("shop: %w", err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		errs  []error
		start = make(chan struct{})
	)
	for b := range buyers {
		wg.Go(func() {
			<-start
			qty, err := buy(ctx, b)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ErrSoldOut):
				r.Refused++
			case err != nil:
				errs = append(errs, fmt.Errorf("buyer %d: %w", b, err))
			default:
				r.Sold += qty
				r.Orders++
			}
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	r.Took = time.Since(began)
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	if err := s.db.QueryRowContext(ctx, s.Q("SELECT stock FROM {products} WHERE id = 1")).Scan(&r.Left); err != nil {
		return r, fmt.Errorf("shop: %w", err)
	}
	if err := s.db.QueryRowContext(ctx, s.Q("SELECT count(*), coalesce(sum(qty), 0) FROM {orders}")).Scan(&r.Recorded, &r.RecordedQty); err != nil {
		return r, fmt.Errorf("shop: %w", err)
	}
	return r, nil
}
