package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/observe"
)

// Room lines up one locker's waiting Acquire calls, per name. Only the
// head of a name's queue asks the database; the others wait their turn, in
// order of arrival, without a connection. The head sleeps until the holder's
// lease ends, a jittered backoff passes, or a wake-up arrives: a release
// through this locker, or — when the dialect has a dialect.Notifier — a
// release anywhere, announced by the database to the listening connection
// that the dialect keeps while anyone waits. The room is subscribed to the
// notifier while it has waiters, and keeps nothing for a name once nobody
// waits for it.
//
// A room is a dialect.Claimer: a notifier that addresses its wake-ups
// offers a release to one room, whose head tries alone, rather than to
// every room of every locker waiting for the name. A head that claimed a
// release and cannot use it — it gave up, or its attempt failed — passes
// it on (Subscription.Pass), so that the other rooms are not left asleep
// until the released lease would have ended.
type Room struct {
	notifier   dialect.Notifier // nil: poll only
	maxBackoff time.Duration
	logger     *slog.Logger
	hooks      *Hooks // nil outside tests
	ev         *Events

	subMu sync.Mutex // serialises subscribing and unsubscribing
	// enqueue serialises taking a place in a database queue and joining
	// the room's (see waitQueued).
	enqueue sync.Mutex
	// tickets returns the name of this room's ticket id, if it has it
	// (Fair); nil otherwise. Set before the room is used.
	tickets func(id int64) (name string, ok bool)

	mu     sync.Mutex
	queues map[line][]*waiter // by line, while anyone waits in it
	// named counts, by name, the waiters whose wake-ups are announced by
	// name (those without an addressed ticket, see Queue.Addressed): the
	// names the subscription watches.
	named map[string]int
	sub   dialect.Subscription // while anyone waits
	// releases counts the releases this room learned of (of any name, and
	// whether anyone waited): a caller that was refused before it joined a
	// queue compares it to tell whether a release it could not be woken by
	// came in between.
	releases uint64
	up, down bool // the listening connection is up; it was lost (for events)
	// deaf records that the notifier reported a loss and no Ready since:
	// losses are logged at warn level once.
	deaf bool
}

// Hooks let tests see what a waiting room does (SetHooks sets them,
// before the room is used). Outside tests a room's hooks are nil, and
// each costs one comparison where it would be called. All fields are set.
type Hooks struct {
	Ready    func()            // the listening connection became ready
	Notified func(name string) // a notification reached name's queue
	Retried  func(name string) // a head was refused again after a wait
	Lost     func()            // the listening connection was lost: heads poll
}

// SetHooks sets the room's hooks, for tests; call it before the room is
// used.
func (r *Room) SetHooks(h *Hooks) { r.hooks = h }

// SetTickets sets how the room finds the name of one of its tickets'
// ids (see Released); call it before the room is used.
func (r *Room) SetTickets(f func(id int64) (name string, ok bool)) { r.tickets = f }

// State reports whether notifications reach the room, and how many calls
// wait for name.
func (r *Room) State(name string) (listening bool, waiting int) {
	r.mu.Lock()
	waiting = len(r.queues[line{name: name}]) + len(r.queues[line{name: name, shared: true}]) +
		len(r.queues[line{name: name, upgrade: true}])
	r.mu.Unlock()
	return r.listening(), waiting
}

// Queue is a waiter's place in a FIFO queue kept by the database
// (Fair).
type Queue interface {
	// Join takes a place at the end of the queue, and reports how long
	// the waiter may wait before it tries again unwoken (0: at once).
	Join(ctx context.Context) (time.Duration, error)
	// Leave gives the place up, unless the lock was granted to it.
	Leave(ctx context.Context)
	// Place returns the waiter's place in the queue once it joined (its
	// ticket's id, which orders it among the name's), or 0.
	Place() int64
	// Addressed reports, once the waiter joined, whether releases wake it
	// through its ticket (dialect.TicketWake): then the room does not
	// watch its name for it.
	Addressed() bool
}

// line is one queue of a waiting room. A name has one line, or three for
// a read/write lock: readers, writers and upgrades (the holder of an
// upgradeable read waiting to write) wait in separate lines, so that a
// head of one is never stuck behind a waiter of another that the database
// would grant first (a writer queued behind a reader that its own intent
// to write keeps out, a writer that the upgrading holder keeps out). A
// release of the name wakes the head of each.
type line struct {
	name    string
	shared  bool
	upgrade bool
}

