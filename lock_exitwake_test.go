package sqllock_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/faultproxy"
	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/observe"
)

// exitKinds are the primitives whose hand-off to another process
// TestReleaseThenExit checks.
var exitKinds = []string{"lock", "fair", "optimistic", "semaphore", "fairsem", "rwlock", "election"}

// exitTTL is the lease of both sides of TestReleaseThenExit: the waiter
// must get the lock long before a lease this long could end.
const exitTTL = time.Minute

// exitLocker is an acquire and a release of kind (see exitKinds) on d:
// what the holder of TestReleaseThenExit does, and its waiter.
type exitLocker struct {
	acquire func(ctx context.Context, try bool) (release func(context.Context) error, err error)
	probe   *sqllock.RoomProbe // the waiting room's, with obs
}

// newExitLocker returns a locker of kind on d for name, with the lease
// exitTTL and maxBackoff (0: the default), reporting to obs (nil: none).
func newExitLocker(d dialect.Dialect, kind, name string, maxBackoff time.Duration, obs observe.Observer) (exitLocker, error) {
	lockOf := func(l sqllock.Locker) exitLocker {
		var p *sqllock.RoomProbe
		if obs != nil {
			p = sqllock.ProbeRoom(l)
		}
		return exitLocker{probe: p, acquire: func(ctx context.Context, try bool) (func(context.Context) error, error) {
			acquire := l.Acquire
			if try {
				acquire = l.TryAcquire
			}
			k, err := acquire(ctx, name)
			if err != nil {
				return nil, err
			}
			return k.Release, nil
		}}
	}
	var (
		l   sqllock.Locker
		err error
	)
	switch kind {
	case "lock", "fair":
		l, err = sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: exitTTL, MaxBackoff: maxBackoff, Observer: obs}, Fair: kind == "fair"})
	case "optimistic":
		l, err = sqllock.NewOptimistic(d, sqllock.OptimisticOptions{LeaseOptions: sqllock.LeaseOptions{TTL: exitTTL, MaxBackoff: maxBackoff, Observer: obs}})
	case "semaphore", "fairsem":
		l, err = sqllock.NewSemaphore(d, 1, sqllock.SemaphoreOptions{LeaseOptions: sqllock.LeaseOptions{TTL: exitTTL, MaxBackoff: maxBackoff, Observer: obs}, Fair: kind == "fairsem"})
	case "rwlock":
		l, err = sqllock.NewRWLock(d, sqllock.LeaseOptions{TTL: exitTTL, MaxBackoff: maxBackoff, Observer: obs})
	case "election":
		e, err := sqllock.NewElection(d, sqllock.LeaseOptions{TTL: exitTTL, MaxBackoff: maxBackoff, Observer: obs})
		if err != nil {
			return exitLocker{}, err
		}
		var p *sqllock.RoomProbe
		if obs != nil {
			p = sqllock.ProbeElection(e)
		}
		return exitLocker{probe: p, acquire: func(ctx context.Context, try bool) (func(context.Context) error, error) {
			ld, err := e.Campaign(ctx, name, "v")
			if err != nil {
				return nil, err
			}
			return ld.Resign, nil
		}}, nil
	default:
		return exitLocker{}, fmt.Errorf("unknown kind %q", kind)
	}
	if err != nil {
		return exitLocker{}, err
	}
	return lockOf(l), nil
}

// exitHolder is a child process of TestReleaseThenExit: it takes the lock,
// prints "held", waits for a line on its standard input, releases, prints
// "released" and ends at once — without closing its dialect or its pool,
// as a job that ends after its work does. It ends by SIGKILL: the fastest
// exit, which os.Exit is not under the race detector (its exit lets
// goroutines run on for a while). Whatever a release leaves to be done
// in the background dies with it.
func exitHolder(c childConfig) error {
	ctx := context.Background()
	var (
		d   dialect.Dialect
		err error
	)
	switch c.DB {
	case "postgres":
		var db *sql.DB
		if db, err = sql.Open("pgx", c.DSN); err == nil {
			d, err = postgres.New(db, postgres.WithSchema(c.NS))
		}
	case "mysql":
		var db *sql.DB
		if db, err = sql.Open("mysql", c.DSN); err == nil {
			d, err = mysql.New(db, mysql.WithDatabase(c.NS))
		}
	case "sqlite":
		var db *sql.DB
		if db, err = sqlite.Open(c.File); err == nil {
			d, err = sqlite.New(db)
		}
	default:
		err = fmt.Errorf("unknown database %q", c.DB)
	}
	if err != nil {
		return err
	}
	l, err := newExitLocker(d, c.Strategy, "x", 0, nil)
	if err != nil {
		return err
	}
	release, err := l.acquire(ctx, true)
	if err != nil {
		return err
	}
	fmt.Println("held")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	if err := release(ctx); err != nil {
		return err
	}
	os.Stdout.WriteString("released\n")
	syscall.Kill(os.Getpid(), syscall.SIGKILL) // no Close
	select {}
}

