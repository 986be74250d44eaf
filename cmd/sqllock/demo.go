package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/rowlock"
	"github.com/sqllock/sqllock/sqllocktest/shop"
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
		if err := t.hasSchema(ctx); err != nil {
			return t.fail(err)
		}
		s := &demo{db: t.db, d: t.d, shop: shop.New(t.db, "sqllock_demo_", t.d.Name() == "postgres"), think: *think}
		if err := s.setup(ctx); err != nil {
			return t.fail(err)
		}
		defer s.shop.Drop(context.WithoutCancel(ctx))
		fmt.Fprintf(stdout, "A shop on %s has %d hairdryers; %d buyers order one each at the same moment.\n\n", t.d.Name(), *stock, *buyers)
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "STRATEGY\tSOLD\tREFUSED\tSTOCK LEFT\tWAITED\tRETRIED\tTIME\tRESULT")
		var naive shop.Result
		scenarios := s.scenarios()
		for _, sc := range scenarios {
			var n tally
			res, err := s.shop.Run(ctx, *stock, *buyers, func(ctx context.Context, buyer int) (int, error) {
				return 1, sc.buy(ctx, buyer, &n)
			})
			if err != nil {
				return t.fail(fmt.Errorf("demo %s: %w", sc.name, err))
			}
			if sc.name == "no lock" {
				naive = res
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%v\t%s\n", sc.name, res.Sold, res.Refused, res.Left,
				tallied(&n.waited, sc.waits), tallied(&n.retried, sc.retries), res.Took.Round(time.Millisecond), res.Verdict())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\n%s\n", oversoldNote(naive))
		fmt.Fprintln(stdout)
		for _, sc := range scenarios {
			fmt.Fprintf(stdout, "%-12s %s\n", sc.name+":", strings.ReplaceAll(sc.about, "\n", "\n"+strings.Repeat(" ", 13)))
		}
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
	// and counts its waits and retries in n.
	buy func(ctx context.Context, buyer int, n *tally) error
	// waits and retries say which counts of n buy keeps.
	waits, retries bool
	about          string // what it does, and its counts, under the table
}

// tally counts what the buyers of one scenario went through.
type tally struct {
	waited  atomic.Int64 // buyers who found the lock held and waited for it
	retried atomic.Int64 // runs of a buyer's code repeated (failed version checks, deadlocks)
}

// tallied shows n, or "-" for a count the scenario does not keep.
func tallied(n *atomic.Int64, kept bool) string {
	if !kept {
		return "-"
	}
	return strconv.FormatInt(n.Load(), 10)
}

// oversoldNote explains the no-lock row: why its stock left is what it is.
func oversoldNote(r shop.Result) string {
	if r.Sold <= r.Initial {
		return fmt.Sprintf("No lock: this run happened not to oversell (%d sold of %d); run it again, or raise --think.", r.Sold, r.Initial)
	}
	return fmt.Sprintf("No lock: buyers read the stock before others wrote it, and each wrote back what it read minus one: STOCK LEFT (%d) is the last write, not %d - %d, and %d were sold that did not exist.",
		r.Left, r.Initial, r.Sold, r.Sold-r.Initial)
}

func (s *demo) scenarios() []scenario {
	list := []scenario{
		{name: "no lock", buy: s.buyUnlocked, about: "read the stock, think, write what was read minus one."},
		{name: "one UPDATE", buy: s.buyOneStatement, about: "UPDATE ... SET stock = stock - 1 WHERE id = 1 AND stock >= 1: the database\n" +
			"checks and writes in one statement. No lock is needed when one row says it all."},
	}
	if l, err := sqllock.NewTable(s.d, sqllock.TableOptions{}); err == nil {
		list = append(list, scenario{name: "table", waits: true, buy: func(ctx context.Context, buyer int, n *tally) error {
			return s.buyLocked(ctx, l, buyer, n)
		}, about: "the no-lock code under a lock (sqllock.Table). WAITED: buyers who found it held."})
	}
	if s.d.Catalogue().Versions != nil {
		list = append(list, scenario{name: "optimistic", retries: true, buy: s.buyOptimistic,
			about: "the write checks the version it read (rowlock.RetryOnConflict).\n" +
				"RETRIED: checks that failed, each followed by a new read."})
	}
	if s.d.Catalogue().Pessimistic != nil {
		list = append(list, scenario{name: "pessimistic", retries: true, buy: s.buyPessimistic,
			about: "SELECT ... FOR UPDATE in a transaction (rowlock.InTx): buyers queue for the row\n" +
				"in the database (not counted). RETRIED: runs repeated after a deadlock."})
	}
	return list
}

// buyUnlocked is the naive code: read, think, write what was read minus one.
func (s *demo) buyUnlocked(ctx context.Context, buyer int, _ *tally) error {
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

// buyOneStatement checks and decrements the stock in one statement, in the
// transaction that records the order: no read before the write, so no
// window between them and no lock.
func (s *demo) buyOneStatement(ctx context.Context, buyer int, _ *tally) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, s.shop.Q("UPDATE {products} SET stock = stock - ? WHERE id = 1 AND stock >= ?"), 1, 1)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return shop.ErrSoldOut
	}
	if err := s.shop.Order(ctx, tx, buyer, 1); err != nil {
		return err
	}
	return tx.Commit()
}

// buyLocked is the no-lock code inside a lock on the product.
func (s *demo) buyLocked(ctx context.Context, l sqllock.Locker, buyer int, n *tally) error {
	lock, err := l.TryAcquire(ctx, "demo:hairdryer")
	if errors.Is(err, sqllock.ErrLocked) {
		n.waited.Add(1)
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
func (s *demo) buyOptimistic(ctx context.Context, buyer int, n *tally) error {
	attempts := 0
	return rowlock.RetryOnConflict(ctx, rowlock.RetryOptions{Attempts: 100}, func(ctx context.Context) error {
		if attempts++; attempts > 1 {
			n.retried.Add(1)
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
