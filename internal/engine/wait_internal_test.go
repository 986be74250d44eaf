package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/testutil"
)

// alwaysListening is a dialect.Notifier whose announcements always arrive;
// the test delivers them itself. It counts the subscriptions in effect.
type alwaysListening struct {
	subs      atomic.Int64
	announced atomic.Uint64
	passed    chan string // what subscriptions pass on (see Pass), if set
}

func (n *alwaysListening) Announced() uint64 { return n.announced.Load() }

func (n *alwaysListening) Subscribe(dialect.Subscriber) dialect.Subscription {
	n.subs.Add(1)
	return &listeningSub{n: n}
}

type listeningSub struct {
	n    *alwaysListening
	once sync.Once
}

func (s *listeningSub) Listening() bool { return true }
func (s *listeningSub) Unsubscribe()    { s.once.Do(func() { s.n.subs.Add(-1) }) }
func (s *listeningSub) Watch(string)    {}
func (s *listeningSub) Unwatch(string)  {}
func (s *listeningSub) Pass(name string) {
	if s.n.passed != nil {
		s.n.passed <- name
	}
}

// newTestRoom returns a waiting room on n that logs nothing.
func newTestRoom(n dialect.Notifier) *Room {
	return NewRoom(n, Config{MaxBackoff: time.Minute, Logger: slog.New(slog.DiscardHandler)})
}

// contend runs two waiters for each of names distinct names through r, with
// workers names at a time. Each waiter is refused before queueing (the
// holder's lease ends at once), refused again after that wait with a
// notification for the name arriving meanwhile, as the listening connection
// would deliver it, and then granted. The second waiter of a name queues
// behind the first, or comes after it.
func contend(ctx context.Context, r *Room, names, workers int) error {
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		first atomic.Pointer[error]
	)
	waiter := func(name string) {
		calls := 0
		_, err := r.Wait(ctx, name, func() (Grant, time.Duration, error) {
			calls++
			switch calls {
			case 1:
				return Grant{}, 0, dialect.ErrLocked
			case 2:
				r.Released(name)
				return Grant{}, -1, dialect.ErrLocked
			}
			return Grant{}, 0, nil
		})
		if err != nil {
			first.CompareAndSwap(nil, &err)
		}
	}
	for range workers {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(names); i = next.Add(1) {
				name := fmt.Sprintf("order:%d", i)
				var pair sync.WaitGroup
				pair.Go(func() { waiter(name) })
				pair.Go(func() { waiter(name) })
				pair.Wait()
			}
		})
	}
	wg.Wait()
	if err := first.Load(); err != nil {
		return *err
	}
	return nil
}

// heap returns the bytes of live heap objects after a collection.
func heap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// A waiting room keeps nothing for a name once nobody waits for it: after
// 100 000 distinct contended names came and went through one room, its
// per-name state is empty, it is no longer subscribed, and the heap is
// where it was (within 1 MiB, that is 10 bytes a name). Not parallel: the
// heap is the whole process's.
func TestWaitRoomForgetsNames(t *testing.T) {
	const names = 100_000
	n := &alwaysListening{}
	r := newTestRoom(n)
	// A first round grows what is reused (the queue map, goroutine stacks).
	if err := contend(t.Context(), r, 1000, 64); err != nil {
		t.Fatal(err)
	}
	before := heap()
	if err := contend(t.Context(), r, names, 64); err != nil {
		t.Fatal(err)
	}
	grown := heap() - before
	r.mu.Lock()
	queues, sub := len(r.queues), r.sub
	r.mu.Unlock()
	if queues != 0 || sub != nil || n.subs.Load() != 0 {
		t.Fatalf("after the last waiter left: %d names queued, subscription %v, %d subscriptions in effect; want none",
			queues, sub, n.subs.Load())
	}
	t.Logf("heap grew by %d bytes over %d names (%.2f bytes a name)", grown, names, float64(grown)/names)
	if grown > 1<<20 {
		t.Fatalf("heap grew by %d bytes over %d names: the room keeps state per name", grown, names)
	}
	runtime.KeepAlive(r)
}

// BenchmarkWaitRoomNames runs b.N distinct contended names (two waiters
// each, as in TestWaitRoomForgetsNames) through one waiting room and
// reports the heap it retains per name afterwards: 0 when nothing is kept
// for names nobody waits for. Run:
//
//	go test -run '^$' -bench WaitRoomNames -benchtime 100000x .
func BenchmarkWaitRoomNames(b *testing.B) {
	r := newTestRoom(&alwaysListening{})
	if err := contend(b.Context(), r, 1000, 64); err != nil {
		b.Fatal(err)
	}
	before := heap()
	b.ReportAllocs()
	b.ResetTimer()
	if err := contend(b.Context(), r, b.N, 64); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(heap()-before)/float64(b.N), "retained-B/name")
	runtime.KeepAlive(r)
}

// An announcement that reached the notifier while the room was not
// subscribed (between a caller's first refusal and its joining the queue)
// does not leave the caller asleep until the released lease would have
// ended: it tries again at once.
func TestAnnouncementBeforeSubscribingIsNotMissed(t *testing.T) {
	t.Parallel()
	n := &alwaysListening{}
	r := newTestRoom(n)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	calls := 0
	lock, err := r.Wait(ctx, "x", func() (Grant, time.Duration, error) {
		calls++
		if calls == 1 {
			n.announced.Add(1) // announced to nobody in this room
			return Grant{}, time.Hour, dialect.ErrLocked
		}
		return Grant{Lease: &Lease{}}, 0, nil
	})
	if err != nil || lock.Lease == nil {
		t.Fatalf("wait: %v after %d attempts, want the lock at the second", err, calls)
	}
}

