package mysql_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/testutil"
)

// wakeChildEnv carries a wakeChild's config to a child process.
const wakeChildEnv = "SQLLOCK_TEST_MYSQL_WAKE_CHILD"

// wakeChild is a child process that holds a lock (or a semaphore's only
// permit, see wakeLocker) until told to release it: it prints "held",
// waits for a line on its standard input, releases, and prints
// "released".
type wakeChild struct {
	DSN, Database, Name, Kind string
}

// wakeKinds are the kinds of wait TestWakeFromAnotherProcess covers: a
// lock table's, a semaphore's of one permit, a fair one's, a reader's
// behind a writer and a writer's behind a reader.
var wakeKinds = []string{"lock", "semaphore", "fairsem", "rw-read", "rw-write"}

// wakeLocker returns a locker of kind (see wakeKinds) on d, with the
// lease's ttl and the waiters' maxBackoff (0: the default).
func wakeLocker(d dialect.Dialect, kind string, ttl, maxBackoff time.Duration) (sqllock.Locker, error) {
	switch kind {
	case "semaphore", "fairsem":
		return sqllock.NewSemaphore(d, 1, sqllock.SemaphoreOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl, MaxBackoff: maxBackoff}, Fair: kind == "fairsem"})
	case "rw-read", "rw-write":
		return sqllock.NewRWLock(d, sqllock.LeaseOptions{TTL: ttl, MaxBackoff: maxBackoff})
	}
	return sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl, MaxBackoff: maxBackoff}, Fair: kind == "fair"})
}

// wakeHold takes name on l as the child of kind holds it: the other side
// of a read/write lock than the waiter's.
func wakeHold(ctx context.Context, l sqllock.Locker, kind, name string) (*sqllock.Lock, error) {
	if kind == "rw-write" {
		return l.(*sqllock.RWLock).TryAcquireShared(ctx, name)
	}
	return l.TryAcquire(ctx, name)
}

// wakeWait waits for name on l as the waiter of kind does.
func wakeWait(ctx context.Context, l sqllock.Locker, kind, name string) (*sqllock.Lock, error) {
	if kind == "rw-read" {
		return l.(*sqllock.RWLock).AcquireShared(ctx, name)
	}
	return l.Acquire(ctx, name)
}

func (c wakeChild) run() error {
	ctx := context.Background()
	db, err := sql.Open("mysql", c.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	d, err := mysql.New(db, mysql.WithDatabase(c.Database))
	if err != nil {
		return err
	}
	defer d.Close(ctx)
	l, err := wakeLocker(d, c.Kind, 10*time.Minute, 0)
	if err != nil {
		return err
	}
	k, err := wakeHold(ctx, l, c.Kind, c.Name)
	if err != nil {
		return err
	}
	fmt.Println("held")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	if err := k.Release(ctx); err != nil {
		return err
	}
	fmt.Println("released")
	return nil
}

// recorder is a dialect.Subscriber that records what it is told.
type recorder chan string

func (r recorder) Ready()               { r <- "ready" }
func (r recorder) Released(name string) { r <- "released " + name }
func (r recorder) Lost(err error)       { r <- "lost" }

// next returns what r is told next.
func (r recorder) next(ctx context.Context, t *testing.T) string {
	t.Helper()
	select {
	case got := <-r:
		return got
	case <-ctx.Done():
		t.Fatal("nothing announced")
		return ""
	}
}

// expect checks that r is told want next.
func (r recorder) expect(ctx context.Context, t *testing.T, want string) {
	t.Helper()
	if got := r.next(ctx, t); got != want {
		t.Fatalf("told %q, want %q", got, want)
	}
}

// wakeEnv is a migrated dialect of the test's own, closed at the end.
func wakeEnv(t *testing.T) (*mysql.Dialect, *sql.DB, string) {
	t.Helper()
	db, database := dbtest.MySQL(t)
	d, err := mysql.New(db, mysql.WithDatabase(database))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Errorf("closing the dialect: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	return d, db, database
}

// watch subscribes r to d and watches name, and waits until the bell is
// up and the registration of name has been announced.
func watch(ctx context.Context, t *testing.T, d *mysql.Dialect, r recorder, name string) dialect.Subscription {
	t.Helper()
	sub := d.Catalogue().Notifier.Subscribe(r)
	t.Cleanup(sub.Unsubscribe)
	sub.Watch(name)
	r.expect(ctx, t, "ready")
	r.expect(ctx, t, "released "+name)
	return sub
}

// A release in another process wakes this process's bell, which
// announces the name; a waiter of this process acquires. Nothing polls
// within the test: leases last 10 minutes, and so does the waiter's
// backoff.
func TestWakeFromAnotherProcess(t *testing.T) {
	t.Parallel()
	for _, kind := range wakeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			wakeFromAnotherProcess(t, kind)
		})
	}
}

