package sqllock_test

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
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/rowlock"
	"github.com/sqllock/sqllock/sqllocktest/shop"
)

// eachPessimistic runs fn on every dialect with row locks.
func eachPessimistic(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Parallel()
	for _, m := range envs {
		if m.kind == "sqlite" {
			continue
		}
		t.Run(m.kind, func(t *testing.T) {
			t.Parallel()
			e := m.make(t)
			e.pess = true
			fn(t, e)
		})
	}
}

// backendID returns the server's id of the connection running tx.
func (e *env) backendID(t *testing.T, tx *sql.Tx) int64 {
	t.Helper()
	q := "SELECT CONNECTION_ID()"
	if e.kind == "postgres" {
		q = "SELECT pg_backend_pid()"
	}
	var id int64
	if err := tx.QueryRowContext(ctxT(t), q).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// killBackend terminates the server connection id.
func (e *env) killBackend(t *testing.T, id int64) {
	t.Helper()
	q, args := fmt.Sprintf("KILL CONNECTION %d", id), []any(nil)
	if e.kind == "postgres" {
		q, args = "SELECT pg_terminate_backend($1)", []any{id}
	}
	if _, err := e.db.ExecContext(ctxT(t), q, args...); err != nil {
		t.Fatal(err)
	}
}

// rowLockWaiters counts the server sessions waiting to lock a row of this
// test's row-lock table.
func (e *env) rowLockWaiters(t *testing.T) int {
	t.Helper()
	q := `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
AND pid <> pg_backend_pid() AND query LIKE '%"` + e.ns + `".sqllock_rowlocks%'`
	if e.kind == "mysql" {
		q = "SELECT count(*) FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND info LIKE '%`" + e.ns + "`.sqllock_rowlocks%'"
	}
	var n int
	if err := e.db.QueryRowContext(ctxT(t), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPessimisticSharedAndExclusive(t *testing.T) {
	eachPessimistic(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.pessimistic(t, sqllock.PessimisticOptions{})
		r1, err := l.TryAcquireShared(ctx, "doc")
		if err != nil {
			t.Fatal(err)
		}
		r2, err := l.TryAcquireShared(ctx, "doc")
		if err != nil {
			t.Fatalf("second reader: %v", err)
		}
		if r1.Token() == r2.Token() {
			t.Fatalf("two readers share token %d", r1.Token())
		}
		if _, err := l.TryAcquire(ctx, "doc"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("writer while readers hold: %v, want ErrLocked", err)
		}
		// A reader may not upgrade in place.
		if _, err := l.TryAcquire(sqllock.WithOwner(ctx, r1.Owner()), "doc"); !errors.Is(err, sqllock.ErrUpgrade) {
			t.Fatalf("upgrade: %v, want ErrUpgrade", err)
		}
		// A writer waits for both readers, then excludes readers.
		got := make(chan *sqllock.Lock, 1)
		go func() {
			w, err := l.Acquire(ctx, "doc")
			if err != nil {
				t.Error(err)
			}
			got <- w
		}()
		testutil.Eventually(ctx, t, "the writer waits in the database", func() bool { return e.rowLockWaiters(t) == 1 })
		for _, r := range []*sqllock.Lock{r1, r2} {
			if err := r.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		w := <-got
		if w == nil {
			return
		}
		if w.Token() <= max(r1.Token(), r2.Token()) {
			t.Fatalf("writer token %d, readers' %d and %d", w.Token(), r1.Token(), r2.Token())
		}
		if _, err := l.TryAcquireShared(ctx, "doc"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("reader while a writer holds: %v, want ErrLocked", err)
		}
		// The writer's owner may take a shared hold: it re-enters.
		inner, err := l.TryAcquireShared(sqllock.WithOwner(ctx, w.Owner()), "doc")
		if err != nil || inner.Token() != w.Token() {
			t.Fatalf("writer re-entering shared: %v (token %d, want %d)", err, inner.Token(), w.Token())
		}
		if err := inner.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Killing the holder's connection frees the lock for a waiter at once — no
// lease to wait for, nor a TCP or server timeout (minutes to hours): within
// half a minute, whatever the machine's load — and the holder learns it
// lost the lock.
func TestPessimisticHolderConnectionKilled(t *testing.T) {
	eachPessimistic(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.pessimistic(t, sqllock.PessimisticOptions{KeepAlive: 20 * time.Millisecond})
		if _, err := e.db.ExecContext(ctx, e.q("CREATE TABLE {notes} (id INT PRIMARY KEY)")); err != nil {
			t.Fatal(err)
		}
		holder, err := l.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := holder.Tx().ExecContext(ctx, e.q("INSERT INTO {notes} VALUES (1)")); err != nil {
			t.Fatal(err)
		}
		pid := e.backendID(t, holder.Tx())
		type result struct {
			k  *sqllock.Lock
			at time.Time
		}
		got := make(chan result, 1)
		go func() {
			k, err := l.Acquire(ctx, "job")
			if err != nil {
				t.Error(err)
			}
			got <- result{k, time.Now()}
		}()
		testutil.Eventually(ctx, t, "the waiter waits in the database", func() bool { return e.rowLockWaiters(t) == 1 })
		killed := time.Now()
		e.killBackend(t, pid)
		r := <-got
		if r.k == nil {
			return
		}
		defer r.k.Release(ctx)
		if took := r.at.Sub(killed); took > 30*time.Second {
			t.Errorf("waiter got the lock %v after the kill, want within 30s", took)
		}
		if r.k.Token() <= holder.Token() {
			t.Fatalf("token after the kill %d, want > %d", r.k.Token(), holder.Token())
		}
		select {
		case <-holder.Done():
		case <-ctx.Done():
			t.Fatal("the holder never learned it lost the lock")
		}
		if cause := context.Cause(holder.Context()); cause != sqllock.ErrLockLost {
			t.Fatalf("holder's cause %v, want ErrLockLost", cause)
		}
		if err := holder.Release(ctx); !errors.Is(err, sqllock.ErrLockLost) {
			t.Fatalf("release after the kill: %v, want ErrLockLost", err)
		}
		var n int
		if err := e.db.QueryRowContext(ctx, e.q("SELECT count(*) FROM {notes}")).Scan(&n); err != nil || n != 0 {
			t.Fatalf("the killed holder's write: %d rows (%v), want rolled back", n, err)
		}
	})
}

// A cancelled or expired Acquire leaves no session waiting on the server.
func TestPessimisticCancelEndsServerWait(t *testing.T) {
	eachPessimistic(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.pessimistic(t, sqllock.PessimisticOptions{})
		holder, err := l.TryAcquire(ctx, "busy")
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Release(ctx)
		// The deadline must fall while the waiter waits in the database. A
		// busy machine may not get it there in time: then the attempt is
		// repeated with a deadline twice as far.
		deadline := 300 * time.Millisecond
		hows := []string{"cancel", "deadline"}
		for i := 0; i < len(hows); i++ {
			how := hows[i]
			wctx, cancel := context.WithCancel(ctx)
			if how == "deadline" {
				wctx, cancel = context.WithTimeout(ctx, deadline)
			}
			errc := make(chan error, 1)
			go func() {
				_, err := l.Acquire(wctx, "busy")
				errc <- err
			}()
			var err error
			returned := false
			testutil.Eventually(ctx, t, how+": the waiter waits in the database", func() bool {
				select {
				case err = <-errc: // Acquire returned before it was seen waiting
					returned = true
					return true
				default:
				}
				return e.rowLockWaiters(t) == 1
			})
			seen := !returned
			if seen {
				if how == "cancel" {
					cancel()
				}
				err = <-errc
			}
			cancel()
			want := context.Canceled
			if how == "deadline" {
				want = context.DeadlineExceeded
			}
			if !errors.Is(err, want) {
				t.Fatalf("%s: Acquire returned %v, want %v", how, err, want)
			}
			// Acquire returns after the server acted on the cancel; allow it
			// the moment it takes to list the session as gone.
			testutil.Eventually(ctx, t, how+": no session waits on the server", func() bool { return e.rowLockWaiters(t) == 0 })
			if !seen {
				if how != "deadline" || deadline >= time.Minute {
					t.Fatalf("%s: Acquire returned %v before it was seen waiting in the database", how, err)
				}
				t.Logf("deadline %v passed before the waiter was seen waiting; again with twice that", deadline)
				deadline *= 2
				i--
			}
		}
		if n := e.rowLockWaiters(t); n != 0 {
			t.Fatalf("%d sessions still wait", n)
		}
	})
}

// Statements in the lock's transaction commit with the release.
func TestPessimisticTxCommitsOnRelease(t *testing.T) {
	eachPessimistic(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.pessimistic(t, sqllock.PessimisticOptions{})
		if _, err := e.db.ExecContext(ctx, e.q("CREATE TABLE {notes} (id INT PRIMARY KEY, token BIGINT NOT NULL)")); err != nil {
			t.Fatal(err)
		}
		k, err := l.Acquire(ctx, "writer")
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Guard(ctx, k.Tx()); err != nil {
			t.Fatalf("guard of the lock's own transaction: %v", err)
		}
		other, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Guard(ctx, other); !errors.Is(err, sqllock.ErrUnsupported) {
			t.Fatalf("guard of another transaction: %v, want ErrUnsupported", err)
		}
		_ = other.Rollback()
		if _, err := k.Tx().ExecContext(ctx, e.q("INSERT INTO {notes} VALUES (1, ?)"), k.Token()); err != nil {
			t.Fatal(err)
		}
		count := func() int {
			var n int
			if err := e.db.QueryRowContext(ctx, e.q("SELECT count(*) FROM {notes}")).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := count(); n != 0 {
			t.Fatalf("write visible before the release: %d rows", n)
		}
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n := count(); n != 1 {
			t.Fatalf("write after the release: %d rows, want 1", n)
		}
		if tx := k.Tx(); tx.Commit() != sql.ErrTxDone {
			t.Fatal("the lock's transaction is still open after the release")
		}
	})
}

// The keep-alive keeps idle_in_transaction_session_timeout from killing a
// healthy holder.
func TestPessimisticKeepAliveBeatsIdleTimeout(t *testing.T) {
	t.Parallel()
	e := envs[0].make(t) // PostgreSQL
	ctx := ctxT(t)
	l := e.pessimistic(t, sqllock.PessimisticOptions{KeepAlive: 20 * time.Millisecond})
	k, err := l.TryAcquire(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	// The timeout is 400 keep-alives long: a loaded machine (CI beside
	// other suites) that delays a ping by several seconds must not look
	// like a dead holder.
	const idleTimeout = 8 * time.Second
	if _, err := k.Tx().ExecContext(ctx, "SET LOCAL idle_in_transaction_session_timeout = '8s'"); err != nil {
		t.Fatal(err)
	}
	// Idle for longer than the timeout: without pings the server would end
	// the session (the holder's own pings would then report the loss, and
	// the statement below fail).
	select {
	case <-k.Done():
		t.Fatalf("lock lost while idle: %v", context.Cause(k.Context()))
	case <-time.After(idleTimeout + idleTimeout/2):
	}
	var one int
	if err := k.Tx().QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the lock's transaction after idling: %v", err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Held locks pin connections: when the pool is exhausted, TryAcquire fails
// at once and Acquire when its context ends, with ErrPoolExhausted.
func TestPessimisticPoolExhausted(t *testing.T) {
	eachPessimistic(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		var l *sqllock.Pessimistic
		var err error
		switch e.kind {
		case "postgres":
			db := dbtest.OpenPostgres(t, dbtest.PostgresURL(t))
			db.SetMaxOpenConns(2)
			d, _ := postgres.New(db, postgres.WithSchema(e.ns))
			l, err = sqllock.NewPessimistic(d, sqllock.PessimisticOptions{})
		default:
			db := dbtest.OpenMySQL(t, dbtest.MySQLDSN(t))
			db.SetMaxOpenConns(2)
			d, _ := mysql.New(db, mysql.WithDatabase(e.ns))
			l, err = sqllock.NewPessimistic(d, sqllock.PessimisticOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"a", "b"} {
			k, err := l.TryAcquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			defer k.Release(ctx)
		}
		if _, err := l.TryAcquire(ctx, "c"); !errors.Is(err, sqllock.ErrPoolExhausted) {
			t.Fatalf("TryAcquire with every connection pinned: %v, want ErrPoolExhausted", err)
		}
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err = l.Acquire(wctx, "c")
		if !errors.Is(err, sqllock.ErrPoolExhausted) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire with every connection pinned: %v, want ErrPoolExhausted and DeadlineExceeded", err)
		}
		t.Log(err)
	})
}

func TestPessimisticUnsupportedOnSQLite(t *testing.T) {
	t.Parallel()
	e := envs[2].make(t)
	if _, err := sqllock.NewPessimistic(e.d, sqllock.PessimisticOptions{}); !errors.Is(err, sqllock.ErrUnsupported) {
		t.Fatalf("NewPessimistic on SQLite: %v, want ErrUnsupported", err)
	}
	err := rowlock.InTx(ctxT(t), e.d, rowlock.TxOptions{}, func(context.Context, *sql.Tx) error { return nil })
	if !errors.Is(err, sqllock.ErrUnsupported) {
		t.Fatalf("InTx on SQLite: %v, want ErrUnsupported", err)
	}
	if _, err := sqllock.NewPessimistic(e.d, sqllock.PessimisticOptions{KeepAlive: -1}); !errors.Is(err, sqllock.ErrUnsupported) {
		t.Fatalf("options are checked after support: %v", err)
	}
}

// The seeds' scenario with the transaction helper: stock 2, 50 buyers of 1
// or 2 items at once, each locking the product row in a transaction.
func TestInTxInventory(t *testing.T) {
	eachPessimistic(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		s := e.shop(t)
		res, err := s.Run(ctx, 2, 50, func(ctx context.Context, buyer int) (int, error) {
			qty := 1 + buyer%2
			return qty, rowlock.InTx(ctx, e.d, rowlock.TxOptions{}, func(ctx context.Context, tx *sql.Tx) error {
				var stock int
				if err := tx.QueryRowContext(ctx, s.Q("SELECT stock FROM {products} WHERE id = 1 FOR UPDATE")).Scan(&stock); err != nil {
					return err
				}
				if stock < qty {
					return shop.ErrSoldOut
				}
				if _, err := tx.ExecContext(ctx, s.Q("UPDATE {products} SET stock = stock - ? WHERE id = 1"), qty); err != nil {
					return err
				}
				return s.Order(ctx, tx, buyer, qty)
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", res)
		if err := res.Check(); err != nil {
			t.Fatal(err)
		}
	})
}

// Two transactions locking two rows in opposite orders deadlock; the
// database rolls one back and InTx runs it again.
func TestInTxRetriesDeadlock(t *testing.T) {
	eachPessimistic(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		for _, q := range []string{
			"CREATE TABLE {accounts} (id INT PRIMARY KEY, balance INT NOT NULL)",
			"INSERT INTO {accounts} VALUES (1, 100), (2, 100)",
		} {
			if _, err := e.db.ExecContext(ctx, e.q(q)); err != nil {
				t.Fatal(err)
			}
		}
		var runs atomic.Int32
		var firstLocks sync.WaitGroup
		firstLocks.Add(2)
		transfer := func(from, to int) error {
			first := true
			return rowlock.InTx(ctx, e.d, rowlock.TxOptions{LockTimeout: 30 * time.Second}, func(ctx context.Context, tx *sql.Tx) error {
				runs.Add(1)
				lock := func(id int) error {
					var b int
					return tx.QueryRowContext(ctx, e.q("SELECT balance FROM {accounts} WHERE id = ? FOR UPDATE"), id).Scan(&b)
				}
				if err := lock(from); err != nil {
					return err
				}
				if first {
					// Both hold their first row before either asks for
					// its second: a certain deadlock.
					first = false
					firstLocks.Done()
					firstLocks.Wait()
				}
				if err := lock(to); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, e.q("UPDATE {accounts} SET balance = balance - 10 WHERE id = ?"), from); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, e.q("UPDATE {accounts} SET balance = balance + 10 WHERE id = ?"), to)
				return err
			})
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Go(func() { errs[0] = transfer(1, 2) })
		wg.Go(func() { errs[1] = transfer(2, 1) })
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		// At least one victim ran again. The rerun can deadlock once more:
		// a row whose locker rolled back is free to whoever asks first, so
		// the rerun may lock it before the survivor, still waking up from
		// its wait, does (seen on a loaded machine, on PostgreSQL 15).
		if n := runs.Load(); n < 3 {
			t.Fatalf("%d runs, want at least 3 (a deadlock victim run again)", n)
		}
		var sum, one int
		if err := e.db.QueryRowContext(ctx, e.q("SELECT sum(balance), min(balance) FROM {accounts}")).Scan(&sum, &one); err != nil {
			t.Fatal(err)
		}
		if sum != 200 || one != 100 {
			t.Fatalf("balances sum %d min %d, want 200 and 100 (both transfers applied once)", sum, one)
		}
	})
}

// A lock wait beyond LockTimeout ends InTx with ErrLocked, unretried; other
// errors are not retried either.
func TestInTxLockTimeoutAndErrors(t *testing.T) {
	eachPessimistic(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		if _, err := e.db.ExecContext(ctx, e.q("CREATE TABLE {items} (id INT PRIMARY KEY)")); err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.ExecContext(ctx, e.q("INSERT INTO {items} VALUES (1)")); err != nil {
			t.Fatal(err)
		}
		holder, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback()
		if _, err := holder.ExecContext(ctx, e.q("SELECT id FROM {items} WHERE id = 1 FOR UPDATE")); err != nil {
			t.Fatal(err)
		}
		var runs int
		err = rowlock.InTx(ctx, e.d, rowlock.TxOptions{LockTimeout: 100 * time.Millisecond}, func(ctx context.Context, tx *sql.Tx) error {
			runs++
			_, err := tx.ExecContext(ctx, e.q("UPDATE {items} SET id = 1 WHERE id = 1"))
			return err
		})
		if !errors.Is(err, sqllock.ErrLocked) || runs != 1 {
			t.Fatalf("lock wait past the timeout: %v after %d runs, want ErrLocked after 1", err, runs)
		}
		boom := errors.New("boom")
		runs = 0
		err = rowlock.InTx(ctx, e.d, rowlock.TxOptions{}, func(ctx context.Context, tx *sql.Tx) error {
			runs++
			return boom
		})
		if err != boom || runs != 1 {
			t.Fatalf("fn's own error: %v after %d runs", err, runs)
		}
		runs = 0
		err = rowlock.InTx(ctx, e.d, rowlock.TxOptions{}, func(ctx context.Context, tx *sql.Tx) error {
			runs++
			_, err := tx.ExecContext(ctx, "SELEC 1")
			return err
		})
		if err == nil || errors.Is(err, sqllock.ErrTransient) || runs != 1 {
			t.Fatalf("a syntax error: %v after %d runs", err, runs)
		}
		// The session setting does not leak into the pool (MySQL sets it
		// per session): a plain transaction waits past 1s.
		if e.kind == "mysql" {
			var timeout int
			for range 5 { // every idle connection of the pool
				if err := e.db.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&timeout); err != nil {
					t.Fatal(err)
				}
				if timeout == 1 {
					t.Fatal("innodb_lock_wait_timeout left at 1s on a pooled connection")
				}
			}
		}
	})
}

// On MySQL the tokens come from rows of sqllock_rowlock_tokens; the reaper
// deletes the spent ones, keeping the newest and any of an open transaction.
func TestPessimisticTokenRowsReaped(t *testing.T) {
	t.Parallel()
	e := envs[1].make(t) // MySQL
	ctx := ctxT(t)
	l := e.pessimistic(t, sqllock.PessimisticOptions{})
	var last int64
	for range 5 {
		k, err := l.TryAcquire(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		if k.Token() <= last {
			t.Fatalf("token %d after %d", k.Token(), last)
		}
		last = k.Token()
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	open, err := l.TryAcquire(ctx, "held") // its token row is uncommitted
	if err != nil {
		t.Fatal(err)
	}
	r, err := sqllock.NewReaper(e.d, sqllock.ReaperOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if err := open.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	var maxID int64
	if err := e.db.QueryRowContext(ctx, e.q("SELECT count(*), max(id) FROM {sqllock_rowlock_tokens}")).Scan(&n, &maxID); err != nil {
		t.Fatal(err)
	}
	if n != 2 || maxID != open.Token() {
		t.Fatalf("%d token rows left (newest %d), want 2: the last spent one and the open one (%d)", n, maxID, open.Token())
	}
	k, err := l.TryAcquire(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx)
	if k.Token() <= open.Token() {
		t.Fatalf("token %d after reaping, want > %d", k.Token(), open.Token())
	}
}

// The keep-alive never pings a lock's connection while the holder reads
// rows from its transaction: pgx closes a connection whose ping finds it
// busy, which would break the holder's rows and lose the lock. The holder
// keeps a large result open across hundreds of keep-alive periods.
func TestPessimisticKeepAliveSparesOpenRows(t *testing.T) {
	t.Parallel()
	e := envs[0].make(t) // PostgreSQL: pgx reports a busy connection
	ctx := ctxT(t)
	l := e.pessimistic(t, sqllock.PessimisticOptions{KeepAlive: time.Millisecond})
	k, err := l.TryAcquire(ctx, "rows")
	if err != nil {
		t.Fatal(err)
	}
	const n = 200000
	rows, err := k.Tx().QueryContext(ctx, "SELECT g FROM generate_series(1, $1::int) g", n)
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for rows.Next() {
		if read++; read == 1 {
			// Not a synchronization: the time the result stays open, 200
			// keep-alive periods, for a ping to break it if one could.
			time.Sleep(200 * time.Millisecond)
		}
	}
	if err := rows.Err(); err != nil || read != n {
		t.Fatalf("read %d of %d rows: %v", read, n, err)
	}
	if err := k.Context().Err(); err != nil {
		t.Fatalf("lock lost while its rows were read: %v", context.Cause(k.Context()))
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
