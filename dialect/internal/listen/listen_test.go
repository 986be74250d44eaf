package listen

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqllock/sqllock/dialect"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake is a Func whose connections the test drives.
type fake struct {
	starts chan *conn // every call, in order
}

// conn is one call of a fake Func: ready at once, then announcing what the
// test sends, until its context ends or the test fails it.
type conn struct {
	ctx   context.Context
	names chan string
	fail  chan error
}

func newFake() *fake { return &fake{starts: make(chan *conn, 16)} }

func (f *fake) listen(ctx context.Context, ready func(), released func(string)) error {
	c := &conn{ctx: ctx, names: make(chan string), fail: make(chan error)}
	f.starts <- c
	ready()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-c.fail:
			return err
		case n := <-c.names:
			released(n)
		}
	}
}

// next returns the next connection the hub made.
func (f *fake) next(t *testing.T) *conn {
	t.Helper()
	select {
	case c := <-f.starts:
		return c
	case <-time.After(time.Minute):
		t.Fatal("the hub did not listen")
		return nil
	}
}

// none checks that the hub made no new connection.
func (f *fake) none(t *testing.T) {
	t.Helper()
	select {
	case <-f.starts:
		t.Fatal("the hub listened again")
	default:
	}
}

// recorder is a subscriber that records what it is told.
type recorder chan string

func newRecorder() recorder { return make(recorder, 64) }

func (r recorder) Ready()               { r <- "ready" }
func (r recorder) Released(name string) { r <- "released " + name }
func (r recorder) Lost(err error)       { r <- "lost " + err.Error() }

// expect checks that r is told want next.
func (r recorder) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-r:
		if got != want {
			t.Fatalf("told %q, want %q", got, want)
		}
	case <-time.After(time.Minute):
		t.Fatalf("never told %q", want)
	}
}

// quiet checks that r was told nothing more.
func (r recorder) quiet(t *testing.T) {
	t.Helper()
	select {
	case got := <-r:
		t.Fatalf("told %q, want nothing", got)
	default:
	}
}

// settle waits until every one of subs listens, and takes from each of
// rs the "ready" it may have been told: a subscriber that subscribed after
// the connection became ready is not told (Listening says it).
func settle(t *testing.T, subs []dialect.Subscription, rs []recorder) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, sub := range subs {
		for !sub.Listening() {
			if time.Now().After(deadline) {
				t.Fatal("the subscriptions never listened")
			}
			time.Sleep(time.Millisecond) // polling an observable state
		}
	}
	for _, r := range rs {
		select {
		case got := <-r:
			if got != "ready" {
				t.Fatalf("told %q, want \"ready\" or nothing", got)
			}
		default:
		}
	}
}

func closeHub(t *testing.T, h *Hub) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// The hub listens only once someone subscribes, on one connection for all
// subscribers, fans announcements out to those subscribed at the time, and
// keeps the connection while subscribers come back within the linger.
func TestSubscribersShareOneConnection(t *testing.T) {
	f := newFake()
	h := New(f.listen, time.Hour)
	f.none(t)
	ra, rb := newRecorder(), newRecorder()
	a := h.Subscribe(ra)
	c := f.next(t)
	ra.expect(t, "ready")
	if !a.Listening() {
		t.Fatal("a is not listening after ready")
	}
	b := h.Subscribe(rb)
	if !b.Listening() {
		t.Fatal("b, subscribed to a ready connection, is not listening")
	}
	c.names <- "x"
	ra.expect(t, "released x")
	rb.expect(t, "released x")
	a.Unsubscribe()
	a.Unsubscribe() // again: nothing
	c.names <- "y"
	rb.expect(t, "released y")
	if a.Listening() {
		t.Fatal("a listens after Unsubscribe")
	}
	b.Unsubscribe()
	rc := newRecorder()
	sc := h.Subscribe(rc) // within the linger: the same connection
	if !sc.Listening() {
		t.Fatal("c, subscribed within the linger, is not listening")
	}
	c.names <- "z"
	rc.expect(t, "released z")
	f.none(t)
	ra.quiet(t)
	rb.quiet(t)
	rc.quiet(t)
	closeHub(t, h)
	<-c.ctx.Done()
}

// The connection stops a linger period after the last subscriber left, and
// the next subscriber makes a new one.
func TestLingerThenStop(t *testing.T) {
	const linger = 50 * time.Millisecond
	f := newFake()
	h := New(f.listen, linger)
	defer closeHub(t, h)
	r := newRecorder()
	s := h.Subscribe(r)
	c := f.next(t)
	r.expect(t, "ready")
	left := time.Now()
	s.Unsubscribe()
	<-c.ctx.Done()
	if d := time.Since(left); d < linger {
		t.Fatalf("stopped %v after the last subscriber left, want at least %v", d, linger)
	}
	s = h.Subscribe(r)
	f.next(t)
	r.expect(t, "ready")
	s.Unsubscribe()
}