// inBackground runs acquire in a goroutine, releases the lock it
// returns, and sends the first error, or nil.
func inBackground(ctx context.Context, acquire func() (*sqllock.Lock, error)) <-chan error {
	got := make(chan error, 1)
	go func() {
		k, err := acquire()
		if err == nil {
			err = k.Release(context.WithoutCancel(ctx))
		}
		got <- err
	}()
	return got
}

// holdInChild starts a wakeChild holding "x" as kind, and waits until it
// holds it. release makes the child release it, and waits until it did;
// stop waits for the child to end (deferred before ctx's cancel).
func holdInChild(ctx context.Context, t *testing.T, database, kind string) (release, stop func()) {
	t.Helper()
	cmd, err := testutil.ChildCommand(ctx, wakeChildEnv, wakeChild{DSN: dbtest.MySQLDSN(t), Database: database, Name: "x", Kind: kind})
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v; %s", err, stderr.String())
		}
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "held" {
		stop()
		t.Fatalf("child: %q, %v; want held", lines.Text(), lines.Err())
	}
	release = func() {
		t.Helper()
		if _, err := io.WriteString(in, "release\n"); err != nil {
			t.Fatal(err)
		}
		if !lines.Scan() || lines.Text() != "released" {
			t.Fatalf("child: %q, %v; want released", lines.Text(), lines.Err())
		}
	}
	return release, stop
}

func wakeFromAnotherProcess(t *testing.T, kind string) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	d, _, database := wakeEnv(t)
	release, stop := holdInChild(ctx, t, database, kind)
	defer stop()

	r := make(recorder, 16)
	watch(ctx, t, d, r, "x")
	l, err := wakeLocker(d, kind, 10*time.Minute, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := inBackground(ctx, func() (*sqllock.Lock, error) { return wakeWait(ctx, l, kind, "x") })
	release()
	// The only announcement of x after its registration's is the ring
	// of the child's release (a new bell would say ready first).
	r.expect(ctx, t, "released x")
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

// A release in another process wakes the waiter of this process's ticket
// through the ticket alone: no name is registered (nobody watches it), so
// only the ring of the oldest ticket's bell can wake the waiter, whose
// lease and backoff last 10 minutes. The release comes once the waiter
// has marked the row its release reports from (ticketed) and read the
// lock held after the mark (the ticket's Wait): a release before the mark
// would let the waiter in without a ring, and so would one between the
// mark and that read, which then finds the lock free (its ring, counted in
// a ticket granted meanwhile, wakes nobody). The waiter's room subscribes
// once its ticket's Wait returned.
func TestTicketWakeFromAnotherProcess(t *testing.T) {
	t.Parallel()
	marked := map[string]string{ // kind: the marked row
		"lock":      "sqllock_locks",
		"fair":      "sqllock_locks",
		"semaphore": "sqllock_semaphore_holders",
		"fairsem":   "sqllock_semaphore_holders",
	}
	for kind, table := range marked {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			d, db, database := wakeEnv(t)
			release, stop := holdInChild(ctx, t, database, kind)
			defer stop()
			// The bell is up before the waiter comes: a bell that comes up
			// lets every waiter try once.
			r := make(recorder, 16)
			sub := d.Catalogue().Notifier.Subscribe(r)
			defer sub.Unsubscribe()
			r.expect(ctx, t, "ready")
			l, err := wakeLocker(d, kind, 10*time.Minute, 10*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			got := inBackground(ctx, func() (*sqllock.Lock, error) { return l.Acquire(ctx, "x") })
			for mysql.Subscribers(d) < 2 { // the test's and the waiter's room
				select {
				case err := <-got:
					t.Fatalf("the waiter returned before it waited: %v", err)
				case <-ctx.Done():
					t.Fatal("the waiter's room never subscribed")
				case <-time.After(10 * time.Millisecond): // polls an observable condition
				}
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+database+"`."+table+" WHERE name = 'x' AND ticketed").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Fatal("the waiter waits, and the row is not marked")
			}
			release()
			if told := r.next(ctx, t); !strings.HasPrefix(told, "released ") {
				t.Fatalf("told %q, want a ticket's wake-up", told)
			} else if _, ok := dialect.ParseTicketWake(strings.TrimPrefix(told, "released ")); !ok {
				t.Fatalf("told %q, want a ticket's wake-up", told)
			}
			if err := <-got; err != nil {
				t.Fatalf("waiter: %v", err)
			}
		})
	}
}

