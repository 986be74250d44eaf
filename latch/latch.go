package latch

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// MaxCount is the largest count Latch.Create accepts: counts are 32-bit
// on every database's statements.
const MaxCount = math.MaxInt32

// Errors of latch operations. Test for them with errors.Is.
var (
	// ErrCountMismatch means Create asked for another count than the
	// one the latch was created with.
	ErrCountMismatch = errors.New("sqllock: latch exists with another count")
	// ErrNotFound means an operation named a latch that was never
	// created, or was deleted.
	ErrNotFound = errors.New("sqllock: latch not found")
)

// Options configure New. The zero value of each field selects
// its default.
type Options struct {
	// MaxBackoff caps the wait between two reads of a latch's count in
	// Wait: where the database announces nothing (MySQL, MariaDB, SQLite),
	// or while the listening connection is down, Wait reads the count at
	// least this often. Default 500ms; at least 1ms.
	MaxBackoff time.Duration
}

// Latch is a countdown latch per name, in the database's latch table: a
// latch is created once with a count (Create), every CountDown takes one
// from it, never below 0, and Wait returns once the count is 0. It lets
// waiters in any process wait until N workers, in any processes, have
// finished a phase (as Redisson's RCountDownLatch and Curator's shared
// count do).
//
// A latch keeps the count it was created with: Create with the same count
// again does nothing (whatever the count left, so that every worker may
// call it), and Create with another count fails with an error wrapping
// ErrCountMismatch, even once the count has reached 0. A latch that
// reached 0 stays open, its waiters returning at once, until Delete
// removes it; to use the name again, Delete it and Create it anew.
// CountDown, Count and Wait on a name without a latch fail with an error
// wrapping ErrNotFound.
//
// Waiters are woken, not left to poll: on PostgreSQL the count-down that
// leaves 0 is announced with NOTIFY and wakes every waiting process at
// once; count-downs by the same Latch wake its own waiters on every
// database. Where the database announces nothing (MySQL, MariaDB,
// SQLite), and while PostgreSQL's listening connection is down, waiters
// also read the count with a jittered backoff up to MaxBackoff. TiDB's
// dialect has no latches.
//
// A Latch is safe for concurrent use.
type Latch struct {
	latches    sqlrun.LatchTable
	notifier   dialect.Notifier // nil: count-downs are not announced
	maxBackoff time.Duration

	mu     sync.Mutex
	opened chan struct{} // closed and replaced when a CountDown of this Latch leaves 0
}

// New returns the latches of d. The schema must have been migrated
// (see sqllock.Migrate). A dialect without latches is sqllock.ErrUnsupported (see
// dialect.Catalogue); a MaxBackoff below 0, or between 0 and 1ms, is
// sqllock.ErrInvalidOptions.
func New(d dialect.Dialect, opts Options) (*Latch, error) {
	if d == nil || d.DB() == nil {
		return nil, sqllock.ErrNilDB
	}
	tb, err := sqlrun.Open(d)
	if err != nil {
		return nil, err
	}
	cat := d.Catalogue()
	if opts.MaxBackoff < 0 || (opts.MaxBackoff > 0 && opts.MaxBackoff < time.Millisecond) {
		return nil, fmt.Errorf("%w: latch MaxBackoff %v: want 0 (default) or at least 1ms", sqllock.ErrInvalidOptions, opts.MaxBackoff)
	}
	if tb.Latches == nil {
		return nil, cat.Unsupported(d.Name(), "Latches")
	}
	l := &Latch{latches: tb.Latches, maxBackoff: opts.MaxBackoff, opened: make(chan struct{})}
	if l.maxBackoff == 0 {
		l.maxBackoff = 500 * time.Millisecond
	}
	if tb.Latches.Announces() {
		l.notifier = cat.Notifier
	}
	return l, nil
}