// A release that arrives after a caller's first refusal but before it joins
// the queue (so that no queue is there to wake) does not leave it asleep
// until the released lease would have ended: it tries again at once.
func TestReleaseBeforeJoiningIsNotMissed(t *testing.T) {
	t.Parallel()
	r := newTestRoom(&alwaysListening{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	calls := 0
	lock, err := r.Wait(ctx, "x", func() (Grant, time.Duration, error) {
		calls++
		if calls == 1 {
			// The holder releases right after the refusal; its lease had
			// an hour left.
			r.Released("x")
			return Grant{}, time.Hour, dialect.ErrLocked
		}
		return Grant{Lease: &Lease{}}, 0, nil
	})
	if err != nil || lock.Lease == nil {
		t.Fatalf("wait: %v after %d attempts, want the lock at the second", err, calls)
	}
}

// levels counts log records by level.
type levels struct {
	mu sync.Mutex
	n  map[slog.Level]int
}

func (l *levels) Enabled(context.Context, slog.Level) bool { return true }
func (l *levels) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n[r.Level]++
	return nil
}
func (l *levels) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *levels) WithGroup(string) slog.Handler      { return l }

// A notifier that keeps failing the same way (a listener behind a
// transaction pooler, tried again every minute) is reported once at warn
// level; after it was back (Ready), a new loss warns again.
func TestLostWarnsOnce(t *testing.T) {
	h := &levels{n: map[slog.Level]int{}}
	r := NewRoom(nil, Config{MaxBackoff: time.Second, Logger: slog.New(h)})
	for range 3 {
		r.Lost(fmt.Errorf("notifications are not delivered"))
	}
	r.Ready()
	r.Lost(fmt.Errorf("connection reset"))
	want := map[slog.Level]int{slog.LevelWarn: 2, slog.LevelDebug: 2, slog.LevelInfo: 1}
	for lv, n := range want {
		if h.n[lv] != n {
			t.Errorf("%d records at %v, want %d (all: %v)", h.n[lv], lv, n, h.n)
		}
	}
}

// noQueue is a queue (as a fair waiter's) that the test needs not see.
type noQueue struct{}

func (noQueue) Join(context.Context) (time.Duration, error) { return -1, nil }
func (noQueue) Leave(context.Context)                       {}
func (noQueue) Place() int64                                { return 0 }
func (noQueue) Addressed() bool                             { return false }

// A release claimed for a head (Room.Claim) that cannot use it is
// passed on to other rooms: when the attempt it wakes fails, and when the
// head leaves before an attempt took it. A refusal keeps it: the new
// holder's release will be announced, or, in a queue, an older ticket is
// owed the lock; so does a grant, which took it.
func TestClaimedReleaseIsPassedOn(t *testing.T) {
	t.Parallel()
	n := &alwaysListening{passed: make(chan string, 8)}
	r := newTestRoom(n)
	ctx := t.Context()
	failed := errors.New("the statement failed")
	// claim claims a release of name once a waiter queued for it (a
	// release before would make it try again at once, unclaimed).
	claim := func(name string) {
		t.Helper()
		testutil.Eventually(ctx, t, "a waiter for "+name, func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return len(r.queues[line{name: name}]) == 1
		})
		if !r.Claim(name) {
			t.Fatalf("Claim(%q) = false with a waiter queued", name)
		}
	}
	passes := func(want ...string) {
		t.Helper()
		var got []string
		for len(n.passed) > 0 {
			got = append(got, <-n.passed)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("passed on %q, want %q", got, want)
		}
	}
	// The attempt fails.
	done := make(chan error, 1)
	go func() {
		calls := 0
		_, err := r.Wait(ctx, "failing", func() (Grant, time.Duration, error) {
			if calls++; calls == 1 {
				return Grant{}, -1, dialect.ErrLocked
			}
			return Grant{}, 0, failed
		})
		done <- err
	}()
	claim("failing")
	if err := <-done; !errors.Is(err, failed) {
		t.Fatalf("wait: %v, want %v", err, failed)
	}
	passes("failing")

	// A plain refusal, then a grant; and a queue's refusal, then a grant.
	for _, q := range []Queue{nil, noQueue{}} {
		go func() {
			calls := 0
			_, err := r.waitQueued(ctx, line{name: "refused"}, q, func() (Grant, time.Duration, error) {
				if calls++; calls <= 2 {
					return Grant{}, -1, dialect.ErrLocked
				}
				return Grant{}, 0, nil
			})
			done <- err
		}()
		claim("refused")
		claim("refused")
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		passes()
	}

	// Claimed during an attempt woken otherwise: if the attempt fails, the
	// head leaves with the release untaken; if it is granted, the grant
	// took the release.
	for _, outcome := range []error{failed, nil} {
		inTry, proceed := make(chan struct{}), make(chan struct{})
		go func() {
			calls := 0
			_, err := r.Wait(ctx, "during", func() (Grant, time.Duration, error) {
				if calls++; calls == 1 {
					return Grant{}, -1, dialect.ErrLocked
				}
				close(inTry)
				<-proceed
				return Grant{}, 0, outcome
			})
			done <- err
		}()
		testutil.Eventually(ctx, t, "a waiter for during", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return len(r.queues[line{name: "during"}]) == 1
		})
		r.Released("during")
		<-inTry
		claim("during")
		close(proceed)
		if err := <-done; !errors.Is(err, outcome) {
			t.Fatalf("wait: %v, want %v", err, outcome)
		}
		if outcome != nil {
			passes("during")
		} else {
			passes()
		}
	}
}