// logCounter counts the warnings logged through it.
type logCounter struct {
	slog.Handler
	warns *atomic.Int64
}

func (logCounter) Enabled(context.Context, slog.Level) bool { return true }

func (h logCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		h.warns.Add(1)
	}
	return nil
}

// A bell whose connection is killed, and that cannot start again, leaves
// waiters polling: a release still reaches them, and the outage is logged
// once, however often the bell is retried.
func TestKilledBellDegradesToPolling(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	d, db, database := wakeEnv(t)
	var warns atomic.Int64
	logger := slog.New(logCounter{slog.DiscardHandler, &warns})
	holder, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 10 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := holder.TryAcquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	r := make(recorder, 16)
	sub := watch(ctx, t, d, r, "warm-up")

	l, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 10 * time.Minute, MaxBackoff: 20 * time.Millisecond, Logger: logger}})
	if err != nil {
		t.Fatal(err)
	}
	got := inBackground(ctx, func() (*sqllock.Lock, error) { return l.Acquire(ctx, "x") })
	// The waiter takes a ticket, and marks the lock's row before it
	// sleeps.
	testutil.Eventually(ctx, t, "the waiter's ticket and mark", func() bool {
		var n int
		err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*) FROM `%[1]s`.sqllock_tickets t JOIN `%[1]s`.sqllock_locks l ON l.name = t.name WHERE t.name = 'x' AND l.ticketed", database)).Scan(&n)
		return err == nil && n == 1
	})
	// Its room subscribes after the ticket is taken: the bell is killed
	// once it has (the test's subscription and the room's).
	testutil.Eventually(ctx, t, "the waiter's room subscribed", func() bool { return mysql.Subscribers(d) == 2 })

	var (
		mu       sync.Mutex
		attempts int
	)
	refused := errors.New("refused by the test")
	mysql.GateBell(d, func() error {
		mu.Lock()
		defer mu.Unlock()
		attempts++
		return refused
	})
	id := mysql.BellID(d)
	if id == 0 {
		t.Fatal("no bell while subscribed")
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
		t.Fatal(err)
	}
	r.expect(ctx, t, "lost")
	if sub.Listening() {
		t.Fatal("listening after the bell was killed")
	}
	testutil.Eventually(ctx, t, "the bell retried twice more", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return attempts >= 3
	})
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	select {
	case what := <-r:
		t.Fatalf("told %q while the bell could not start", what)
	default:
	}
	if n := warns.Load(); n != 1 {
		t.Fatalf("%d warnings logged, want 1", n)
	}
}

// WithoutWakeups: a subscription never listens, and waiters poll.
func TestWithoutWakeups(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	_, db, database := wakeEnv(t)
	d, err := mysql.New(db, mysql.WithDatabase(database), mysql.WithoutWakeups())
	if err != nil {
		t.Fatal(err)
	}
	r := make(recorder, 16)
	sub := d.Catalogue().Notifier.Subscribe(r)
	defer sub.Unsubscribe()
	if sub.Listening() {
		t.Fatal("listening without wake-ups")
	}
	holder, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 10 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := holder.TryAcquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	l, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 10 * time.Minute, MaxBackoff: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	got := inBackground(ctx, func() (*sqllock.Lock, error) { return l.Acquire(ctx, "x") })
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	select {
	case what := <-r:
		t.Fatalf("told %q without wake-ups", what)
	default:
	}
}