// A failed connection is reported lost and replaced after a pause; the new
// one is reported ready.
func TestReconnects(t *testing.T) {
	f := newFake()
	h := New(f.listen, time.Hour)
	defer closeHub(t, h)
	r := newRecorder()
	s := h.Subscribe(r)
	c := f.next(t)
	r.expect(t, "ready")
	c.fail <- errors.New("connection reset")
	r.expect(t, "lost connection reset")
	if s.Listening() {
		t.Fatal("listening after the connection was lost")
	}
	c = f.next(t)
	r.expect(t, "ready")
	if !s.Listening() {
		t.Fatal("not listening after reconnecting")
	}
	c.names <- "x"
	r.expect(t, "released x")
	s.Unsubscribe()
}

// A connection that can never be made is reported lost once, not at every
// attempt; attempts go on with growing pauses; nobody ever listens.
func TestNeverReady(t *testing.T) {
	calls := make(chan time.Time, 16)
	refuse := func(ctx context.Context, _ func(), _ func(string)) error {
		calls <- time.Now()
		return errors.New("refused")
	}
	h := New(refuse, time.Hour)
	defer closeHub(t, h)
	r := newRecorder()
	s := h.Subscribe(r)
	r.expect(t, "lost refused")
	var at []time.Time
	for range 3 {
		at = append(at, <-calls)
		if s.Listening() {
			t.Fatal("listening without a connection")
		}
	}
	if p1, p2 := at[1].Sub(at[0]), at[2].Sub(at[1]); p1 < firstPause || p2 < 2*firstPause {
		t.Fatalf("pauses %v, %v: want at least %v, %v", p1, p2, firstPause, 2*firstPause)
	}
	select {
	case got := <-r:
		t.Fatalf("after three failed attempts: %s; want only the first reported", got)
	default:
	}
	s.Unsubscribe()
}

// A connection that listens but hears nothing (ErrNotDelivered: behind a
// transaction pooler) is reported lost, and not tried again for a
// deafPause: a configuration does not change in 50 ms. (The check cannot
// fail on a slow machine: it only asserts a retry that did not happen.)
func TestDeafWaitsLonger(t *testing.T) {
	calls := make(chan struct{}, 16)
	deaf := func(ctx context.Context, _ func(), _ func(string)) error {
		calls <- struct{}{}
		return fmt.Errorf("probe: %w", ErrNotDelivered)
	}
	h := New(deaf, time.Hour)
	defer closeHub(t, h)
	r := newRecorder()
	s := h.Subscribe(r)
	r.expect(t, "lost probe: "+ErrNotDelivered.Error())
	<-calls
	tm := time.NewTimer(20 * firstPause)
	defer tm.Stop()
	select {
	case <-calls:
		t.Fatal("tried again at once after ErrNotDelivered")
	case <-tm.C:
	}
	if s.Listening() {
		t.Fatal("listening without notifications")
	}
	s.Unsubscribe()
}

// Close stops the connection and waits for it, lingering or not; later
// subscriptions never listen; a second Close returns at once.
func TestClose(t *testing.T) {
	for _, lingering := range []bool{false, true} {
		t.Run(fmt.Sprintf("lingering=%v", lingering), func(t *testing.T) {
			f := newFake()
			h := New(f.listen, time.Hour)
			r := newRecorder()
			s := h.Subscribe(r)
			c := f.next(t)
			r.expect(t, "ready")
			if lingering {
				s.Unsubscribe()
			}
			closeHub(t, h)
			select {
			case <-c.ctx.Done():
			default:
				t.Fatal("the connection outlived Close")
			}
			if s.Listening() {
				t.Fatal("listening after Close")
			}
			late := h.Subscribe(r)
			if late.Listening() {
				t.Fatal("a subscription after Close listens")
			}
			late.Unsubscribe()
			s.Unsubscribe()
			f.none(t)
			r.quiet(t)
			closeHub(t, h)
		})
	}
}

// Close gives up waiting when its context ends, and a later Close waits
// for what is left.
func TestCloseBounded(t *testing.T) {
	stuck, release := make(chan struct{}), make(chan struct{})
	slow := func(ctx context.Context, ready func(), _ func(string)) error {
		ready()
		<-ctx.Done()
		close(stuck)
		<-release // slow to notice
		return ctx.Err()
	}
	h := New(slow, time.Hour)
	r := newRecorder()
	h.Subscribe(r)
	r.expect(t, "ready")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := h.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a stuck listener: %v, want DeadlineExceeded", err)
	}
	<-stuck
	close(release)
	closeHub(t, h)
}

