package sqllock_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/testutil"
)

// postgresEnv is the PostgreSQL env alone, for LISTEN/NOTIFY.
func postgresEnv(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	return envs[0].make(t)
}

// waitRoom waits until cond holds for a Table's waiting room (in memory).
func waitRoom(t *testing.T, l *sqllock.Table, name string, what string, cond func(listening bool, waiting int) bool) {
	t.Helper()
	testutil.Eventually(ctxT(t), t, what, func() bool { return cond(sqllock.RoomState(l, name)) })
}

// acquireAsync runs l.Acquire(name) in a goroutine.
func acquireAsync(ctx context.Context, l sqllock.Locker, name string) <-chan *sqllock.Lock {
	got := make(chan *sqllock.Lock, 1)
	go func() {
		k, err := l.Acquire(ctx, name)
		if err != nil {
			k = nil
		}
		got <- k
	}()
	return got
}

// A release wakes, by NOTIFY, the waiter of that name whose ticket is
// the oldest, and nobody else. Polling is slowed to a minute, so a waiter that acquires
// within the test was woken by the notification.
func TestNotifyWakesOnlyWaitersOfThatName(t *testing.T) {
	e := postgresEnv(t)
	ctx := ctxT(t)
	holder := e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}})
	slow := sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute, MaxBackoff: time.Minute}}
	l, err := sqllock.NewTable(e.d, slow)
	if err != nil {
		t.Fatal(err)
	}
	probe := sqllock.ProbeRoom(l)
	a, err := holder.TryAcquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := holder.TryAcquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	// A first waiter, on another name, gets the listener going, so that
	// the waiters of a and b sleep on notifications from the start rather
	// than polling briefly first.
	w, err := holder.TryAcquire(ctx, "warm-up")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	wctx, stopWarm := context.WithCancel(ctx)
	warm := acquireAsync(wctx, l, "warm-up")
	defer func() { stopWarm(); <-warm }()
	waitRoom(t, l, "warm-up", "listener ready", func(up bool, waiting int) bool { return up && waiting == 1 })
	gotA, gotB := acquireAsync(ctx, l, "a"), acquireAsync(ctx, l, "b")
	waitRoom(t, l, "a", "waiter on a", func(_ bool, waiting int) bool { return waiting == 1 })
	waitRoom(t, l, "b", "waiter on b", func(_ bool, waiting int) bool { return waiting == 1 })
	// Each took a ticket before queueing, so the releases notify its
	// process; and none set the hint that announces the name to all.
	var tickets, hinted int
	if err := e.db.QueryRowContext(ctx, e.q("SELECT count(*) FROM {sqllock_tickets} WHERE name IN ('a', 'b')")).Scan(&tickets); err != nil || tickets != 2 {
		t.Fatalf("tickets: %d, %v; want 2", tickets, err)
	}
	if err := e.db.QueryRowContext(ctx, e.q("SELECT count(*) FROM {sqllock_locks} WHERE waiters AND name IN ('a', 'b')")).Scan(&hinted); err != nil || hinted != 0 {
		t.Fatalf("waiters hints: %d, %v; want 0", hinted, err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ka := <-gotA
	if ka == nil {
		t.Fatal("waiter on a failed")
	}
	if n := probe.Notified("a"); n != 1 {
		t.Fatalf("notifications for a: %d, want 1", n)
	}
	if _, waiting := sqllock.RoomState(l, "b"); probe.Notified("b") != 0 || waiting != 1 {
		t.Fatalf("b: %d notifications, %d waiting; want 0 and 1", probe.Notified("b"), waiting)
	}
	select {
	case <-gotB:
		t.Fatal("waiter on b acquired while b is held")
	default:
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if kb := <-gotB; kb == nil {
		t.Fatal("waiter on b failed")
	} else {
		_ = kb.Release(ctx)
	}
	_ = ka.Release(ctx)
}

// notifierless hides the dialect's LISTEN, as if the listening connection
// could never be made.
type notifierless struct{ *postgres.Dialect }

func (d notifierless) Catalogue() dialect.Catalogue {
	cat := d.Dialect.Catalogue()
	cat.Notifier = deaf{cat.Notifier}
	return cat
}

// deaf is a notifier whose subscriptions never listen.
type deaf struct{ dialect.Notifier }

func (deaf) Subscribe(dialect.Subscriber) dialect.Subscription { return never{} }

// never is a subscription on which nothing is ever announced.
type never struct{}

func (never) Listening() bool { return false }
func (never) Unsubscribe()    {}
func (never) Watch(string)    {}
func (never) Unwatch(string)  {}
func (never) Pass(string)     {}

// Without a listener, waiters poll: a release is still seen, if later.
func TestNoListenerDegradesToPolling(t *testing.T) {
	e := postgresEnv(t)
	ctx := ctxT(t)
	holder := e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}})
	l, err := sqllock.NewTable(notifierless{e.d.(*postgres.Dialect)}, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute, MaxBackoff: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	probe := sqllock.ProbeRoom(l)
	k, err := holder.TryAcquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, l, "x")
	waitRoom(t, l, "x", "waiter on x", func(_ bool, waiting int) bool { return waiting == 1 })
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	k2 := <-got
	if k2 == nil {
		t.Fatal("waiter failed")
	}
	if up, _ := sqllock.RoomState(l, "x"); up || probe.Notified("x") != 0 || probe.Connects() != 0 {
		t.Fatalf("listening %v with %d connections and %d notifications, want none", up, probe.Connects(), probe.Notified("x"))
	}
	_ = k2.Release(ctx)
}