// ended is the error of a wait in ln whose ctx ended: an acquire's, or an
// upgrade's.
func (ln line) ended(ctx context.Context) error {
	what := "acquire"
	if ln.upgrade {
		what = "upgrade"
	}
	return fmt.Errorf("sqllock: %s %q: %w", what, ln.name, ctx.Err())
}

type waiter struct {
	turn chan struct{} // closed when the waiter becomes the head
	wake chan struct{} // a wake-up for the head; buffered
	// The release behind a pending wake-up, for events: when it reached
	// the room, and observe.HandoffLocal or observe.HandoffNotice ("": another wake-up).
	// Guarded by the room's mu.
	wokeAt time.Time
	wokeBy string
	// claimed: a release claimed for this waiter (see Room.Claim) is
	// not yet taken by an attempt. Guarded by the room's mu.
	claimed bool
	// rank is the waiter's place in the database's queue, if it took one
	// (see Queue.Place), else 0. Guarded by the room's mu.
	rank int64
	// addressed: wake-ups reach the waiter through its ticket, not its
	// name (see Queue.Addressed).
	addressed bool
}

// NewRoom returns the waiting room of a locker, which wakes its
// waiters on n's announcements; with a nil n they poll.
func NewRoom(n dialect.Notifier, opts Config) *Room {
	return &Room{notifier: n, maxBackoff: opts.MaxBackoff, logger: opts.Logger, queues: make(map[line][]*waiter),
		named: make(map[string]int)}
}

// notifyPollFactor stretches the head's polling while notifications arrive
// and the holder's lease end is unknown: notifications announce releases, so
// polling only has to catch what they cannot (expiry of a crashed holder's
// lease).
const notifyPollFactor = 10

// Wait calls try until it returns anything but dialect.ErrLocked, or ctx
// ends. try also reports how long the holder's lease has left, or a
// negative duration when that is unknown.
func (r *Room) Wait(ctx context.Context, name string, try func() (Grant, time.Duration, error)) (Grant, error) {
	return r.waitQueued(ctx, line{name: name}, nil, try)
}

// WaitShared is Wait in the readers' line of name (see line).
func (r *Room) WaitShared(ctx context.Context, name string, try func() (Grant, time.Duration, error)) (Grant, error) {
	return r.waitQueued(ctx, line{name: name, shared: true}, nil, try)
}

// WaitUpgrade is Wait in the upgrade line of name (see line).
func (r *Room) WaitUpgrade(ctx context.Context, name string, try func() (Grant, time.Duration, error)) (Grant, error) {
	return r.waitQueued(ctx, line{name: name, upgrade: true}, nil, try)
}

// WaitQueued is Wait with a queue (Fair): a caller refused at first
// takes its place in the database's queue before it joins the room's, so
// that the room's order is the queue's.
func (r *Room) WaitQueued(ctx context.Context, name string, q Queue, try func() (Grant, time.Duration, error)) (Grant, error) {
	return r.waitQueued(ctx, line{name: name}, q, try)
}

