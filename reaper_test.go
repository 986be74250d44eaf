package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

// The reaper cleans every table it owns: the lock table, the version table
// and the row-lock table, never letting a name's token or version go back.

// rowCount counts the rows of table, or of its rows named by names.
func rowCount(t *testing.T, e *env, table string, names ...string) int {
	t.Helper()
	q := "SELECT count(*) FROM {" + table + "}"
	args := make([]any, len(names))
	if len(names) > 0 {
		q += " WHERE name IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(names)), ", ") + ")"
		for i, n := range names {
			args[i] = n
		}
	}
	var n int
	if err := e.db.QueryRowContext(ctxT(t), e.q(q), args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// rowNames lists the names of table's rows, in order.
func rowNames(t *testing.T, e *env, table string) []string {
	t.Helper()
	rows, err := e.db.QueryContext(ctxT(t), e.q("SELECT name FROM {"+table+"} ORDER BY name"))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// reapAllRows runs reaper passes until one deletes nothing.
func reapAllRows(t *testing.T, d dialect.Dialect) {
	t.Helper()
	r, err := sqllock.NewReaper(d, sqllock.ReaperOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		n, err := r.Reap(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	t.Fatal("the reaper keeps deleting rows")
}

// Released, expired and taken-over leases of both lease tables are reaped,
// and every next grant of the name is above the last one: the floor rule.
func TestReapedNamesKeepGrowing(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.locker(t, sqllock.TableOptions{})
		r, err := sqllock.NewReaper(e.d, sqllock.ReaperOptions{BatchSize: 1}) // several batches a pass
		if err != nil {
			t.Fatal(err)
		}
		var last int64
		grant := func() *sqllock.Lock {
			t.Helper()
			k, err := l.TryAcquire(ctx, "grow")
			if err != nil {
				t.Fatal(err)
			}
			if k.Token() <= last {
				t.Fatalf("token %d after %d", k.Token(), last)
			}
			last = k.Token()
			return k
		}
		for i := range 6 {
			k := grant()
			var abandoned *sqllock.Lock
			switch i % 3 {
			case 0: // released
				if err := k.Release(ctx); err != nil {
					t.Fatal(err)
				}
			case 1: // expired, released only after reaping
				e.expire(t, "grow")
				abandoned = k
			case 2: // expired and taken over, then released
				e.expire(t, "grow")
				if err := grant().Release(ctx); err != nil {
					t.Fatal(err)
				}
				_ = k.Release(ctx) // lost: only clears the handle
			}
			// Other names' rows, which raise the floor in the same passes.
			for _, n := range []string{"other-a", "other-b"} {
				k, err := l.TryAcquire(ctx, n)
				if err != nil {
					t.Fatal(err)
				}
				if err := k.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			n, err := r.Reap(ctx)
			if err != nil || n != 3 {
				t.Fatalf("round %d: reaped %d, %v; want 3 rows", i, n, err)
			}
			if left := rowCount(t, e, e.s.table); left != 0 {
				t.Fatalf("round %d: %d rows of %s left after reaping", i, left, e.s.table)
			}
			if abandoned != nil {
				if err := abandoned.Release(ctx); err == nil {
					t.Fatal("released a lease whose row was reaped")
				}
			}
		}
	})
}

// Live leases stay, expired and released ones go; a transaction guarded by
// a live lease, which keeps its row share-locked until it ends, does not
// make the reaper wait (MySQL: deleting most rows of a small table by a
// list of names would scan the table and wait for that row).
func TestReaperSparesLiveRowsOfBothLeaseTables(t *testing.T) {
	eachLocker(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.locker(t, sqllock.TableOptions{})
		live, err := l.TryAcquire(ctx, "live")
		if err != nil {
			t.Fatal(err)
		}
		defer live.Release(ctx)
		guarded, err := l.TryAcquire(ctx, "guarded")
		if err != nil {
			t.Fatal(err)
		}
		defer guarded.Release(ctx)
		if _, err := e.s.grant(ctx, e.d, dialect.AcquireParams{Name: "expired", Owner: "gone", TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		e.expire(t, "expired")
		for i := range 4 {
			k, err := l.TryAcquire(ctx, "released-"+strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// SQLite has one writer at a time: an open read-write transaction
		// holds off every other writer, the reaper included.
		var tx *sql.Tx
		if e.kind != "sqlite" {
			if tx, err = e.db.BeginTx(ctx, nil); err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if err := guarded.Guard(ctx, tx); err != nil {
				t.Fatal(err)
			}
		}
		r, err := sqllock.NewReaper(e.d, sqllock.ReaperOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		n, err := r.Reap(rctx)
		if err != nil || n != 5 {
			t.Fatalf("reaped %d, %v; want 5 rows (expired, 4 released)", n, err)
		}
		if tx != nil {
			if err := tx.Commit(); err != nil {
				t.Fatalf("guarded transaction after reaping: %v", err)
			}
		}
		if got := rowNames(t, e, e.s.table); !slices.Equal(got, []string{"guarded", "live"}) {
			t.Fatalf("rows after reaping: %q, want guarded and live", got)
		}
		for _, k := range []*sqllock.Lock{live, guarded} {
			if err := guardOnce(t, e, k); err != nil {
				t.Fatalf("%s after reaping: %v", k.Name(), err)
			}
		}
	})
}

// One Reap call deletes at most Limit rows of each table.
func TestReapLimitPerTable(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		lockers := []sqllock.Locker{}
		for _, s := range leaseStrategies {
			l, err := s.new(e.d, sqllock.TableOptions{})
			if err != nil {
				t.Fatal(err)
			}
			lockers = append(lockers, l)
		}
		if e.kind != "sqlite" {
			lockers = append(lockers, e.pessimistic(t, sqllock.PessimisticOptions{}))
		}
		for _, l := range lockers {
			for i := range 3 {
				k, err := l.TryAcquire(ctx, "n"+strconv.Itoa(i))
				if err != nil {
					t.Fatal(err)
				}
				if err := k.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		want := []int{2 * len(lockers), len(lockers), 0}
		if e.kind == "mysql" {
			want[0] += 2 // the spent token rows of the pessimistic strategy, but the newest
		}
		for i, w := range want {
			n, err := e.d.Reap(ctx, dialect.ReapParams{Limit: 2})
			if err != nil || n != w {
				t.Fatalf("call %d: reaped %d, %v; want %d", i, n, err, w)
			}
		}
	})
}

// Rows of the row-lock table that nobody holds or waits for are reaped;
// held rows (exclusive and shared) and rows a waiter is queued on stay.
func TestReapRowLocks(t *testing.T) {
	eachPessimistic(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.pessimistic(t, sqllock.PessimisticOptions{})
		other := e.pessimistic(t, sqllock.PessimisticOptions{}) // another process
		var last int64
		check := func(k *sqllock.Lock) {
			t.Helper()
			if k.Token() <= last {
				t.Fatalf("token %d after %d", k.Token(), last)
			}
			last = k.Token()
		}
		idle := []string{"idle-a", "idle-b", "idle-c"}
		for _, n := range idle {
			k, err := l.TryAcquire(ctx, n)
			if err != nil {
				t.Fatal(err)
			}
			check(k)
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		held, err := l.TryAcquire(ctx, "held")
		if err != nil {
			t.Fatal(err)
		}
		check(held)
		shared, err := l.TryAcquireShared(ctx, "shared")
		if err != nil {
			t.Fatal(err)
		}
		defer shared.Release(ctx)
		waited := make(chan *sqllock.Lock, 1)
		go func() {
			k, err := other.Acquire(ctx, "held")
			if err != nil {
				t.Error(err)
			}
			waited <- k
		}()
		reapAllRows(t, e.d)
		if got := rowNames(t, e, "sqllock_rowlocks"); !slices.Equal(got, []string{"held", "shared"}) {
			t.Fatalf("rows after reaping: %q, want held and shared", got)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		k := <-waited
		if k == nil {
			t.FailNow()
		}
		check(k)
		reapAllRows(t, e.d)
		if got := rowNames(t, e, "sqllock_rowlocks"); !slices.Equal(got, []string{"held", "shared"}) {
			t.Fatalf("rows after reaping beside the new holder: %q, want held and shared", got)
		}
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
		reapAllRows(t, e.d)
		if got := rowNames(t, e, "sqllock_rowlocks"); !slices.Equal(got, []string{"shared"}) {
			t.Fatalf("rows after the last release: %q, want shared", got)
		}
		for _, n := range append(idle, "held") {
			k, err := l.TryAcquire(ctx, n)
			if err != nil {
				t.Fatalf("%s after its row was reaped: %v", n, err)
			}
			check(k)
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A row deleted between its creation and its lock is created again, a
// bounded number of times. PostgreSQL only: a trigger deletes the row right
// after each insert, for as many inserts as a counter allows.
func TestPessimisticRowDeletedBeforeLock(t *testing.T) {
	t.Parallel()
	e := envs[0].make(t)
	if e.kind != "postgres" {
		t.Fatalf("envs[0] is %s", e.kind)
	}
	ctx := ctxT(t)
	rowlocks, left := e.table("sqllock_rowlocks"), e.table("vanish_left")
	for _, q := range []string{
		"CREATE TABLE " + left + " (n integer NOT NULL)",
		"INSERT INTO " + left + " VALUES (0)",
		fmt.Sprintf(`CREATE FUNCTION %[1]s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE %[2]s SET n = n - 1 WHERE n > 0;
  IF FOUND THEN
    DELETE FROM %[3]s WHERE name = NEW.name;
  END IF;
  RETURN NULL;
END $$`, e.table("vanish"), left, rowlocks),
		fmt.Sprintf(`CREATE TRIGGER vanish AFTER INSERT ON %s FOR EACH ROW EXECUTE FUNCTION %s()`, rowlocks, e.table("vanish")),
	} {
		if _, err := e.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	vanish := func(n int) {
		t.Helper()
		if _, err := e.db.ExecContext(ctx, "UPDATE "+left+" SET n = $1", n); err != nil {
			t.Fatal(err)
		}
	}
	l := e.pessimistic(t, sqllock.PessimisticOptions{})
	vanish(3)
	for _, acquire := range []func(context.Context, string) (*sqllock.Lock, error){l.TryAcquire, l.Acquire} {
		k, err := acquire(ctx, "flaky")
		if err != nil {
			t.Fatalf("acquire after 3 vanished rows: %v", err)
		}
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.ExecContext(ctx, "DELETE FROM "+rowlocks); err != nil {
			t.Fatal(err)
		}
		vanish(3)
	}
	vanish(100)
	if _, err := l.TryAcquire(ctx, "flaky"); !errors.Is(err, sqllock.ErrTransient) {
		t.Fatalf("acquire while the row keeps vanishing: %v, want ErrTransient", err)
	}
}

// Many reapers beside acquirers that hand names around: every strategy on
// every database keeps each name's tokens growing, and nothing is left
// once all is released. The acquirers go on for at least 1.5s and until
// each name has been handed around several times (bounded by a minute): a
// loaded machine runs longer, not fewer grants; the reapers run until the
// acquirers are done.
func TestReapersBesideAcquirers(t *testing.T) {
	eachStrategy(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		names := []string{"busy-0", "busy-1", "busy-2"}
		var (
			mu     sync.Mutex
			last   = map[string]int64{}
			grants int
			wg     sync.WaitGroup
		)
		wantGrants := 4 * len(names)
		minEnd, limit := time.Now().Add(1500*time.Millisecond), time.Now().Add(time.Minute)
		more := func() bool {
			mu.Lock()
			g := grants
			mu.Unlock()
			now := time.Now()
			return now.Before(limit) && (now.Before(minEnd) || g < wantGrants)
		}
		var reapers sync.WaitGroup
		acquirersDone := make(chan struct{})
		for w := range 4 {
			l := e.anyLocker(t) // a process of its own
			wg.Go(func() {
				for i := 0; more(); i++ {
					name := names[(w+i)%len(names)]
					k, err := l.Acquire(ctx, name)
					if errors.Is(err, sqllock.ErrTransient) && e.pess {
						// The reapers deleted the name's row between
						// its creation and its lock, again and again
						// (a loaded host): repeating is safe.
						continue
					}
					if err != nil {
						t.Errorf("acquire %s: %v", name, err)
						return
					}
					// While the lock is held, the previous holder's
					// section is over and the next one waits.
					mu.Lock()
					if k.Token() <= last[name] {
						t.Errorf("%s: token %d after %d", name, k.Token(), last[name])
					}
					last[name] = k.Token()
					grants++
					mu.Unlock()
					if err := k.Release(ctx); err != nil {
						t.Errorf("release %s: %v", name, err)
						return
					}
				}
			})
		}
		for range 3 {
			r, err := sqllock.NewReaper(e.d, sqllock.ReaperOptions{BatchSize: 1})
			if err != nil {
				t.Fatal(err)
			}
			reapers.Go(func() {
				for {
					select {
					case <-acquirersDone:
						return
					default:
					}
					if _, err := r.Reap(ctx); err != nil {
						t.Errorf("reap: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(acquirersDone)
		reapers.Wait()
		if t.Failed() {
			return
		}
		if grants < wantGrants {
			t.Fatalf("only %d grants within a minute, want %d", grants, wantGrants)
		}
		reapAllRows(t, e.d)
		table := e.s.table
		if e.pess {
			table = "sqllock_rowlocks"
		}
		if n := rowCount(t, e, table); n != 0 {
			t.Fatalf("%d rows of %s left", n, table)
		}
	})
}

// migrateTo moves e's schema to version with golang-migrate, up or down.
func migrateTo(t *testing.T, e *env, version uint) {
	t.Helper()
	ctx := ctxT(t)
	src, err := iofs.New(e.d.Migrations(), ".")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := e.d.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	drv, err := e.d.MigrationDriver(ctx, conn) // closes conn when closed
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", src, e.d.Name(), drv)
	if err != nil {
		drv.Close()
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Migrate(version); err != nil {
		t.Fatalf("migrate to %d: %v", version, err)
	}
}

// reapVersionsMigration is the migration that makes version rows reapable.
const reapVersionsMigration = 6

// previousMigration is the highest version of d's migrations below v.
func previousMigration(t *testing.T, d dialect.Dialect, v uint) uint {
	t.Helper()
	files, err := fs.Glob(d.Migrations(), "*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	var prev uint
	for _, f := range files {
		n, err := strconv.ParseUint(f[:strings.IndexByte(f, '_')], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if uint(n) < v {
			prev = max(prev, uint(n))
		}
	}
	return prev
}

// The migration that makes version rows reapable applies to a schema that
// already has version rows, and versions keep growing across it: a
// released row, reaped afterwards, comes back above its old version; a live
// row stays live.
func TestReapVersionsMigrationKeepsVersionsGrowing(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		migrateTo(t, e, previousMigration(t, e.d, reapVersionsMigration))
		// Rows as the previous version of the schema had them.
		now, released := "now()", "'-infinity'"
		switch e.kind {
		case "mysql":
			now, released = "UTC_TIMESTAMP(6)", "'1000-01-01'"
		case "sqlite":
			now, released = "CAST(unixepoch('subsec') * 1000000 AS INTEGER)", "0"
		}
		live := map[string]string{
			"postgres": now + " + interval '1 hour'",
			"mysql":    now + " + INTERVAL 1 HOUR",
			"sqlite":   now + " + 3600000000",
		}[e.kind]
		for _, r := range []struct {
			name           string
			version, holds int
			expires        string
		}{{"old", 1000, 0, released}, {"busy", 2000, 1, live}, {"young", 3, 0, released}} {
			q := fmt.Sprintf("INSERT INTO {sqllock_versions} (name, owner, version, holds, acquired_at, expires_at) VALUES (?, 'before', ?, ?, %s, %s)",
				now, r.expires)
			if _, err := e.db.ExecContext(ctx, e.q(q), r.name, r.version, r.holds); err != nil {
				t.Fatal(err)
			}
		}
		if err := sqllock.Migrate(ctx, e.d); err != nil {
			t.Fatalf("migrate over existing rows: %v", err)
		}
		reapAllRows(t, e.d)
		if got := rowNames(t, e, "sqllock_versions"); !slices.Equal(got, []string{"busy"}) {
			t.Fatalf("rows after reaping: %q, want busy", got)
		}
		l, err := sqllock.NewOptimistic(e.d, sqllock.OptimisticOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"old", "young", "new"} {
			k, err := l.TryAcquire(ctx, n)
			if err != nil {
				t.Fatal(err)
			}
			// The floor starts at the largest version in use.
			if k.Token() <= 2000 {
				t.Fatalf("%s: version %d after migrating over versions up to 2000", n, k.Token())
			}
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.TryAcquire(ctx, "busy"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("a lease held across the migration: %v, want ErrLocked", err)
		}
	})
}

// A pass goes on past a batch cut short by a row the reaper had to skip:
// one expired name busy in another transaction does not leave the other
// expired rows, more than a batch of them, to later passes. On PostgreSQL
// the name's fence is held, as an acquire taking the row over holds it
// (the batch counts the row, then cannot delete it: the pass used to end
// there); on MySQL its row is locked, which SKIP LOCKED leaves out of the
// batch. The busy row is the oldest, so that every batch meets it.
func TestReapPassGoesOnPastSkippedRow(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.kind == "sqlite" {
			t.Skip("SQLite has one writer: a transaction holding a row holds off the reaper, which skips nothing")
		}
		ctx := ctxT(t)
		const batch, rows = 10, 3*10 + 5
		for i := range rows {
			if _, err := e.s.grant(ctx, e.d, dialect.AcquireParams{Name: fmt.Sprintf("old-%02d", i), Owner: "gone", TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		ago := func(s string) string {
			if e.kind == "mysql" {
				return "UTC_TIMESTAMP(6) - INTERVAL " + s
			}
			return "now() - INTERVAL '" + s + "'"
		}
		if _, err := e.db.ExecContext(ctx, e.q("UPDATE {sqllock_locks} SET expires_at = "+ago("1 MINUTE"))); err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.ExecContext(ctx, e.q("UPDATE {sqllock_locks} SET expires_at = "+ago("1 HOUR")+" WHERE name = ?"), "old-00"); err != nil {
			t.Fatal(err)
		}
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		hold := e.q("SELECT name FROM {sqllock_locks} WHERE name = ? FOR UPDATE")
		if e.kind == "postgres" {
			// The fence of the name (fence in dialect/postgres: class
			// 0x73716c6b, hashtext of the name), in the mode an acquire
			// takes it.
			hold = "SELECT pg_advisory_xact_lock_shared(1936813163, hashtext($1))::text"
		}
		var got string
		if err := tx.QueryRowContext(ctx, hold, "old-00").Scan(&got); err != nil {
			t.Fatal(err)
		}
		r, err := sqllock.NewReaper(e.d, sqllock.ReaperOptions{BatchSize: batch})
		if err != nil {
			t.Fatal(err)
		}
		n, err := r.Reap(ctx)
		if err != nil || n != rows-1 {
			t.Fatalf("one pass reaped %d, %v; want the %d expired rows but the busy one", n, err, rows-1)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if n, err := r.Reap(ctx); err != nil || n != 1 {
			t.Fatalf("the next pass reaped %d, %v; want the row no longer busy", n, err)
		}
	})
}