// Create creates the latch name with count, from 1 to MaxCount. If
// the latch exists with the same count it does nothing; with another
// count it returns an error wrapping ErrCountMismatch. A bad name
// wraps sqllock.ErrInvalidName, a bad count sqllock.ErrInvalidOptions.
func (l *Latch) Create(ctx context.Context, name string, count int) error {
	if err := sqllock.ValidateName(name); err != nil {
		return err
	}
	if count < 1 || count > MaxCount {
		return fmt.Errorf("%w: latch count %d: want 1 to %d (MaxCount)", sqllock.ErrInvalidOptions, count, MaxCount)
	}
	initial, err := l.latches.Create(ctx, name, count)
	switch {
	case err != nil:
		return err
	case initial < 0: // deleted between the two statements
		return fmt.Errorf("latch %q: %w", name, ErrNotFound)
	case initial != count:
		return fmt.Errorf("%w: latch %q was created with %d, not %d", ErrCountMismatch, name, initial, count)
	}
	return nil
}

// CountDown takes one from the count of the latch name, unless it is 0
// already (then it does nothing), and returns the count it left (0 when
// it did nothing). Of the count-downs of a latch created with N, exactly
// N take one, and the one that leaves 0 wakes the latch's waiters. A name without a
// latch is an error wrapping ErrNotFound.
func (l *Latch) CountDown(ctx context.Context, name string) (int, error) {
	if err := sqllock.ValidateName(name); err != nil {
		return 0, err
	}
	took, left, err := l.latches.CountDown(ctx, name)
	if err != nil {
		return 0, err
	}
	if left < 0 {
		return 0, fmt.Errorf("latch %q: %w", name, ErrNotFound)
	}
	if took && left == 0 {
		l.mu.Lock()
		close(l.opened)
		l.opened = make(chan struct{})
		l.mu.Unlock()
	}
	return left, nil
}

// Count returns the count left of the latch name. A name without a latch
// is an error wrapping ErrNotFound.
func (l *Latch) Count(ctx context.Context, name string) (int, error) {
	if err := sqllock.ValidateName(name); err != nil {
		return 0, err
	}
	n, err := l.latches.Count(ctx, name)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("latch %q: %w", name, ErrNotFound)
	}
	return n, nil
}

// Delete deletes the latch name and reports whether it existed. Waiters
// of a deleted latch return an error wrapping ErrNotFound when they
// next read its count.
func (l *Latch) Delete(ctx context.Context, name string) (bool, error) {
	if err := sqllock.ValidateName(name); err != nil {
		return false, err
	}
	return l.latches.Delete(ctx, name)
}

// Wait returns once the count of the latch name is 0 (at once if it is).
// It fails with an error wrapping ErrNotFound when the name has no
// latch (or it is deleted while Wait waits), and with one wrapping
// ctx.Err() when ctx ends first.
func (l *Latch) Wait(ctx context.Context, name string) error {
	if err := sqllock.ValidateName(name); err != nil {
		return err
	}
	w := &latchWaiter{name: name, wake: make(chan struct{}, 1)}
	if l.notifier != nil {
		sub := l.notifier.Subscribe(w)
		defer sub.Unsubscribe()
		sub.Watch(name)
	}
	backoff := time.Millisecond
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// Take the channel before the read: a count-down that leaves 0
		// after the read closes it.
		l.mu.Lock()
		opened := l.opened
		l.mu.Unlock()
		n, err := l.Count(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("latch %q: %w", name, ctx.Err())
			}
			return err
		}
		if n == 0 {
			return nil
		}
		backoff = min(2*backoff, l.maxBackoff)
		timer.Reset(backoff/2 + rand.N(backoff/2+1)) // discards a stale expiry (Go 1.23 timers)
		select {
		case <-ctx.Done():
			return fmt.Errorf("latch %q: %w", name, ctx.Err())
		case <-opened:
		case <-w.wake:
		case <-timer.C:
		}
	}
}

// latchWaiter is one Wait call: a dialect.Subscriber that wakes it on
// announcements of its name, and when a listening connection becomes
// ready (a count-down may have gone by unannounced).
type latchWaiter struct {
	name string
	wake chan struct{} // buffered 1: a pending wake-up
}

func (w *latchWaiter) kick() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Ready implements dialect.Subscriber.
func (w *latchWaiter) Ready() { w.kick() }

// Released implements dialect.Subscriber.
func (w *latchWaiter) Released(name string) {
	if name == w.name {
		w.kick()
	}
}

// Lost implements dialect.Subscriber: Wait reads the count at its
// backoff until the next Ready.
func (w *latchWaiter) Lost(error) {}