// waitQueued is Wait in line ln, with a queue (see WaitQueued) or nil.
func (r *Room) waitQueued(ctx context.Context, ln line, q Queue, try func() (Grant, time.Duration, error)) (Grant, error) {
	try = refusedFor(try)
	seen := r.releaseCount()
	g, left, err := try()
	if !errors.Is(err, dialect.ErrLocked) {
		return g, err
	}
	var w *waiter
	if q == nil {
		w = r.join(ln, seen, false)
	} else {
		// The queue's state is read after the ticket is taken: only a
		// release announced since then can have gone by unheard.
		r.enqueue.Lock()
		seen = r.releaseCount()
		if left, err = q.Join(ctx); err != nil {
			r.enqueue.Unlock()
			return Grant{}, err
		}
		w = r.join(ln, seen, q.Addressed())
		r.ranked(w, q)
		r.enqueue.Unlock()
		defer q.Leave(ctx)
	}
	defer r.leave(ln, w)
	backoff := minBackoff
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	select {
	case <-w.turn:
		r.ev.Waiting(ctx, ln.name, 1)
		defer r.ev.Waiting(ctx, ln.name, -1)
	default: // others wait ahead: when our turn comes, the lock has changed hands
		select {
		case <-w.turn:
		case <-ctx.Done():
			return Grant{}, ln.ended(ctx)
		}
		r.ev.Waiting(ctx, ln.name, 1)
		defer r.ev.Waiting(ctx, ln.name, -1)
		claimed := r.takeClaim(w)
		g, left, err = try()
		r.passUnused(ln.name, claimed, err)
		if !errors.Is(err, dialect.ErrLocked) {
			r.granted(w, err)
			return g, err
		}
		r.ranked(w, q)
	}
	for {
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, r.maxBackoff)
		switch {
		case r.listening() && left >= 0:
			// Releases are announced: look again only when the lease
			// ends, spread a little so that many heads do not align.
			wait = left + rand.N(min(left/10, 100*time.Millisecond)+1)
		case r.listening():
			wait = notifyPollFactor * min(r.maxBackoff, time.Hour) // no overflow
		case left >= 0 && left < wait:
			wait = left
		}
		wait = max(wait, time.Millisecond)
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return Grant{}, ln.ended(ctx)
		case <-timer.C:
		case <-w.wake:
			timer.Stop()
			backoff = minBackoff
		}
		tried := time.Now()
		claimed := r.takeClaim(w)
		g, left, err = try()
		r.passUnused(ln.name, claimed, err)
		r.ranked(w, q)
		if !errors.Is(err, dialect.ErrLocked) {
			r.granted(w, err)
			if at, by := r.woke(w, time.Time{}); by != "" && err == nil {
				r.ev.handoff(ctx, g.Lease, by, at)
			}
			return g, err
		}
		r.woke(w, tried) // a release before this refused try was not ours
		if r.hooks != nil {
			r.hooks.Retried(ln.name)
		}
	}
}

var _ dialect.Claimer = (*Room)(nil)

// takeClaim reports whether a release was claimed for w, which the
// attempt about to start takes.
func (r *Room) takeClaim(w *waiter) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	claimed := w.claimed
	w.claimed = false
	return claimed
}

// passUnused passes on a release claimed for an attempt (see Claim) that
// ended in an error. A refusal is not passed on: someone else holds the
// lock, and its release will be announced; or, in a FIFO queue, an older
// ticket is owed the lock, and none of this process's other waiters,
// whose tickets are younger (see Rank), would be granted it either.
func (r *Room) passUnused(name string, claimed bool, err error) {
	if !claimed || err == nil || errors.Is(err, dialect.ErrLocked) {
		return
	}
	r.mu.Lock()
	sub := r.sub
	r.mu.Unlock()
	if sub != nil {
		sub.Pass(name)
	}
}

// granted drops a release claimed for w while its attempt ran, if the
// attempt ended in a grant (err nil): the release came before the grant,
// which took it. Otherwise it is passed on as w leaves.
func (r *Room) granted(w *waiter, err error) {
	if err == nil {
		r.takeClaim(w)
	}
}

// ranked records w's place in q, a queue or nil, for Rank: a ticket found
// lost during an attempt is replaced by a younger one.
func (r *Room) ranked(w *waiter, q Queue) {
	if q == nil {
		return
	}
	rank := q.Place()
	r.mu.Lock()
	w.rank = rank
	r.mu.Unlock()
}

// refusedFor makes a refusal that says how long the server refuses grants
// (a dialect.WaitError) wait that long.
func refusedFor(try func() (Grant, time.Duration, error)) func() (Grant, time.Duration, error) {
	return func() (Grant, time.Duration, error) {
		lock, left, err := try()
		if we := (*dialect.WaitError)(nil); errors.As(err, &we) {
			return Grant{}, we.Left, dialect.ErrLocked
		}
		return lock, left, err
	}
}

// releaseCount counts the releases this room learned of and, with a
// notifier, every announcement the notifier received: one that came while
// the room was not subscribed reached no queue, but shows here.
func (r *Room) releaseCount() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.releaseCountLocked()
}

func (r *Room) releaseCountLocked() uint64 {
	n := r.releases
	if r.notifier != nil {
		n += r.notifier.Announced()
	}
	return n
}