// Subscribers coming and going from many goroutines, with a linger short
// enough to stop and restart the connection among them, leave nothing
// running once the hub is closed (TestMain checks for goroutines).
func TestChurn(t *testing.T) {
	var n int
	var mu sync.Mutex
	counting := func(ctx context.Context, ready func(), released func(string)) error {
		mu.Lock()
		n++
		mu.Unlock()
		ready()
		released("x")
		<-ctx.Done()
		return ctx.Err()
	}
	h := New(counting, 10*time.Microsecond)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				s := h.Subscribe(nop{})
				_ = s.Listening()
				s.Unsubscribe()
			}
		})
	}
	wg.Wait()
	closeHub(t, h)
	mu.Lock()
	defer mu.Unlock()
	if n == 0 {
		t.Fatal("never listened")
	}
}

// nop is a subscriber that ignores what it is told.
type nop struct{}

func (nop) Ready()          {}
func (nop) Released(string) {}
func (nop) Lost(error)      {}

// claimer is a recorder that is a dialect.Claimer, of rank rank, and
// claims a release when take says so.
type claimer struct {
	recorder
	take bool
	rank int64
}

func (c claimer) Claim(name string) bool {
	c.recorder <- "claim " + name
	return c.take
}

func (c claimer) Rank(string) int64 { return c.rank }

// A name's release is offered to the Claimers watching it, oldest watch
// first, until one claims it; other subscribers hear every release, and
// every subscriber a ticket's wake-up. Pass offers the release to the
// Claimers after the passer, or to all once it no longer watches.
func TestClaimersTakeTurns(t *testing.T) {
	f := newFake()
	h := New(f.listen, time.Hour)
	defer closeHub(t, h)
	plain := newRecorder()
	declines, first, second := claimer{newRecorder(), false, 0}, claimer{newRecorder(), true, 0}, claimer{newRecorder(), true, 0}
	rs := []recorder{plain, declines.recorder, first.recorder, second.recorder}
	var subs []dialect.Subscription
	for _, s := range []dialect.Subscriber{plain, declines, first, second} {
		sub := h.Subscribe(s)
		defer sub.Unsubscribe()
		subs = append(subs, sub)
	}
	c := f.next(t)
	settle(t, subs, rs)
	for _, sub := range subs {
		sub.Watch("n")
	}
	quiet := func() {
		t.Helper()
		for _, r := range rs {
			r.quiet(t)
		}
	}
	c.names <- "n"
	plain.expect(t, "released n")
	declines.expect(t, "claim n")
	first.expect(t, "claim n")
	quiet()

	subs[2].Pass("n")
	second.expect(t, "claim n")
	quiet()
	subs[3].Pass("n") // nobody watches after it
	quiet()

	subs[2].Unwatch("n")
	c.names <- "n"
	plain.expect(t, "released n")
	declines.expect(t, "claim n")
	second.expect(t, "claim n")
	quiet()
	subs[2].Pass("n") // no longer watching: offered to all
	declines.expect(t, "claim n")
	second.expect(t, "claim n")
	quiet()

	c.names <- "other" // watched by nobody
	plain.expect(t, "released other")
	quiet()

	ticket := dialect.TicketWake(7)
	c.names <- ticket
	for _, r := range rs {
		r.expect(t, "released "+ticket)
	}
	quiet()
}

// Claimers with a rank (a FIFO ticket) are offered a release first, lowest
// rank first, whatever the order of their watches; those without come
// after, in the order of their watches.
func TestClaimersByRank(t *testing.T) {
	f := newFake()
	h := New(f.listen, time.Hour)
	defer closeHub(t, h)
	unranked, late, early := claimer{newRecorder(), false, 0}, claimer{newRecorder(), false, 9}, claimer{newRecorder(), true, 3}
	rs := []recorder{unranked.recorder, late.recorder, early.recorder}
	var subs []dialect.Subscription
	for _, s := range []claimer{unranked, late, early} {
		sub := h.Subscribe(s)
		defer sub.Unsubscribe()
		sub.Watch("n")
		subs = append(subs, sub)
	}
	c := f.next(t)
	settle(t, subs, rs)
	c.names <- "n"
	early.expect(t, "claim n")
	for _, r := range rs {
		r.quiet(t)
	}
	subs[2].Pass("n")
	late.expect(t, "claim n")
	unranked.expect(t, "claim n")
	for _, r := range rs {
		r.quiet(t)
	}
}
