package sqllock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// waitRoom lines up one locker's waiting Acquire calls, per name. Only the
// head of a name's queue asks the database; the others wait their turn, in
// order of arrival, without a connection. The head sleeps until the holder's
// lease ends, a jittered backoff passes, or a wake-up arrives: a release
// through this locker, or — when the dialect is a dialect.Notifier — a
// release anywhere, announced by the database to the one listening
// connection the room keeps while anyone waits.
type waitRoom struct {
	notifier   dialect.Notifier // nil: poll only
	maxBackoff time.Duration
	logger     *slog.Logger

	mu       sync.Mutex
	queues   map[string][]*waiter
	listen   context.CancelFunc // stops the listener; nil when none runs
	gen      int                // the running listener's generation
	up       bool               // the listener delivers notifications
	connects int                // times a listener became ready (tests)
	notified map[string]int     // notifications delivered to a queue, per name (tests)
	retries  map[string]int     // attempts by heads after a wait, per name (tests)
}

type waiter struct {
	turn chan struct{} // closed when the waiter becomes the head
	wake chan struct{} // a wake-up for the head; buffered
}

func newWaitRoom(d dialect.Dialect, opts Options) *waitRoom {
	n, _ := d.(dialect.Notifier)
	return &waitRoom{notifier: n, maxBackoff: opts.MaxBackoff, logger: opts.Logger,
		queues: make(map[string][]*waiter), notified: make(map[string]int), retries: make(map[string]int)}
}

// notifyPollFactor stretches the head's polling while notifications arrive:
// they announce releases, so polling only has to catch what they cannot
// (expiry of a crashed holder's lease, a notification lost in a reconnect).
const notifyPollFactor = 10

// wait calls try until it returns anything but ErrLocked, or ctx ends. try
// also reports how long the holder's lease has left, or a negative duration
// when that is unknown.
func (r *waitRoom) wait(ctx context.Context, name string, try func() (*Lock, time.Duration, error)) (*Lock, error) {
	lock, left, err := try()
	if !errors.Is(err, ErrLocked) {
		return lock, err
	}
	w := r.join(name)
	defer r.leave(name, w)
	backoff := minBackoff
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	select {
	case <-w.turn:
	default: // others wait ahead: when our turn comes, the lock has changed hands
		select {
		case <-w.turn:
		case <-ctx.Done():
			return nil, fmt.Errorf("sqllock: acquire %q: %w", name, ctx.Err())
		}
		if lock, left, err = try(); !errors.Is(err, ErrLocked) {
			return lock, err
		}
	}
	for {
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, r.maxBackoff)
		if r.listening() {
			wait = notifyPollFactor * r.maxBackoff
		}
		if left >= 0 && left < wait {
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
			return nil, fmt.Errorf("sqllock: acquire %q: %w", name, ctx.Err())
		case <-timer.C:
		case <-w.wake:
			timer.Stop()
			backoff = minBackoff
		}
		lock, left, err = try()
		if !errors.Is(err, ErrLocked) {
			return lock, err
		}
		r.mu.Lock()
		r.retries[name]++
		r.mu.Unlock()
	}
}

// join queues a waiter for name; the first in line is the head at once.
func (r *waitRoom) join(name string) *waiter {
	w := &waiter{turn: make(chan struct{}), wake: make(chan struct{}, 1)}
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queues[name]
	if len(q) == 0 {
		close(w.turn)
	}
	r.queues[name] = append(q, w)
	if r.notifier != nil && r.listen == nil {
		ctx, cancel := context.WithCancel(context.Background())
		r.listen = cancel
		r.gen++
		go r.listenLoop(ctx, r.gen)
	}
	return w
}

// leave takes w out of name's queue, handing the turn on if w was the head,
// and stops the listener when nobody waits any more.
func (r *waitRoom) leave(name string, w *waiter) {
	r.mu.Lock()
	q := r.queues[name]
	for i, x := range q {
		if x != w {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		if i == 0 && len(q) > 0 {
			close(q[0].turn)
		}
		break
	}
	if len(q) == 0 {
		delete(r.queues, name)
	} else {
		r.queues[name] = q
	}
	if len(r.queues) == 0 && r.listen != nil {
		// The listener winds down on its own; a new waiter starts another.
		r.listen()
		r.listen, r.up = nil, false
	}
	r.mu.Unlock()
}

// kick wakes the head of name's queue, if any.
func (r *waitRoom) kick(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kickLocked(name)
}

func (r *waitRoom) kickLocked(name string) {
	if q := r.queues[name]; len(q) > 0 {
		select {
		case q[0].wake <- struct{}{}:
		default:
		}
	}
}

func (r *waitRoom) listening() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.up
}

// listenLoop keeps a listening connection while ctx lasts, reconnecting
// after failures with a growing pause; while it is down, heads poll at the
// normal pace.
func (r *waitRoom) listenLoop(ctx context.Context, gen int) {
	pause := 50 * time.Millisecond
	for {
		err := r.notifier.Listen(ctx,
			func() {
				r.mu.Lock()
				defer r.mu.Unlock()
				if r.gen != gen || ctx.Err() != nil {
					return
				}
				r.up = true
				r.connects++
				// Releases before LISTEN took effect were not announced.
				for name := range r.queues {
					r.kickLocked(name)
				}
			},
			func(name string) {
				r.mu.Lock()
				defer r.mu.Unlock()
				if _, ok := r.queues[name]; ok {
					r.notified[name]++
					r.kickLocked(name)
				}
			})
		r.mu.Lock()
		if r.gen == gen {
			r.up = false
		}
		r.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		r.logger.Warn("sqllock: lost the listening connection; waiters poll until it is back", "err", err, "retry_in", pause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}