// waitObserver reports when name has a waiter that the dialect's wake-ups
// reach (the waiting room is subscribed and listening), and records how
// the lock was handed over.
type waitObserver struct {
	mu        sync.Mutex
	waiting   int
	listening bool
	ready     chan struct{} // closed once both
	by        string        // the hand-off's source
}

func (o *waitObserver) Waiting(_ context.Context, e observe.WaitingEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waiting += e.Delta
	o.check()
}

func (o *waitObserver) Listening(_ context.Context, e observe.ListenerEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.listening = e.Up
	o.check()
}

func (o *waitObserver) Handoff(_ context.Context, e observe.HandoffEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.by = e.Source
}

// check closes ready once a waiter waits and listens. o.mu is held.
func (o *waitObserver) check() {
	if o.waiting > 0 && o.listening {
		select {
		case <-o.ready:
		default:
			close(o.ready)
		}
	}
}

// A process that releases a lock and exits at once, without closing its
// dialect (a migration job after its run), hands the lock over to a waiter
// of another process as if it had lived on: whatever wakes the waiter is
// done before Release returns. The leases last a minute; the waiter's
// backoff lasts ten (so only a wake-up can bring it back early), or is the
// default (the waiter comes back within MaxBackoff whatever it expects to
// hear). Either way the waiter must hold the lock long before the
// released lease would have ended: it gives up at a quarter of the TTL.
func TestReleaseThenExit(t *testing.T) {
	t.Parallel()
	backoffs := []struct {
		name string
		d    time.Duration
	}{{"wake-up", 10 * time.Minute}, {"default-backoff", 0}}
	for _, m := range envs {
		for _, kind := range exitKinds {
			for _, b := range backoffs {
				t.Run(m.kind+"/"+kind+"/"+b.name, func(t *testing.T) {
					t.Parallel()
					e := m.make(t)
					releaseThenExit(t, e, kind, b.d)
				})
			}
		}
	}
}

func releaseThenExit(t *testing.T, e *env, kind string, maxBackoff time.Duration) {
	ctx := ctxT(t)
	c := childConfig{Role: "release-exit", DB: e.kind, Strategy: kind, NS: e.ns, File: e.ns}
	switch e.kind {
	case "postgres":
		u, err := url.Parse(dbtest.PostgresURL(t))
		if err != nil {
			t.Fatal(err)
		}
		u.Host = remote(t, u.Host)
		c.DSN = u.String()
	case "mysql":
		cfg, err := gomysql.ParseDSN(dbtest.MySQLDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Addr = remote(t, cfg.Addr)
		c.DSN = cfg.FormatDSN()
	}
	announced := announces(e.d, kind)
	if !announced && maxBackoff > exitTTL {
		t.Skipf("%s does not announce the releases of %s: its waiters poll", e.kind, kind)
	}
	obs := &waitObserver{ready: make(chan struct{}), listening: !announced}
	l, err := newExitLocker(e.d, kind, "x", maxBackoff, obs)
	if errors.Is(err, sqllock.ErrUnsupported) {
		t.Skipf("%s on %s: %v", kind, e.kind, err)
	}
	if err != nil {
		t.Fatal(err)
	}

	cmd, stderr := startChild(t, c)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	wait := func() {
		if exited {
			return
		}
		exited = true
		in.Close()
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
			err = nil // it killed itself after its release
		}
		if err != nil {
			t.Errorf("holder: %v; %s", err, stderr)
		}
	}
	defer wait()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "held" {
		wait()
		t.Fatalf("holder: %q, %v; want held", lines.Text(), lines.Err())
	}

	wctx, cancel := context.WithTimeout(ctx, exitTTL/4)
	defer cancel()
	got := make(chan error, 1)
	var acquiredAt time.Time
	go func() {
		release, err := l.acquire(wctx, false)
		acquiredAt = time.Now()
		if err == nil {
			err = release(context.WithoutCancel(ctx))
		}
		got <- err
	}()
	select {
	case <-obs.ready:
	case err := <-got:
		t.Fatalf("the waiter returned before it waited: %v", err)
	case <-ctx.Done():
		t.Fatal("the waiter never waited with wake-ups")
	}
	if e.kind == "mysql" {
		marked(ctx, t, e)
		// The bell announced the name once registered: the waiter tried
		// again, and sleeps now.
		testutil.Eventually(ctx, t, "the waiter refused after its last wake-up", func() bool { return l.probe.Settled("x") })
	}
	told := time.Now()
	if _, err := io.WriteString(in, "release\n"); err != nil {
		t.Fatal(err)
	}
	if !lines.Scan() || lines.Text() != "released" {
		t.Fatalf("holder: %q, %v; want released", lines.Text(), lines.Err())
	}
	wait() // the holder has exited
	if err := <-got; err != nil {
		t.Fatalf("waiter (the holder released and exited): %v", err)
	}
	obs.mu.Lock()
	by := obs.by
	obs.mu.Unlock()
	t.Logf("hand-off %v after the holder was told to release (by %q)", acquiredAt.Sub(told).Round(time.Millisecond), by)
}

