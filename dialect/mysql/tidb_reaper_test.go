package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// Eight processes (a pool and a locker each) take one name 25 times each
// and increment a counter row in a guarded transaction while a reaper
// deletes released rows beside them: one holder at a time, tokens growing
// in grant order, no increment lost — on TiDB, for every strategy with
// leases, and on MySQL/MariaDB for comparison.
func TestTiDBExclusionBesideReaper(t *testing.T) {
	t.Parallel()
	for _, server := range []string{"tidb", "mysql"} {
		for _, strategy := range []string{"optimistic", "table"} {
			t.Run(server+"/"+strategy, func(t *testing.T) {
				t.Parallel()
				var (
					db       *sql.DB
					database string
					dsn      string
				)
				if server == "tidb" {
					db, database = dbtest.TiDB(t)
					dsn = dbtest.TiDBDSN(t)
				} else {
					db, database = dbtest.MySQL(t)
					dsn = dbtest.MySQLDSN(t)
				}
				exclusionBesideReaper(t, db, database, dsn, strategy)
			})
		}
	}
}

func exclusionBesideReaper(t *testing.T, db *sql.DB, database, dsn, strategy string) {
	const workers, rounds = 8, 25
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	d, err := newTiDB(db, database)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	counter := "`" + database + "`.counter"
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+counter+" (id INT PRIMARY KEY, n INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO "+counter+" VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	reaper, err := sqllock.NewReaper(d, sqllock.ReaperOptions{Interval: 20 * time.Millisecond, BatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopReaper := context.WithCancel(ctx)
	var reaping sync.WaitGroup
	reaping.Go(func() { _ = reaper.Run(rctx) })
	defer reaping.Wait()
	defer stopReaper()

	var (
		holders atomic.Int32
		mu      sync.Mutex
		last    int64
		errs    []error
		wg      sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for w := range workers {
		pool := dbtest.OpenMySQL(t, dsn)
		pd, err := newTiDB(pool, database)
		if err != nil {
			t.Fatal(err)
		}
		var l sqllock.Locker
		ttl, backoff := 10*time.Second, 100*time.Millisecond
		if strategy == "optimistic" {
			l, err = sqllock.NewOptimistic(pd, sqllock.OptimisticOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl, MaxBackoff: backoff}})
		} else {
			l, err = sqllock.NewTable(pd, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl, MaxBackoff: backoff}})
		}
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for range rounds {
				if err := exclusiveRound(ctx, l, pool, counter, &holders, &mu, &last); err != nil {
					fail(fmt.Errorf("worker %d: %w", w, err))
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT n FROM "+counter+" WHERE id = 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != workers*rounds {
		t.Errorf("counter %d after %d grants: increments lost", n, workers*rounds)
	}
}

// exclusiveRound takes the lock, checks that it is the only holder and that
// its token exceeds the previous grant's, increments the counter by a
// read-modify-write in a guarded transaction, and releases.
func exclusiveRound(ctx context.Context, l sqllock.Locker, db *sql.DB, counter string, holders *atomic.Int32, mu *sync.Mutex, last *int64) error {
	k, err := l.Acquire(ctx, "one")
	if err != nil {
		return err
	}
	defer k.Release(context.WithoutCancel(ctx))
	if h := holders.Add(1); h != 1 {
		holders.Add(-1)
		return fmt.Errorf("%d holders at once (token %d)", h, k.Token())
	}
	defer holders.Add(-1)
	mu.Lock()
	prev := *last
	*last = k.Token()
	mu.Unlock()
	if k.Token() <= prev {
		return fmt.Errorf("token %d granted after token %d", k.Token(), prev)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := k.Guard(ctx, tx); err != nil {
		return fmt.Errorf("guard of token %d: %w", k.Token(), err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT n FROM "+counter+" WHERE id = 1 FOR UPDATE").Scan(&n); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+counter+" SET n = ? WHERE id = 1", n+1); err != nil {
		return err
	}
	return tx.Commit()
}

// Twenty-four processes migrating one database at once all succeed: the
// others wait for the migration lock, and a wait that TiDB ends with an
// error ("lock wait timeout", "pessimistic lock retry limit reached") is
// repeated. Enough of them that some wait longer than GET_LOCK's timeout.
func TestTiDBConcurrentMigrate(t *testing.T) {
	t.Parallel()
	_, database := dbtest.TiDB(t)
	dsn := dbtest.TiDBDSN(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const n = 24
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		d, err := newTiDB(dbtest.OpenMySQL(t, dsn), database)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs[i] = sqllock.Migrate(ctx, d) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migration %d: %v", i, err)
		}
	}
}

// Right after a MigrateDown, eight processes migrating one database at
// once with the MySQL dialect are all refused before anything runs (its
// migrations are MySQL's), and the schema stays clean; eight with the TiDB
// dialect then all succeed, one step at a time, and leave it clean at the
// newest version.
func TestTiDBConcurrentMigrateAfterDown(t *testing.T) {
	t.Parallel()
	_, database := dbtest.TiDB(t)
	dsn := dbtest.TiDBDSN(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	first, err := newTiDB(dbtest.OpenMySQL(t, dsn), database)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqllock.Migrate(ctx, first); err != nil {
		t.Fatalf("first migration: %v", err)
	}
	newest, _, err := sqllock.MigrationVersion(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqllock.MigrateDown(ctx, first); err != nil {
		t.Fatalf("down: %v", err)
	}
	migrateAtOnce := func(open func(*sql.DB, string) (dialect.Dialect, error)) []error {
		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			d, err := open(dbtest.OpenMySQL(t, dsn), database)
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() { errs[i] = sqllock.Migrate(ctx, d) })
		}
		wg.Wait()
		return errs
	}
	checkVersion := func(when string, want uint) {
		t.Helper()
		if v, dirty, err := sqllock.MigrationVersion(ctx, first); err != nil || v != want || dirty {
			t.Fatalf("%s: version %d, dirty %v, %v; want %d, clean", when, v, dirty, err, want)
		}
	}

	for i, err := range migrateAtOnce(func(db *sql.DB, database string) (dialect.Dialect, error) {
		return mysql.New(db, mysql.WithDatabase(database))
	}) {
		if !errors.Is(err, dialect.ErrUnsupported) {
			t.Errorf("MySQL dialect's migration %d on TiDB: %v, want dialect.ErrUnsupported", i, err)
		}
	}
	checkVersion("after the MySQL dialect's migrations", 0)

	for i, err := range migrateAtOnce(newTiDB) {
		if err != nil {
			t.Errorf("migration %d: %v", i, err)
		}
	}
	checkVersion("after the TiDB dialect's migrations", newest)
}
