// Package listen keeps a dialect's listening connection and fans what it
// hears out to subscribers: the reusable part of a dialect.Notifier. A
// dialect supplies the connection (a Func); a Hub runs it while anyone
// subscribes, reconnecting after failures with a growing pause, tells the
// subscribers when it is ready or lost, and stops it a linger period after
// the last subscriber left, or when the Hub is closed.
//
// A Hub addresses the wake-ups of its Claimers (dialect.Claimer): a name's
// release is offered to the Claimers watching the name one at a time, in
// the order in which they began to watch it, until one claims it; other
// subscribers are told every release.
package listen

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// Func holds one listening connection: it calls ready once announcements
// are being delivered, then released with each announced name, until ctx
// ends or the connection fails, and returns why. It must return soon after
// ctx ends.
type Func func(ctx context.Context, ready func(), released func(name string)) error

// Pauses between attempts to listen after a failure: the first, doubling
// up to the last; after ErrNotDelivered, deafPause.
const (
	firstPause = 50 * time.Millisecond
	maxPause   = 5 * time.Second
	deafPause  = time.Minute
)

// ErrNotDelivered is wrapped by a Func's error when its connection could
// listen but notifications do not reach it, as behind a transaction pooler:
// a configuration that trying again soon will not change, so the Hub waits
// a minute before it does.
var ErrNotDelivered = errors.New("notifications are not delivered")

// Hub runs a Func for its subscribers. Create it with New; it starts
// nothing until the first Subscribe. A Hub is safe for concurrent use.
type Hub struct {
	listen Func
	linger time.Duration

	mu      sync.Mutex
	subs    map[*subscription]struct{}
	current *listener   // the running listener, if any
	up      bool        // current delivers announcements
	timer   *time.Timer // the pending linger, if any
	gen     uint64      // identifies the latest linger timer
	active  int         // listener goroutines and linger timers not yet finished
	closed  bool
	drained chan struct{} // closed once closed and active == 0

	announced atomic.Uint64 // see Announced

	// wmu guards the Claimers' watches. Subscriptions watch while their
	// subscriber's own locks are held, and the Hub calls the subscribers
	// under mu: mu may be held when wmu is taken, never the reverse.
	wmu      sync.Mutex
	watchers map[string][]*subscription // Claimers watching a name, oldest watch first
}

// listener is one run of the listening goroutine.
type listener struct {
	cancel context.CancelFunc
	down   bool // the subscribers were told Lost, and not Ready since
}

// New returns a Hub that runs listen while it has subscribers, and for
// linger after the last one left: subscribers that take turns do not make
// it reconnect at every turn.
func New(listen Func, linger time.Duration) *Hub {
	return &Hub{listen: listen, linger: linger, subs: make(map[*subscription]struct{}), drained: make(chan struct{}),
		watchers: make(map[string][]*subscription)}
}

var _ dialect.Notifier = (*Hub)(nil)

// Announced implements dialect.Notifier.
func (h *Hub) Announced() uint64 { return h.announced.Load() }

// Subscribers returns the number of live subscriptions.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Subscribe implements dialect.Notifier.
func (h *Hub) Subscribe(s dialect.Subscriber) dialect.Subscription {
	sub := &subscription{h: h, s: s}
	sub.claimer, _ = s.(dialect.Claimer)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return sub // never listening
	}
	h.subs[sub] = struct{}{}
	h.disarm()
	if h.current == nil {
		ctx, cancel := context.WithCancel(context.Background())
		l := &listener{cancel: cancel}
		h.current = l
		h.active++
		go h.run(ctx, l)
	}
	return sub
}

// Close stops the listener, if any, and waits until its goroutine and
// timers are gone or ctx ends; it returns ctx's error in the latter case.
// Subscribers stay registered but are told nothing more, and later
// subscriptions never listen. Close may be called more than once.
func (h *Hub) Close(ctx context.Context) error {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		h.disarm()
		h.stop()
		if h.active == 0 {
			close(h.drained)
		}
	}
	h.mu.Unlock()
	select {
	case <-h.drained:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run listens until ctx ends, again after every failure.
func (h *Hub) run(ctx context.Context, l *listener) {
	defer h.finished()
	pause := firstPause
	var wait *time.Timer
	for {
		var readied atomic.Bool // a connection that was ready starts the pauses over
		err := h.listen(ctx, func() { readied.Store(true); h.ready(l) }, h.deliver)
		if ctx.Err() != nil {
			return
		}
		if readied.Load() {
			pause = firstPause
		}
		h.lost(l, err)
		if errors.Is(err, ErrNotDelivered) {
			pause = max(pause, deafPause)
		}
		if wait == nil {
			wait = time.NewTimer(pause)
		} else {
			wait.Reset(pause)
		}
		select {
		case <-ctx.Done():
			wait.Stop()
			return
		case <-wait.C:
		}
		pause = min(2*pause, max(maxPause, pause))
	}
}

// ready marks the hub up and tells the subscribers, unless l was stopped.
func (h *Hub) ready(l *listener) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.current != l {
		return
	}
	h.up, l.down = true, false
	h.announced.Add(1)
	for sub := range h.subs {
		sub.s.Ready()
	}
}