// announces reports whether d announces the releases of kind (see
// exitKinds) to waiters: else they poll.
func announces(d dialect.Dialect, kind string) bool {
	cat := d.Catalogue()
	switch kind {
	case "optimistic":
		return cat.Notifier != nil && cat.AnnouncesVersions
	case "semaphore", "fairsem":
		return cat.Notifier != nil && cat.Semaphores.Announces
	case "rwlock":
		return cat.Notifier != nil && cat.RWLocks.Announces
	}
	return cat.Notifier != nil
}

// remote returns the address of a proxy to the server at addr that
// delays every exchange by 20 ms each way, as a server across a network
// does: a holder there that ends as soon as its release returned leaves
// undone what it left to the background.
func remote(t *testing.T, addr string) string {
	t.Helper()
	p, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.SetLatency(20*time.Millisecond, 0)
	return p.Addr()
}

// marked waits until the row of "x" that the holder's release frees is
// marked as waited for (by a registration of the waiter's bell, or its
// ticket), and the bells of the waiter's process are asleep in their
// wait: a release before the mark reports no waiters and rings no bell
// (the waiter learns of it from its own bell, which reads the name once
// it registered it), and a bell between statements reads a ring's count
// in its next one, unwoken.
func marked(ctx context.Context, t *testing.T, e *env) {
	t.Helper()
	q := `SELECT (SELECT COUNT(*) FROM {sqllock_locks} WHERE name = 'x' AND (waiters OR ticketed))
  + (SELECT COUNT(*) FROM {sqllock_versions} WHERE name = 'x' AND waiters)
  + (SELECT COUNT(*) FROM {sqllock_semaphore_holders} WHERE name = 'x' AND (waiters OR ticketed))
  + (SELECT COUNT(*) FROM {sqllock_rwlock_holders} WHERE name = 'x' AND waiters),
  (SELECT COUNT(*) FROM information_schema.PROCESSLIST
   WHERE STATE = 'User lock' AND INFO LIKE '%sqllock anchor%' AND ID IN (
     SELECT bell FROM {sqllock_waiters} WHERE name = 'x'
     UNION SELECT IS_USED_LOCK(CONCAT('sqllock bell ', waker)) FROM {sqllock_tickets} WHERE name = 'x'
     UNION SELECT IS_USED_LOCK(CONCAT('sqllock bell ', waker)) FROM {sqllock_semaphore_tickets} WHERE name = 'x'))`
	testutil.Eventually(ctx, t, "the released row marked as waited for, the waiter's bell asleep", func() bool {
		var rows, asleep int
		if err := e.db.QueryRowContext(ctx, e.q(q)).Scan(&rows, &asleep); err != nil {
			t.Fatal(err)
		}
		return rows > 0 && asleep > 0
	})
}