// Optimistic waiters listen too: the version table's releases ring. Nothing
// polls within the test (10-minute leases and backoff), so the waiter
// acquires only through wake-ups.
func TestOptimisticWaiterWoken(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	d, _, _ := wakeEnv(t)
	r := make(recorder, 16)
	watch(ctx, t, d, r, "warm-up")
	opts := sqllock.OptimisticOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 10 * time.Minute, MaxBackoff: 10 * time.Minute}}
	holder, err := sqllock.NewOptimistic(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	k, err := holder.TryAcquire(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	l, err := sqllock.NewOptimistic(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := inBackground(ctx, func() (*sqllock.Lock, error) { return l.Acquire(ctx, "v") })
	r.expect(ctx, t, "released v") // the waiter's room watches v
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

// A ring kills only bells: a registration whose connection does not hold
// the registered tag's user lock (as after a server restart, when
// connection ids start again) is counted, but the statement that
// connection runs is left alone.
func TestRingKillsOnlyBells(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	d, db, database := wakeEnv(t)

	// Another session's statement, on a connection whose id a stale
	// registration names.
	other, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var id int64
	if err := other.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		var r int
		ended <- other.QueryRowContext(ctx, "SELECT SLEEP(600)").Scan(&r)
	}()
	testutil.Eventually(ctx, t, "the other session sleeps", func() bool {
		var n int
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
WHERE ID = ? AND INFO LIKE 'SELECT SLEEP(600)%'`, id).Scan(&n)
		return err == nil && n == 1
	})

	l, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 10 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := l.TryAcquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	q := "`" + database + "`."
	if _, err := db.ExecContext(ctx, `INSERT INTO `+q+`sqllock_waiters (name, bell, tag, rung, seen, expires_at)
VALUES ('x', ?, '0123456789abcdef', 0, 0, NOW(6) + INTERVAL 1 HOUR)`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE `+q+`sqllock_locks SET waiters = TRUE WHERE name = 'x'`); err != nil {
		t.Fatal(err)
	}
	// The ring runs in the background, and Close waits for it: any KILL
	// it sends has been sent when Close returns.
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var rung int
	if err := db.QueryRowContext(ctx, `SELECT rung FROM `+q+`sqllock_waiters WHERE name = 'x'`).Scan(&rung); err != nil {
		t.Fatal(err)
	}
	if rung != 1 {
		t.Fatalf("rung %d, want 1: the release did not ring", rung)
	}
	// A statement ended by KILL QUERY is gone from the process list, or
	// listed as Killed until it ends.
	var command string
	err = db.QueryRowContext(ctx, `SELECT COMMAND FROM information_schema.PROCESSLIST
WHERE ID = ? AND INFO LIKE 'SELECT SLEEP(600)%'`, id).Scan(&command)
	if errors.Is(err, sql.ErrNoRows) || err == nil && command == "Killed" {
		t.Fatal("the ring ended another session's statement")
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", id)); err != nil {
		t.Fatal(err)
	}
	<-ended
}

// A release rings before it returns (a process may exit right after it,
// without Close): once Release returned, the ring is counted in the
// registration. A ring that cannot count — the name's registration locked
// by another transaction — holds the release up for a bounded time
// (wakeTimeout), never an error of the release; its count may still land
// on the server once the lock is free, and its bells are not killed: the
// waiter comes back within its MaxBackoff by itself.
func TestRingBeforeReleaseReturns(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	d, db, database := wakeEnv(t)
	q := "`" + database + "`."
	// A registration of a bell that is gone: rung, never killed.
	if _, err := db.ExecContext(ctx, `INSERT INTO `+q+`sqllock_waiters (name, bell, tag, rung, seen, expires_at)
VALUES ('x', 0, '0123456789abcdef', 0, 0, NOW(6) + INTERVAL 1 HOUR)`); err != nil {
		t.Fatal(err)
	}
	l, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 10 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	release := func() {
		t.Helper()
		k, err := l.TryAcquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `UPDATE `+q+`sqllock_locks SET waiters = TRUE WHERE name = 'x'`); err != nil {
			t.Fatal(err)
		}
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rung := func() int {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, `SELECT rung FROM `+q+`sqllock_waiters WHERE name = 'x'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for want := 1; want <= 2; want++ {
		release()
		if got := rung(); got != want {
			t.Fatalf("rung %d once Release returned, want %d: the ring is part of the release", got, want)
		}
	}

	blocker, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback()
	if _, err := blocker.ExecContext(ctx, `SELECT rung FROM `+q+`sqllock_waiters WHERE name = 'x' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	release() // returns, without error, once the ring gave up
	if err := blocker.Commit(); err != nil {
		t.Fatal(err)
	}
}

// The bell waits for its anchor's user lock, not in a SLEEP (see
// wake.go): a bell whose anchor connection is killed reports the loss,
// starts again with a new anchor and registers its names again; a stopped
// bell's server session ends as its anchor's does, without a KILL.
func TestBellAnchor(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	d, db, _ := wakeEnv(t)
	r := make(recorder, 16)
	sub := watch(ctx, t, d, r, "x")

	bell, tag := mysql.BellID(d), mysql.BellTag(d)
	testutil.Eventually(ctx, t, "the bell waits for its anchor", func() bool {
		var state, info sql.NullString
		err := db.QueryRowContext(ctx, `SELECT STATE, INFO FROM information_schema.PROCESSLIST WHERE ID = ?`, bell).Scan(&state, &info)
		return err == nil && state.String == "User lock" && strings.Contains(info.String, "GET_LOCK('sqllock anchor "+tag+"'")
	})
	var anchor sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, "sqllock anchor "+tag).Scan(&anchor); err != nil {
		t.Fatal(err)
	}
	if !anchor.Valid || anchor.Int64 == bell {
		t.Fatalf("anchor lock held by %v, want a connection other than the bell's %d", anchor, bell)
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", anchor.Int64)); err != nil {
		t.Fatal(err)
	}
	r.expect(ctx, t, "lost")
	r.expect(ctx, t, "ready")
	r.expect(ctx, t, "released x") // registered again
	if mysql.BellID(d) == bell {
		t.Fatal("the bell did not start again")
	}

	bell, tag = mysql.BellID(d), mysql.BellTag(d)
	sub.Unsubscribe()
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Without the anchor's release the bell's session would wait out its
	// 20 seconds.
	gone, cancelGone := context.WithTimeout(ctx, 10*time.Second)
	defer cancelGone()
	testutil.Eventually(gone, t, "the stopped bell's session ended", func() bool {
		var n int
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?`, bell).Scan(&n)
		return err == nil && n == 0
	})
	var held sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, "sqllock bell "+tag).Scan(&held); err != nil || held.Valid {
		t.Fatalf("the bell's tag lock: held by %v, %v", held, err)
	}
}

// On a pool too small for the bell's two connections and a locker's, the
// bell does not start (the subscribers are told it is lost, and waiters
// poll), rather than take the connections the waiters need.
func TestBellNeedsRoomInThePool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	_, _, database := wakeEnv(t) // migrated
	db := dbtest.OpenMySQL(t, dbtest.MySQLDSN(t))
	db.SetMaxOpenConns(2)
	d, err := mysql.New(db, mysql.WithDatabase(database))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	r := make(recorder, 16)
	sub := d.Catalogue().Notifier.Subscribe(r)
	defer sub.Unsubscribe()
	r.expect(ctx, t, "lost")
	if id := mysql.BellID(d); id != 0 {
		t.Fatalf("a bell (connection %d) on a pool of 2", id)
	}

	var lockers [2]*sqllock.Table
	for i := range lockers {
		if lockers[i], err = sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute, MaxBackoff: 20 * time.Millisecond}}); err != nil {
			t.Fatal(err)
		}
	}
	k, err := lockers[0].TryAcquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockers[1].TryAcquire(ctx, "x"); !errors.Is(err, sqllock.ErrLocked) {
		t.Fatalf("second locker: %v, want ErrLocked", err)
	}
	got := make(chan error, 1)
	go func() {
		k2, err := lockers[1].Acquire(ctx, "x")
		if err == nil {
			err = k2.Release(ctx)
		}
		got <- err
	}()
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter on a pool of 2: %v", err)
	}
}