// deliver passes an announcement on, also from a listener being stopped:
// it is news all the same. A name's release goes to every subscriber that
// is not a Claimer, and to one Claimer watching the name (see offer); a
// ticket's wake-up (dialect.TicketWake), addressed already, to every
// subscriber.
func (h *Hub) deliver(name string) {
	h.announced.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ticket := dialect.ParseTicketWake(name)
	for sub := range h.subs {
		if sub.claimer == nil || ticket {
			sub.s.Released(name)
		}
	}
	if !ticket {
		h.offer(name, nil)
	}
}

// offer offers a release of name to the Claimers watching it, one at a
// time, until one claims it: by rank, then in the order of their watches
// (see dialect.Claimer); only those after the subscription after, if it
// watches name. h.mu is held.
func (h *Hub) offer(name string, after *subscription) {
	h.wmu.Lock()
	watching := slices.Clone(h.watchers[name])
	h.wmu.Unlock()
	type ranked struct {
		sub  *subscription
		rank int64
	}
	subs := make([]ranked, 0, len(watching))
	for _, sub := range watching {
		if _, in := h.subs[sub]; in {
			subs = append(subs, ranked{sub, sub.claimer.Rank(name)})
		}
	}
	slices.SortStableFunc(subs, func(a, b ranked) int {
		switch {
		case a.rank == b.rank:
			return 0
		case a.rank == 0:
			return 1
		case b.rank == 0:
			return -1
		case a.rank < b.rank:
			return -1
		}
		return 1
	})
	if i := slices.IndexFunc(subs, func(r ranked) bool { return r.sub == after }); i >= 0 {
		subs = subs[i+1:]
	}
	for _, r := range subs {
		if r.sub.claimer.Claim(name) {
			return
		}
	}
}

// lost marks the hub down and tells the subscribers, unless l was stopped
// or they were told already: a listener that keeps failing to reconnect
// reports the outage once, not at every attempt.
func (h *Hub) lost(l *listener, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.current != l || l.down {
		return
	}
	h.up, l.down = false, true
	for sub := range h.subs {
		sub.s.Lost(err)
	}
}

// stop cancels the current listener, if any; its goroutine ends on its
// own. h.mu is held.
func (h *Hub) stop() {
	if h.current != nil {
		h.current.cancel()
		h.current, h.up = nil, false
	}
}

// arm starts the linger timer. h.mu is held.
func (h *Hub) arm() {
	h.gen++
	gen := h.gen
	h.active++
	h.timer = time.AfterFunc(h.linger, func() { h.retire(gen) })
}

// disarm cancels the linger timer, if any. A timer that fired already
// finds itself outdated when its function runs. h.mu is held.
func (h *Hub) disarm() {
	if h.timer == nil {
		return
	}
	if h.timer.Stop() {
		h.active-- // its function will not run (Close checks for the last)
	}
	h.timer = nil
}

// retire is the linger timer's function: it stops the listener, unless the
// timer was disarmed meanwhile (a subscriber came) or replaced.
func (h *Hub) retire(gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	defer h.finishedLocked()
	if h.timer == nil || gen != h.gen {
		return
	}
	h.timer = nil
	h.stop()
}

// finished counts a listener goroutine out.
func (h *Hub) finished() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.finishedLocked()
}

// finishedLocked counts a goroutine or timer out and, once a closed hub has
// none left, reports it drained. h.mu is held.
func (h *Hub) finishedLocked() {
	h.active--
	if h.active == 0 && h.closed {
		close(h.drained)
	}
}

// subscription is a subscriber's registration with a Hub.
type subscription struct {
	h       *Hub
	s       dialect.Subscriber
	claimer dialect.Claimer // s, if it is one

	watched map[string]bool // guarded by h.wmu
}

// Listening implements dialect.Subscription.
func (sub *subscription) Listening() bool {
	h := sub.h
	h.mu.Lock()
	defer h.mu.Unlock()
	_, in := h.subs[sub]
	return in && h.up
}

// Unsubscribe implements dialect.Subscription. The last subscriber to
// leave arms the linger timer.
func (sub *subscription) Unsubscribe() {
	h := sub.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, in := h.subs[sub]; !in {
		return
	}
	delete(h.subs, sub)
	if len(h.subs) == 0 && h.current != nil {
		h.arm()
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	for name := range sub.watched {
		h.unwatch(sub, name)
	}
}

// Watch implements dialect.Subscription: a Claimer's watch lines it up for
// name's releases; for another subscriber, which a Hub tells every
// release, it does nothing.
func (sub *subscription) Watch(name string) {
	if sub.claimer == nil {
		return
	}
	h := sub.h
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if sub.watched[name] {
		return
	}
	if sub.watched == nil {
		sub.watched = make(map[string]bool)
	}
	sub.watched[name] = true
	h.watchers[name] = append(h.watchers[name], sub)
}

// Unwatch implements dialect.Subscription.
func (sub *subscription) Unwatch(name string) {
	h := sub.h
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if sub.watched[name] {
		h.unwatch(sub, name)
	}
}

// unwatch takes sub out of name's Claimers. h.wmu is held.
func (h *Hub) unwatch(sub *subscription, name string) {
	delete(sub.watched, name)
	ws := slices.DeleteFunc(h.watchers[name], func(x *subscription) bool { return x == sub })
	if len(ws) == 0 {
		delete(h.watchers, name)
	} else {
		h.watchers[name] = ws
	}
}

// Pass implements dialect.Subscription.
func (sub *subscription) Pass(name string) {
	h := sub.h
	h.mu.Lock()
	defer h.mu.Unlock()
	h.offer(name, sub)
}
