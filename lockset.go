package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/engine"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// MaxLockSet is the most names one TryAcquireAll or AcquireAll call takes.
const MaxLockSet = dialect.MaxMultiAcquire

// acquired reports each lock of the set, acquired after wait, as an
// acquisition of its own (an observe.AcquiredObserver's event, a debug
// record).
func (s *LockSet) acquired(ctx context.Context, wait time.Duration) {
	for _, k := range s.sorted {
		s.eng.AcquiredInSet(ctx, k.h.Ident(), k.reentered, wait, len(s.sorted))
	}
}

// pause sleeps a little before the attempt-th retry of a rolled-back
// acquisition, so that the transactions that collided do not collide
// again; false if ctx ended.
func pause(ctx context.Context, attempt int) bool {
	d := time.Duration(1+rand.N(2*attempt)) * time.Millisecond
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// LockSet is a set of locks acquired together by Table.TryAcquireAll or
// Table.AcquireAll: one hold of each name. It is safe for concurrent use.
//
// Each lock of the set (see Locks) is an ordinary lease with its own
// fencing token, renewed in the background while held. The set's Context
// ends as soon as any of them does: when a lease is lost (cause
// ErrLockLost) or a lock of the set is released on its own (ErrNotHeld).
type LockSet struct {
	eng    *engine.Locker        // its Table's
	multi  sqlrun.MultiLockTable // its Table's sets
	locks  []*Lock               // in the order of the names asked for
	sorted []*Lock               // by name: the order of statements
	ctx    *setContext
	stops  []func() bool // stop the context's watch of each lock

	mu       sync.Mutex
	released bool
}

// Locks returns the set's locks, in the order in which their names were
// given: one per name, each with its own Token. Release the set with
// LockSet.Release rather than the locks one by one (a lock released on
// its own is skipped by the set's Release).
func (s *LockSet) Locks() []*Lock { return slices.Clone(s.locks) }

// Context returns a context that is cancelled when the set no longer
// holds every lock: with cause ErrLockLost if a lease is lost, ErrNotHeld
// once the set (or one of its locks) is released. It carries the values of
// the context the set was acquired with. Like a lock's context, its Err
// checks every lease's trust window when called.
func (s *LockSet) Context() context.Context { return s.ctx }

// Done is shorthand for Context().Done().
func (s *LockSet) Done() <-chan struct{} { return s.ctx.Done() }

// Release releases the set's hold on every lock in one statement (on
// MySQL and MariaDB, one statement per 16 locks). Each lock is released as
// Lock.Release releases it: the last hold of a name frees it (after
// MinHold), and the set's context is cancelled with ErrNotHeld.
//
// A second Release returns ErrNotHeld. If any lease of the set was lost
// meanwhile, the others are released all the same and Release returns
// ErrLockLost. If the statement fails, each lock whose last hold it was is
// given up as Lock.Release gives it up (renewal stops, the release is
// retried in the background), and the error says what happened; locks that
// other holds of their owner keep (see WithOwner) stay held by the set, and
// Release may be called again.
func (s *LockSet) Release(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return ErrNotHeld
	}
	var (
		ks   []*Lock
		ls   []*engine.Lease
		refs []dialect.Lease
		last []bool
	)
	for _, k := range s.sorted {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.released {
			continue
		}
		l := k.h.(leaseHold).Lease
		only := l.Holds() == 1
		if only {
			// Renewing while the lock is being freed would report a
			// false loss.
			l.StopRenewal()
		}
		ks, ls, refs, last = append(ks, k), append(ls, l), append(refs, l.Ident()), append(last, only)
	}
	if len(ks) > 0 {
		if err := s.releaseAll(ctx, ks, ls, refs, last); err != nil {
			return err
		}
	}
	s.released = true
	for _, stop := range s.stops {
		stop()
	}
	s.ctx.cancel(ErrNotHeld)
	return nil
}

// releaseAll releases the holds of ks (with leases ls, named refs) in the
// database, and then locally. k.mu of each is held.
func (s *LockSet) releaseAll(ctx context.Context, ks []*Lock, ls []*engine.Lease, refs []dialect.Lease, last []bool) error {
	var (
		ok  []bool
		err error
	)
	for attempt := 1; ; attempt++ {
		ok, err = s.multi.ReleaseAll(ctx, refs, s.eng.Config().MinHold)
		if !errors.Is(err, ErrTransient) || attempt > maxTransientRetries || !pause(ctx, attempt) {
			break
		}
	}
	if err != nil {
		err = fmt.Errorf("sqllock: release %d locks: %w", len(refs), err)
		abandoned := 0
		for i, l := range ls {
			if last[i] && l.Abandon(err) {
				ks[i].released = true
				abandoned++
			}
		}
		if abandoned == len(ls) {
			s.released = true
			for _, stop := range s.stops {
				stop()
			}
			s.ctx.cancel(ErrNotHeld)
			return fmt.Errorf("%w (renewal stopped: the leases end by their TTL at the latest; their releases are retried in the background)", err)
		}
		return err
	}
	var lost error
	for i, l := range ls {
		if freed := l.DropHold(!ok[i]); ok[i] {
			l.Events().Released(ctx, l.Ident(), l.Granted(), freed)
		} else {
			lost = ErrLockLost
		}
		ks[i].released = true
	}
	if lost != nil {
		s.released = true
		for _, stop := range s.stops {
			stop()
		}
		s.ctx.cancel(ErrLockLost)
	}
	return lost
}

// Guard makes the caller's transaction tx safe to commit only while the
// set holds every lock: it guards each lock in tx, in name order, as
// Lock.Guard does (one statement each), and returns the first error:
// ErrLockLost if a lease is no longer held, ErrNotHeld if the set was
// released.
func (s *LockSet) Guard(ctx context.Context, tx *sql.Tx) error {
	s.mu.Lock()
	released := s.released
	s.mu.Unlock()
	if released {
		return ErrNotHeld
	}
	for _, k := range s.sorted {
		if err := k.Guard(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

// setContext is a set's context: cancelled when any lock's context is,
// and, like a lease's, checking the trust windows when Err is called.
type setContext struct {
	context.Context
	cancel context.CancelCauseFunc
	locks  []*Lock
}

func (c *setContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	for _, k := range c.locks {
		if lctx := k.Context(); lctx.Err() != nil {
			c.cancel(context.Cause(lctx))
			break
		}
	}
	return c.Context.Err()
}