// A listening connection killed by the server is replaced: a waiter from
// before the loss gets the lock, and a waiter from after it is woken by a
// notification alone.
func TestListenerReconnects(t *testing.T) {
	e := postgresEnv(t)
	ctx := ctxT(t)
	holder := e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}})
	l, err := sqllock.NewTable(e.d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute, MaxBackoff: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	probe := sqllock.ProbeRoom(l)
	ky, err := holder.TryAcquire(ctx, "y")
	if err != nil {
		t.Fatal(err)
	}
	kz, err := holder.TryAcquire(ctx, "z")
	if err != nil {
		t.Fatal(err)
	}
	gotY := acquireAsync(ctx, l, "y")
	waitRoom(t, l, "y", "listener ready", func(up bool, waiting int) bool { return up && probe.Connects() == 1 && waiting == 1 })
	var killed int
	err = e.db.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE query = 'LISTEN "sqllock:`+e.ns+`"'`).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d listeners: %v", killed, err)
	}
	waitRoom(t, l, "y", "listener back", func(up bool, _ int) bool { return up && probe.Connects() == 2 })
	// The loss and the new listener woke the waiter for y, whose attempts
	// may still run; whatever wakes it, it gets the lock once released.
	if err := ky.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if k := <-gotY; k == nil {
		t.Fatal("the waiter from before the loss failed")
	} else {
		_ = k.Release(ctx)
	}
	// A waiter that joins once the listener is back sleeps until its
	// holder's lease ends, a minute away: only a notification wakes it.
	gotZ := acquireAsync(ctx, l, "z")
	waitRoom(t, l, "z", "waiter for z", func(_ bool, waiting int) bool { return waiting == 1 })
	if err := kz.Release(ctx); err != nil {
		t.Fatal(err)
	}
	k := <-gotZ
	if k == nil {
		t.Fatal("the waiter from after the loss failed")
	}
	if n := probe.Notified("z"); n != 1 {
		t.Fatalf("notifications for z: %d, want 1", n)
	}
	_ = k.Release(ctx)
}

// Lockers on one dialect share one listening connection.
func TestOneListenerPerDialect(t *testing.T) {
	e := postgresEnv(t)
	ctx := ctxT(t)
	holder := e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}})
	k, err := holder.TryAcquire(ctx, "z")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	var lockers []*sqllock.Table
	var got []<-chan *sqllock.Lock
	for range 3 {
		l, err := sqllock.NewTable(e.d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute, MaxBackoff: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		lockers = append(lockers, l)
		got = append(got, acquireAsync(wctx, l, "z"))
	}
	for _, l := range lockers {
		waitRoom(t, l, "z", "listening waiter", func(up bool, waiting int) bool { return up && waiting == 1 })
	}
	var listeners int
	if err := e.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN "sqllock:`+e.ns+`"'`).Scan(&listeners); err != nil || listeners != 1 {
		t.Fatalf("%d listening connections, %v; want 1", listeners, err)
	}
	cancel()
	for _, g := range got {
		<-g
	}
	_ = k.Release(ctx)
}

// A program that makes a dialect and lockers on it, waits with them (which
// starts the dialect's listening connection) and closes the dialect leaves
// no goroutine behind, without any hook: on a database/sql pool and on a
// pgx pool. Not parallel: the goroutine check sees the whole process.
func TestClosedDialectLeavesNoGoroutines(t *testing.T) {
	u := dbtest.PostgresURL(t)
	for _, fromPool := range []bool{false, true} {
		t.Run(fmt.Sprintf("fromPool=%v", fromPool), func(t *testing.T) {
			_, schema := dbtest.Postgres(t) // the shared pool opens before the check
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			ctx := ctxT(t)
			var (
				d    *postgres.Dialect
				done func()
				err  error
			)
			if fromPool {
				pool, perr := pgxpool.New(ctx, u)
				if perr != nil {
					t.Fatal(perr)
				}
				done = pool.Close
				d, err = postgres.NewFromPool(pool, postgres.WithSchema(schema))
			} else {
				db, oerr := sql.Open("pgx", u)
				if oerr != nil {
					t.Fatal(oerr)
				}
				done = func() { db.Close() }
				d, err = postgres.New(db, postgres.WithSchema(schema))
			}
			if err != nil {
				done()
				t.Fatal(err)
			}
			defer done()
			if err := sqllock.Migrate(ctx, d); err != nil {
				t.Fatal(err)
			}
			holder, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			k, err := holder.TryAcquire(ctx, "leak")
			if err != nil {
				t.Fatal(err)
			}
			var got []<-chan *sqllock.Lock
			for range 2 {
				l, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute, MaxBackoff: time.Minute}})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, acquireAsync(ctx, l, "leak"))
				waitRoom(t, l, "leak", "a listening waiter", func(up bool, waiting int) bool { return up && waiting == 1 })
			}
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}
			for range got {
				// Each release wakes the next waiter, by notification.
				select {
				case k = <-got[0]:
				case k = <-got[1]:
				}
				if k == nil {
					t.Fatal("a waiter failed")
				}
				if err := k.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := d.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