// join queues a waiter in line ln; the first in line is its head at once. A
// head that was refused before a release this room learned of since seen
// (which found no queue to wake) starts with a wake-up, so that it tries
// again at once rather than sleep until the released lease would have
// ended. The count is compared once the room is subscribed: an
// announcement after that reaches the queue, one before it shows in the
// count. The subscription watches the name unless the waiter is addressed
// (see Queue.Addressed).
func (r *Room) join(ln line, seen uint64, addressed bool) *waiter {
	w := &waiter{turn: make(chan struct{}), wake: make(chan struct{}, 1), addressed: addressed}
	r.mu.Lock()
	q := r.queues[ln]
	if len(q) == 0 {
		close(w.turn)
	}
	if !addressed {
		if r.named[ln.name]++; r.named[ln.name] == 1 && r.sub != nil {
			r.sub.Watch(ln.name)
		}
	}
	r.queues[ln] = append(q, w)
	r.mu.Unlock()
	r.reconcile()
	r.mu.Lock()
	if r.queues[ln][0] == w && r.releaseCountLocked() != seen {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	r.mu.Unlock()
	return w
}

// leave takes w out of line ln, handing the turn on if w was the head,
// with a release claimed for w and not taken: the next head tries at once,
// or, if w was the last, the release is passed on to other rooms.
func (r *Room) leave(ln line, w *waiter) {
	r.mu.Lock()
	sub, pass := r.sub, false
	q := r.queues[ln]
	for i, x := range q {
		if x != w {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		if i == 0 && len(q) > 0 {
			close(q[0].turn)
			q[0].claimed = q[0].claimed || w.claimed
		} else if i == 0 {
			pass = w.claimed
		}
		w.claimed = false
		break
	}
	if len(q) == 0 {
		delete(r.queues, ln)
	} else {
		r.queues[ln] = q
	}
	if !w.addressed {
		if r.named[ln.name]--; r.named[ln.name] == 0 {
			delete(r.named, ln.name)
			if r.sub != nil {
				r.sub.Unwatch(ln.name)
			}
		}
	}
	r.mu.Unlock()
	r.reconcile()
	if pass && sub != nil {
		sub.Pass(ln.name)
	}
}

// waitedLocked reports whether anyone waits for name, in either line. r.mu
// is held.
func (r *Room) waitedLocked(name string) bool {
	return len(r.queues[line{name: name}]) > 0 || len(r.queues[line{name: name, shared: true}]) > 0 ||
		len(r.queues[line{name: name, upgrade: true}]) > 0
}

// reconcile subscribes the room to its notifier while anyone waits, and
// unsubscribes it when nobody does. The subscription watches the names of
// the room's queues (join and leave keep it up to date).
func (r *Room) reconcile() {
	if r.notifier == nil {
		return
	}
	r.subMu.Lock()
	defer r.subMu.Unlock()
	r.mu.Lock()
	want, sub := len(r.queues) > 0, r.sub
	r.mu.Unlock()
	switch {
	case want && sub == nil:
		sub = r.notifier.Subscribe(r)
		up := sub.Listening() // up already: no Ready comes (not under r.mu, which Ready takes)
		r.mu.Lock()
		r.sub = sub
		for name := range r.named {
			sub.Watch(name)
		}
		if up {
			r.setUp(true, nil)
		}
		r.mu.Unlock()
	case !want && sub != nil:
		r.mu.Lock()
		r.sub = nil
		r.mu.Unlock()
		sub.Unsubscribe()
		r.mu.Lock()
		r.setUp(false, nil)
		r.mu.Unlock()
	}
}

// Kick wakes the head of name's queue, if any: name was released
// through this locker.
func (r *Room) Kick(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releases++
	r.kickLocked(name, observe.HandoffLocal)
}

// kickLocked wakes the head of each of name's lines, if any, on behalf of
// a release of the source given (see waiter.wokeBy).
func (r *Room) kickLocked(name, source string) {
	r.kickLineLocked(line{name: name}, source)
	r.kickLineLocked(line{name: name, shared: true}, source)
	r.kickLineLocked(line{name: name, upgrade: true}, source)
}

func (r *Room) kickLineLocked(ln line, source string) *waiter {
	q := r.queues[ln]
	if len(q) > 0 {
		// A release through this locker is local even if its announcement
		// came first; the wake-up dates from the first.
		if source != "" && (q[0].wokeBy == "" || source == observe.HandoffLocal) {
			if q[0].wokeBy == "" {
				q[0].wokeAt = time.Now()
			}
			q[0].wokeBy = source
		}
		select {
		case q[0].wake <- struct{}{}:
		default:
		}
		return q[0]
	}
	return nil
}

// woke returns and clears the release behind w's pending wake-up, if it
// reached the room before the time given (zero: any time). A release that
// reaches the room while an attempt runs is kept for the next one.
func (r *Room) woke(w *waiter, before time.Time) (time.Time, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, by := w.wokeAt, w.wokeBy
	if by == "" || !before.IsZero() && !at.Before(before) {
		return time.Time{}, ""
	}
	w.wokeAt, w.wokeBy = time.Time{}, ""
	return at, by
}

// Ready implements dialect.Subscriber: it wakes every head, as releases
// before the listening connection was ready went unannounced.
func (r *Room) Ready() {
	if r.hooks != nil {
		r.hooks.Ready()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.deaf {
		r.deaf = false
		r.logger.Info("sqllock: notifications of released locks arrive again")
	}
	r.releases++
	for ln := range r.queues {
		r.kickLineLocked(ln, "")
	}
	r.setUp(true, nil)
}

// Released implements dialect.Subscriber: it wakes the head waiting for
// name, if any. A ticket's wake-up (dialect.TicketWake) is taken for a
// release of its ticket's name when the ticket is this room's (see
// Room.tickets), and ignored otherwise.
func (r *Room) Released(name string) {
	if id, ok := dialect.ParseTicketWake(name); ok {
		if name, ok = "", r.tickets != nil; ok {
			name, ok = r.tickets(id)
		}
		if !ok {
			return
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releases++
	if r.waitedLocked(name) {
		if r.hooks != nil {
			r.hooks.Notified(name)
		}
		r.kickLocked(name, observe.HandoffNotice)
	}
}

// Claim implements dialect.Claimer: it wakes the heads waiting for name,
// if any. It claims the release when it woke a head waiting for the lock
// alone (not for a share of it: a read/write lock's readers are all let
// in, and the release is offered to other rooms too), which will pass it
// on if it cannot use it.
func (r *Room) Claim(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releases++
	if !r.waitedLocked(name) {
		return false
	}
	if r.hooks != nil {
		r.hooks.Notified(name)
	}
	r.kickLineLocked(line{name: name, shared: true}, observe.HandoffNotice)
	r.kickLineLocked(line{name: name, upgrade: true}, observe.HandoffNotice)
	w := r.kickLineLocked(line{name: name}, observe.HandoffNotice)
	if w == nil {
		return false
	}
	w.claimed = true
	return true
}

// Rank implements dialect.Claimer: the place in the database's queue of
// the head waiting for name alone, if it took one.
func (r *Room) Rank(name string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q := r.queues[line{name: name}]; len(q) > 0 {
		return q[0].rank
	}
	return 0
}

// Lost implements dialect.Subscriber: heads poll, every MaxBackoff at the
// most, until the connection is back. Each is woken, since a head asleep
// until its holder's lease ends would otherwise sleep through releases
// nobody announces any more. The first loss is logged at warn level, and
// again only after the connection was back (Ready) in between: a notifier
// that keeps failing the same way (a listener behind a transaction pooler)
// is reported once.
func (r *Room) Lost(err error) {
	if r.hooks != nil {
		r.hooks.Lost()
	}
	r.mu.Lock()
	warned := r.deaf
	r.deaf = true
	for ln := range r.queues {
		r.kickLineLocked(ln, "")
	}
	r.setUp(false, err)
	r.mu.Unlock()
	level := slog.LevelWarn
	if warned {
		level = slog.LevelDebug
	}
	r.logger.Log(context.Background(), level,
		"sqllock: notifications of released locks do not arrive; waiters poll, every MaxBackoff at the most, until they do",
		"err", err, "max_backoff", r.maxBackoff)
}

// setUp records the listening connection's state, and reports a change.
// r.mu is held. err is why it went down (nil: the room stopped listening).
func (r *Room) setUp(up bool, err error) {
	if up == r.up {
		return
	}
	reconnect := up && r.down
	r.up = up
	if !up {
		r.down = err != nil
	}
	r.ev.listening(up, reconnect, err)
}

// listening reports whether notifications reach this room.
func (r *Room) listening() bool {
	r.mu.Lock()
	sub := r.sub
	r.mu.Unlock()
	return sub != nil && sub.Listening()
}
