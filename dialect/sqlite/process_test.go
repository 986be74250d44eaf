package sqlite_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/observe"
)

// Waiters in other processes: the test binary runs itself as a child
// process (see TestMain) that acquires a lock the test holds.

// waiterEnv names the environment variable that makes the test binary a
// waiting process, with the JSON-encoded waiter it holds.
const waiterEnv = "SQLLOCK_TEST_SQLITE_WAITER"

// waiter is a child process's work: for each line read from standard
// input, it acquires Name on the database File, writes "acquired" and the
// wall-clock time in nanoseconds, and releases the lock. It writes
// "listening" when its locker's wake-ups are delivered. With Watch, it
// subscribes to the dialect's notifier instead, watches Name, writes
// "watching" once the registration was announced and "released" at the
// next announcement of Name.
type waiter struct {
	File       string
	Name       string
	Rounds     int
	MaxBackoff time.Duration
	Wakeups    bool
	Watch      bool
}

func (w waiter) run() error {
	if w.Watch {
		return w.watch()
	}
	ctx := context.Background()
	db, err := sqlite.Open(w.File)
	if err != nil {
		return err
	}
	defer db.Close()
	var opts []sqlite.Option
	if !w.Wakeups {
		opts = append(opts, sqlite.WithoutWakeups())
	}
	d, err := sqlite.New(db, opts...)
	if err != nil {
		return err
	}
	defer d.Close(ctx)
	l, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{MaxBackoff: w.MaxBackoff, Observer: listening{}}})
	if err != nil {
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	for range w.Rounds {
		if !in.Scan() {
			return fmt.Errorf("standard input ended: %v", in.Err())
		}
		lock, err := l.Acquire(ctx, w.Name)
		if err != nil {
			return err
		}
		fmt.Printf("acquired %d\n", time.Now().UnixNano())
		if err := lock.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (w waiter) watch() error {
	db, err := sqlite.Open(w.File)
	if err != nil {
		return err
	}
	defer db.Close()
	d, err := sqlite.New(db)
	if err != nil {
		return err
	}
	defer d.Close(context.Background())
	s := &announcements{ready: make(chan struct{}, 1), released: make(chan string, 16)}
	sub := d.Catalogue().Notifier.Subscribe(s)
	defer sub.Unsubscribe()
	<-s.ready
	sub.Watch(w.Name)
	for name := <-s.released; name != w.Name; name = <-s.released {
	}
	fmt.Println("watching")
	for name := <-s.released; name != w.Name; name = <-s.released {
	}
	fmt.Println("released")
	return nil
}

// announcements is a dialect.Subscriber that passes what it is told on.
type announcements struct {
	ready    chan struct{}
	released chan string
}

func (a *announcements) Ready() {
	select {
	case a.ready <- struct{}{}:
	default:
	}
}
func (a *announcements) Released(name string) { a.released <- name }
func (a *announcements) Lost(err error)       { fmt.Fprintln(os.Stderr, "lost:", err) }

// listening is an observer that writes "listening" when a locker's
// wake-ups are delivered.
type listening struct{}

func (listening) Listening(_ context.Context, e observe.ListenerEvent) {
	if e.Up {
		fmt.Println("listening")
	}
}

// startWaiter runs w in a child process, killed after limit, or when t
// ends if t failed, and returns its standard input and the lines it
// writes. Once t ends the process must end by itself, its rounds done.
func startWaiter(t testing.TB, limit time.Duration, w waiter) (io.Writer, *bufio.Scanner) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	cmd, err := testutil.ChildCommand(ctx, waiterEnv, w)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer cancel()
		if t.Failed() {
			cmd.Process.Kill()
		}
		in.Close()
		if err := cmd.Wait(); err != nil && !t.Failed() {
			t.Errorf("the waiting process: %v", err)
		}
	})
	return in, bufio.NewScanner(out)
}

// await reads lines from out until one starts with prefix, and returns it.
func await(t testing.TB, out *bufio.Scanner, prefix string) string {
	t.Helper()
	for out.Scan() {
		if strings.HasPrefix(out.Text(), prefix) {
			return out.Text()
		}
	}
	t.Fatalf("never: %q from the waiting process (%v)", prefix, out.Err())
	return ""
}

// needWakeups skips t where the system has no wake-up sockets (Windows):
// there the catalogue has no Notifier and waiters poll.
func needWakeups(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("no wake-ups on " + runtime.GOOS + ": waiters poll")
	}
}

// migrated returns a fresh, migrated database file and its dialect,
// closed when t ends.
func migrated(t testing.TB) (string, *sqlite.Dialect) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "locks.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := sqlite.New(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	return path, d
}

