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
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

func demoFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn := dsnFlag(fs)
	stock := fs.Int("stock", 2, "hairdryers in stock")
	buyers := fs.Int("buyers", 5, "buyers ordering one each, all at once")
	think := fs.Duration("think", 20*time.Millisecond, "time a buyer spends between reading the stock and ordering (the race window)")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 0 {
			return usageError{"demo takes no arguments"}
		}
		if *stock < 0 || *buyers < 1 || *buyers > 1000 || *think < 0 {
			return usageError{"demo needs --stock >= 0, 1 <= --buyers <= 1000 and --think >= 0"}
		}
		t, err := openTarget(ctx, *dsn)
		if err != nil {
			return err
		}
		defer t.Close()
		if err := t.ready(ctx); err != nil {
			return err
		}
		if _, err := listLocks(ctx, t.d); err != nil { // is the schema there?
			return t.fail(err)
		}
		s := &shop{db: t.db, d: t.d, stock: *stock, buyers: *buyers, think: *think}
		if err := s.setup(ctx); err != nil {
			return t.fail(err)
		}
		defer s.teardown(context.WithoutCancel(ctx))
		fmt.Fprintf(stdout, "A shop on %s has %d hairdryers; %d buyers order one each at the same moment.\n\n", t.d.Name(), *stock, *buyers)
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "STRATEGY\tSOLD\tREFUSED\tSTOCK LEFT\tRETRIES/WAITS\tTIME\tRESULT")
		for _, sc := range s.scenarios() {
			res, err := s.play(ctx, sc)
			if err != nil {
				return t.fail(fmt.Errorf("demo %s: %w", sc.name, err))
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%v\t%s\n", sc.name, res.sold, res.refused, res.left, res.extra, res.took.Round(time.Millisecond), res.verdict(*stock))
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

// shop is the demo's data: one product row and an orders table.
type shop struct {
	db            *sql.DB
	d             dialect.Dialect
	stock, buyers int
	think         time.Duration
}

// q adapts ?-placeholders to the dialect.
func (s *shop) q(query string) string {
	if s.d.Name() != "postgres" {
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

func (s *shop) setup(ctx context.Context) error {
	s.teardown(ctx)
	for _, q := range []string{
		"CREATE TABLE sqllock_demo_products (id INT PRIMARY KEY, stock INT NOT NULL, version BIGINT NOT NULL)",
		"CREATE TABLE sqllock_demo_orders (buyer INT PRIMARY KEY)",
	} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func (s *shop) teardown(ctx context.Context) {
	for _, q := range []string{"DROP TABLE IF EXISTS sqllock_demo_orders", "DROP TABLE IF EXISTS sqllock_demo_products"} {
		_, _ = s.db.ExecContext(ctx, q)
	}
}

type scenario struct {
	name string
	// buy makes buyer's purchase; it reports whether the buyer got one, and
	// counts retries or waits in extra.
	buy func(ctx context.Context, buyer int, extra *atomic.Int64) (bool, error)
}

type result struct {
	sold, refused, left int
	extra               int64
	took                time.Duration
}

func (r result) verdict(initial int) string {
	switch {
	case r.sold > initial || r.left < 0:
		return fmt.Sprintf("OVERSOLD by %d", r.sold-initial)
	case r.sold+r.left != initial:
		return "LOST UPDATE"
	}
	return "correct"
}

var errSoldOut = errors.New("sold out")

func (s *shop) scenarios() []scenario {
	list := []scenario{{"no lock", s.buyUnlocked}}
	if l, err := sqllock.NewTable(s.d, sqllock.Options{}); err == nil {
		list = append(list, scenario{"table", func(ctx context.Context, buyer int, waits *atomic.Int64) (bool, error) {
			return s.buyLocked(ctx, l, buyer, waits)
		}})
	}
	if _, ok := s.d.(dialect.Optimistic); ok {
		list = append(list, scenario{"optimistic", s.buyOptimistic})
	}
	if _, ok := s.d.(dialect.Pessimistic); ok {
		list = append(list, scenario{"pessimistic", s.buyPessimistic})
	}
	return list
}

func (s *shop) play(ctx context.Context, sc scenario) (result, error) {
	for _, q := range []string{"DELETE FROM sqllock_demo_orders", "DELETE FROM sqllock_demo_products"} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return result{}, err
		}
	}
	if _, err := s.db.ExecContext(ctx, s.q("INSERT INTO sqllock_demo_products VALUES (1, ?, 1)"), s.stock); err != nil {
		return result{}, err
	}
	var (
		wg    sync.WaitGroup
		res   result
		mu    sync.Mutex
		errs  []error
		extra atomic.Int64
		start = make(chan struct{})
	)
	for b := range s.buyers {
		wg.Go(func() {
			<-start
			ok, err := sc.buy(ctx, b, &extra)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case ok:
				res.sold++
			default:
				res.refused++
			}
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	res.took = time.Since(began)
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	res.extra = extra.Load()
	err := s.db.QueryRowContext(ctx, "SELECT stock FROM sqllock_demo_products WHERE id = 1").Scan(&res.left)
	return res, err
}

// buyUnlocked is the naive code: read, think, write what was read minus one.
func (s *shop) buyUnlocked(ctx context.Context, buyer int, _ *atomic.Int64) (bool, error) {
	var stock int
	if err := s.db.QueryRowContext(ctx, "SELECT stock FROM sqllock_demo_products WHERE id = 1").Scan(&stock); err != nil {
		return false, err
	}
	time.Sleep(s.think) // the payment provider answers
	if stock < 1 {
		return false, nil
	}
	return true, s.order(ctx, s.db, buyer, stock-1, "UPDATE sqllock_demo_products SET stock = ? WHERE id = 1")
}

// buyLocked is the same code inside a lock on the product.
func (s *shop) buyLocked(ctx context.Context, l sqllock.Locker, buyer int, waits *atomic.Int64) (bool, error) {
	lock, err := l.TryAcquire(ctx, "demo:hairdryer")
	if errors.Is(err, sqllock.ErrLocked) {
		waits.Add(1)
		lock, err = l.Acquire(ctx, "demo:hairdryer")
	}
	if err != nil {
		return false, err
	}
	defer lock.Release(context.WithoutCancel(ctx))
	return s.buyUnlocked(lock.Context(), buyer, nil)
}

// buyOptimistic reads stock and version, and writes only if the version has
// not moved, retrying on conflict.
func (s *shop) buyOptimistic(ctx context.Context, buyer int, retries *atomic.Int64) (bool, error) {
	attempts := 0
	err := sqllock.RetryOnConflict(ctx, sqllock.RetryOptions{Attempts: 100}, func(ctx context.Context) error {
		if attempts++; attempts > 1 {
			retries.Add(1)
		}
		var stock int
		var version int64
		if err := s.db.QueryRowContext(ctx, "SELECT stock, version FROM sqllock_demo_products WHERE id = 1").Scan(&stock, &version); err != nil {
			return err
		}
		time.Sleep(s.think)
		if stock < 1 {
			return errSoldOut
		}
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		err = sqllock.CheckUpdate(tx.ExecContext(ctx,
			s.q("UPDATE sqllock_demo_products SET stock = ?, version = version + 1 WHERE id = 1 AND version = ?"), stock-1, version))
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q("INSERT INTO sqllock_demo_orders VALUES (?)"), buyer); err != nil {
			return err
		}
		return tx.Commit()
	})
	if errors.Is(err, errSoldOut) {
		return false, nil
	}
	return err == nil, err
}

// execer is *sql.DB or *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// order writes the new stock and records the buyer's order.
func (s *shop) order(ctx context.Context, db execer, buyer, stock int, update string) error {
	if _, err := db.ExecContext(ctx, s.q(update), stock); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, s.q("INSERT INTO sqllock_demo_orders VALUES (?)"), buyer)
	return err
}
