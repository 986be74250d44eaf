package dialecttest

import (
	"testing"

	"github.com/sqllock/sqllock/dialect"
)

// subscriber records a Notifier's announcements.
type subscriber struct {
	ready    chan struct{}
	released chan string
	lost     chan error
}

func newSubscriber() *subscriber {
	return &subscriber{ready: make(chan struct{}, 16), released: make(chan string, 64), lost: make(chan error, 16)}
}

// The methods must not block the notifier: a full channel drops, which the
// checks below would notice as a missing announcement.
func (s *subscriber) Ready() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

func (s *subscriber) Released(name string) {
	select {
	case s.released <- name:
	default:
	}
}

func (s *subscriber) Lost(err error) {
	select {
	case s.lost <- err:
	default:
	}
}

// A subscriber is told Ready, and then the names whose lease was released,
// or whose expired row was reaped, while someone waited for them (as
// Remaining marks), in the order they were, and no others (a name may be
// announced again when its released row is reaped); a second
// subscriber listens on the connection already there. For a subscription
// of a notifier that watches names (dialect.Catalogue.WatchesNames), a
// name is waited for once watched (the registration is announced once) and
// reaping is not announced; where the catalogue says AnnouncesVersions,
// releases of the version table are announced too.
func checkNotifier(t *testing.T, e *env) {
	cat := e.Dialect.Catalogue()
	n := cat.Notifier
	s := newSubscriber()
	sub := n.Subscribe(s)
	defer sub.Unsubscribe()
	select {
	case <-s.ready:
	case err := <-s.lost:
		t.Fatalf("the listening connection failed: %v", err)
	case <-e.ctx.Done():
		t.Fatal("never: Ready")
	}
	if !sub.Listening() {
		t.Fatal("Listening() = false after Ready")
	}
	s2 := newSubscriber()
	sub2 := n.Subscribe(s2)
	defer sub2.Unsubscribe()
	e.eventually("a second subscriber listens", sub2.Listening)

	watching := cat.WatchesNames
	// seen holds, per subscriber, the names announced so far.
	seen := map[*subscriber]map[string]bool{s: {}, s2: {}}
	// announced checks that the next announcement s gets is want's. A name
	// announced before may come again (the reaping of a released row that
	// was waited for is announced too): a spare wake-up costs a waiter a
	// query, a missing one a wait.
	announced := func(s *subscriber, want string) {
		t.Helper()
		for {
			select {
			case got := <-s.released:
				if got == want {
					seen[s][got] = true
					return
				}
				if !seen[s][got] {
					t.Fatalf("announced %q, want %q (a name released or reaped while waited for)", got, want)
				}
			case err := <-s.lost:
				t.Fatalf("the listening connection failed: %v", err)
			case <-e.ctx.Done():
				t.Fatalf("never: the announcement of %q", want)
			}
		}
	}
	// waited grants name in tb and marks it waited for: by Remaining, or,
	// where the notifier watches names, by Watch, whose registration is announced once.
	waited := func(tb *table, name string) dialect.Lease {
		t.Helper()
		l := e.grant(tb, name, "o")
		if watching {
			sub.Watch(name)
			t.Cleanup(func() { sub.Unwatch(name) })
			announced(s, name)
			announced(s2, name)
			return l
		}
		if _, ok, err := e.tables(e.Dialect).Locks.Remaining(e.ctx, name); err != nil || !ok {
			t.Fatalf("Remaining(%q): %v, %v", name, ok, err)
		}
		return l
	}

	tb := e.table(Locks)
	quiet := e.grant(tb, "notify-quiet", "o")
	again := e.grant(tb, "notify-waited", "o")
	w := waited(tb, "notify-waited")
	e.release(tb, again, true) // one hold of two: not free yet
	e.release(tb, quiet, true) // nobody waited
	e.release(tb, w, true)
	announced(s, w.Name)
	announced(s2, w.Name)
	b := waited(tb, "notify-broken")
	if _, ok, err := e.tables(e.Dialect).Locks.Break(e.ctx, b.Name, 0); err != nil || !ok {
		t.Fatalf("Break(%q): %v, %v", b.Name, ok, err)
	}
	announced(s, b.Name)
	announced(s2, b.Name)

	if cat.AnnouncesVersions {
		vt := e.table(Versions)
		quiet := e.grant(vt, "notify-quiet-version", "o")
		v := waited(vt, "notify-version")
		e.release(vt, quiet, true)
		e.release(vt, v, true)
		announced(s, v.Name)
		announced(s2, v.Name)
	}
	if watching {
		// Waiters on names watched look again when the holder's lease ends:
		// reaping an expired row need not be announced.
		return
	}
	x := waited(tb, "notify-reaped")
	e.expire(tb, x.Name)
	e.reapAll()
	announced(s, x.Name)
	announced(s2, x.Name)
}