// A release is announced to a process that watches the name.
func TestReleaseAnnouncedToOtherProcess(t *testing.T) {
	t.Parallel()
	needWakeups(t)
	const limit = 2 * time.Minute
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	path, d := migrated(t)
	holder, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 10 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	lock, err := holder.Acquire(ctx, "announced")
	if err != nil {
		t.Fatal(err)
	}
	_, out := startWaiter(t, limit, waiter{File: path, Name: "announced", Watch: true})
	await(t, out, "watching")
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, out, "released")
}

// A release wakes a waiter in another process. The holder's lease lasts
// ten minutes and the waiter's backoff is capped at an hour, so once the
// waiter listens it looks again only when woken: the test ends only if the
// wake-up arrives (or the machine is too slow for even a minute, when the
// context ends it).
func TestWakeupAcrossProcesses(t *testing.T) {
	t.Parallel()
	needWakeups(t)
	const limit = 2 * time.Minute
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	path, d := migrated(t)
	holder, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 10 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	lock, err := holder.Acquire(ctx, "wake")
	if err != nil {
		t.Fatal(err)
	}
	in, out := startWaiter(t, limit, waiter{File: path, Name: "wake", Rounds: 1, MaxBackoff: time.Hour, Wakeups: true})
	if _, err := io.WriteString(in, "go\n"); err != nil {
		t.Fatal(err)
	}
	await(t, out, "listening")
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, out, "acquired")
}

// BenchmarkProcessHandoff measures the hand-off of a lock to a waiter in
// another process: from the holder calling Release to the waiter's Acquire
// returning (on the host's wall clock, which both processes read), the
// holder releasing after hold; with the waiter's wake-ups and without
// (polling, every MaxBackoff at the most, as before wake-ups existed).
// Besides ns/op it reports p50-ms and p99-ms.
//
//	go test -run '^$' -bench ProcessHandoff -benchtime 30x ./dialect/sqlite
func BenchmarkProcessHandoff(b *testing.B) {
	const hold = time.Second
	for _, wakeups := range []bool{false, true} {
		b.Run(fmt.Sprintf("wakeups=%v/hold=%v", wakeups, hold), func(b *testing.B) {
			ctx := b.Context()
			path, d := migrated(b)
			holder, err := sqllock.NewTable(d, sqllock.TableOptions{})
			if err != nil {
				b.Fatal(err)
			}
			in, out := startWaiter(b, time.Duration(b.N)*(hold+time.Minute), waiter{File: path, Name: "handoff", Rounds: b.N, Wakeups: wakeups})
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				lock, err := holder.Acquire(ctx, "handoff")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.WriteString(in, "go\n"); err != nil {
					b.Fatal(err)
				}
				time.Sleep(hold) // the waiter settles into its wait
				start := time.Now()
				if err := lock.Release(ctx); err != nil {
					b.Fatal(err)
				}
				ns, err := strconv.ParseInt(strings.TrimPrefix(await(b, out, "acquired "), "acquired "), 10, 64)
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Unix(0, ns).Sub(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2])/float64(time.Millisecond), "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100])/float64(time.Millisecond), "p99-ms")
		})
	}
}

// A ticket given up (a fair waiter that stopped waiting) is announced, so
// that the next ticket's waiter, which may be asleep until that ticket's
// end, looks again.
func TestDequeueAnnounced(t *testing.T) {
	t.Parallel()
	needWakeups(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	_, d := migrated(t)
	s := &announcements{ready: make(chan struct{}, 1), released: make(chan string, 16)}
	sub := d.Catalogue().Notifier.Subscribe(s)
	defer sub.Unsubscribe()
	next := func(what string) string {
		t.Helper()
		select {
		case name := <-s.released:
			return name
		case <-ctx.Done():
			t.Fatalf("never: %s", what)
			return ""
		}
	}
	select {
	case <-s.ready:
	case <-ctx.Done():
		t.Fatal("never: Ready")
	}
	sub.Watch("queued")
	if name := next("the registration"); name != "queued" {
		t.Fatalf("announced %q, want the registration of %q", name, "queued")
	}
	fair := testutil.Tables(t, d).Fair
	tk, err := fair.Enqueue(ctx, dialect.AcquireParams{Name: "queued", Owner: "gone", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := fair.Dequeue(ctx, tk); err != nil {
		t.Fatal(err)
	}
	if name := next("the ticket given up"); name != "queued" {
		t.Fatalf("announced %q, want %q", name, "queued")
	}
}
