package sqllock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// waitRoom lines up one locker's waiting Acquire calls, per name. Only the
// head of a name's queue asks the database; the others wait their turn, in
// order of arrival, without a connection. The head sleeps until the holder's
// lease ends, a jittered backoff passes, or a wake-up arrives: a release
// through this locker, or — when the dialect is a dialect.Notifier — a
// release anywhere, announced by the database to the listening connection
// that the process keeps per dialect while anyone waits (see hub).
type waitRoom struct {
	notifier   dialect.Notifier // nil: poll only
	hubKey     any              // the hub shared with other rooms on the same notifier
	maxBackoff time.Duration
	logger     *slog.Logger

	subMu sync.Mutex // serialises subscribing and unsubscribing

	mu       sync.Mutex
	queues   map[string][]*waiter
	hub      *hub           // while subscribed
	notified map[string]int // notifications delivered to a queue, per name (tests)
	retries  map[string]int // attempts by heads after a wait, per name (tests)
}

type waiter struct {
	turn chan struct{} // closed when the waiter becomes the head
	wake chan struct{} // a wake-up for the head; buffered
}

func newWaitRoom(d dialect.Dialect, opts Options) *waitRoom {
	r := &waitRoom{maxBackoff: opts.MaxBackoff, logger: opts.Logger,
		queues: make(map[string][]*waiter), notified: make(map[string]int), retries: make(map[string]int)}
	if n, ok := d.(dialect.Notifier); ok {
		r.notifier, r.hubKey = n, any(r)
		if reflect.TypeOf(n).Comparable() {
			r.hubKey = n
		}
	}
	return r
}

// notifyPollFactor stretches the head's polling while notifications arrive
// and the holder's lease end is unknown: notifications announce releases, so
// polling only has to catch what they cannot (expiry of a crashed holder's
// lease).
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
	q := r.queues[name]
	if len(q) == 0 {
		close(w.turn)
	}
	r.queues[name] = append(q, w)
	r.mu.Unlock()
	r.reconcile()
	return w
}

// leave takes w out of name's queue, handing the turn on if w was the head.
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
	r.mu.Unlock()
	r.reconcile()
}

// reconcile subscribes the room to its hub while anyone waits, and
// unsubscribes it when nobody does.
func (r *waitRoom) reconcile() {
	if r.notifier == nil {
		return
	}
	r.subMu.Lock()
	defer r.subMu.Unlock()
	r.mu.Lock()
	want, h := len(r.queues) > 0, r.hub
	r.mu.Unlock()
	switch {
	case want && h == nil:
		h = subscribe(r)
		r.mu.Lock()
		r.hub = h
		r.mu.Unlock()
	case !want && h != nil:
		r.mu.Lock()
		r.hub = nil
		r.mu.Unlock()
		unsubscribe(r, h)
	}
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

// kickAll wakes every head: releases may have gone unannounced.
func (r *waitRoom) kickAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name := range r.queues {
		r.kickLocked(name)
	}
}

// notify delivers a notification that name was released.
func (r *waitRoom) notify(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.queues[name]; ok {
		r.notified[name]++
		r.kickLocked(name)
	}
}

// listening reports whether notifications reach this room.
func (r *waitRoom) listening() bool {
	r.mu.Lock()
	h := r.hub
	r.mu.Unlock()
	return h != nil && h.listening()
}
