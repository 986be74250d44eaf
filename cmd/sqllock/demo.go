package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/shop"
	"github.com/sqllock/sqllock/rowlock"
)

func demoFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := localDSNFlag(fs), schemaFlag(fs)
	conns := fs.Int("conns", 10, "most database connections the demo opens at once (buyers queue for them)")
	stock := fs.Int("stock", 2, "hairdryers in stock")
	buyers := fs.Int("buyers", 5, "buyers ordering one each, all at once")
	think := durationFlag(fs, "think", 20*time.Millisecond, "time a buyer spends between reading the stock and ordering (the race window)")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 0 {
			return usageError{msg: "demo takes no arguments"}
		}
		if *stock < 0 || *buyers < 1 || *buyers > 1000 || *think < 0 || *conns < 2 {
			return usageError{msg: "demo needs --stock >= 0, 1 <= --buyers <= 1000, --think >= 0 and --conns >= 2"}
		}
		t, err := openTarget(ctx, *dsn, *schema)
		if err != nil {
			return err
		}
		defer t.Close()
		// However many buyers, the demo never takes more than --conns of
		// the server's connections: buyers queue for the pool.
		t.db.SetMaxOpenConns(*conns)
		if err := t.ready(ctx); err != nil {
			return err
		}
		if _, err := t.d.Catalogue().Locks.List(ctx); err != nil { // is the schema there?
			return t.fail(err)
		}
		s := &demo{db: t.db, d: t.d, shop: shop.New(t.db, "sqllock_demo_", t.d.Name() == "postgres"), think: *think}
		if err := s.setup(ctx); err != nil {
			return t.fail(err)
		}
		defer s.shop.Drop(context.WithoutCancel(ctx))
		fmt.Fprintf(stdout, "A shop on %s has %d hairdryers; %d buyers order one each at the same moment.\n\n", t.d.Name(), *stock, *buyers)
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "STRATEGY\tSOLD\tREFUSED\tSTOCK LEFT\tRETRIES/WAITS\tTIME\tRESULT")
		for _, sc := range s.scenarios() {
			var extra atomic.Int64
			res, err := s.shop.Run(ctx, *stock, *buyers, func(ctx context.Context, buyer int) (int, error) {
				return 1, sc.buy(ctx, buyer, &extra)
			})
			if err != nil {
				return t.fail(fmt.Errorf("demo %s: %w", sc.name, err))
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%v\t%s\n", sc.name, res.Sold, res.Refused, res.Left, extra.Load(), res.Took.Round(time.Millisecond), res.Verdict())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprint(stdout, `
no lock:     each buyer reads the stock, thinks, then writes stock - 1: buyers who
             read the same stock all sell, so the shop can sell what it does not have.
table:       buyers take turns under a lock row (RETRIES/WAITS: buyers who had to wait).
optimistic:  the write checks the version read; a moved version means read again
             (RETRIES/WAITS: failed version checks).
pessimistic: SELECT ... FOR UPDATE in a transaction: buyers queue for the row in the
             database (RETRIES/WAITS: runs repeated after a deadlock; not on SQLite).
`)
		return nil
	}
}

// demo plays the scenarios of the shop, whose buyers each order one item.
type demo struct {
	db    *sql.DB
	d     dialect.Dialect
	shop  *shop.Shop
	think time.Duration
}

// setup makes the shop's tables afresh.
func (s *demo) setup(ctx context.Context) error {
	if err := s.shop.Drop(ctx); err != nil {
		return err
	}
	return s.shop.Create(ctx)
}

type scenario struct {
	name string
	// buy makes buyer's purchase of one item, or returns shop.ErrSoldOut,
	// and counts retries or waits in extra.
	buy func(ctx context.Context, buyer int, extra *atomic.Int64) error
}

func (s *demo) scenarios() []scenario {
	list := []scenario{{"no lock", s.buyUnlocked}}
	if l, err := sqllock.NewTable(s.d, sqllock.TableOptions{}); err == nil {
		list = append(list, scenario{"table", func(ctx context.Context, buyer int, waits *atomic.Int64) error {
			return s.buyLocked(ctx, l, buyer, waits)
		}})
	}
	if s.d.Catalogue().Versions != nil {
		list = append(list, scenario{"optimistic", s.buyOptimistic})
	}
	if s.d.Catalogue().Pessimistic != nil {
		list = append(list, scenario{"pessimistic", s.buyPessimistic})
	}
	return list
}

// buyUnlocked is the naive code: read, think, write what was read minus one.
func (s *demo) buyUnlocked(ctx context.Context, buyer int, _ *atomic.Int64) error {
	var stock int
	if err := s.db.QueryRowContext(ctx, s.shop.Q("SELECT stock FROM {products} WHERE id = 1")).Scan(&stock); err != nil {
		return err
	}
	time.Sleep(s.think) // the payment provider answers
	if stock < 1 {
		return shop.ErrSoldOut
	}
	return s.order(ctx, s.db, buyer, stock-1)
}

// buyLocked is the same code inside a lock on the product.
func (s *demo) buyLocked(ctx context.Context, l sqllock.Locker, buyer int, waits *atomic.Int64) error {
	lock, err := l.TryAcquire(ctx, "demo:hairdryer")
	if errors.Is(err, sqllock.ErrLocked) {
		waits.Add(1)
		lock, err = l.Acquire(ctx, "demo:hairdryer")
	}
	if err != nil {
		return err
	}
	defer lock.Release(context.WithoutCancel(ctx))
	return s.buyUnlocked(lock.Context(), buyer, nil)
}

// buyOptimistic reads stock and version, and writes only if the version has
// not moved, retrying on conflict.
func (s *demo) buyOptimistic(ctx context.Context, buyer int, retries *atomic.Int64) error {
	attempts := 0
	return rowlock.RetryOnConflict(ctx, rowlock.RetryOptions{Attempts: 100}, func(ctx context.Context) error {
		if attempts++; attempts > 1 {
			retries.Add(1)
		}
		var stock int
		var version int64
		if err := s.db.QueryRowContext(ctx, s.shop.Q("SELECT stock, version FROM {products} WHERE id = 1")).Scan(&stock, &version); err != nil {
			return err
		}
		time.Sleep(s.think)
		if stock < 1 {
			return shop.ErrSoldOut
		}
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		err = rowlock.CheckUpdate(tx.ExecContext(ctx,
			s.shop.Q("UPDATE {products} SET stock = ?, version = version + 1 WHERE id = 1 AND version = ?"), stock-1, version))
		if err != nil {
			return err
		}
		if err := s.shop.Order(ctx, tx, buyer, 1); err != nil {
			return err
		}
		return tx.Commit()
	})
}

// order writes the new stock and records the buyer's order.
func (s *demo) order(ctx context.Context, db shop.Execer, buyer, stock int) error {
	if _, err := db.ExecContext(ctx, s.shop.Q("UPDATE {products} SET stock = ? WHERE id = 1"), stock); err != nil {
		return err
	}
	return s.shop.Order(ctx, db, buyer, 1)
}
