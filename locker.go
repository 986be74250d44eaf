package sqllock

import (
	"context"
	"database/sql"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/engine"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// leaseLocker is what the lease-based strategies (Table, Optimistic) share:
// owner identities, and the lease engine (package internal/engine): the
// process's leases on one lease table (renewal, trust window, loss,
// release, guard, batching) and the waiting room. A strategy supplies only
// its acquisition attempt.
type leaseLocker struct {
	eng    engine.Locker
	owners *ownerSource
	try    engine.Strategy // the strategy's attempt (see attempts), set by its constructor
	// values keeps the values holders set on their leases (Lock.SetValue):
	// the lock table's, where the dialect keeps them; nil elsewhere.
	values sqlrun.LockValues
}

// strategy is what a lease-based primitive adds to the shared machinery:
// its acquisition attempt (see engine.Strategy).
type strategy interface {
	tryOnce(ctx context.Context, name, owner string, waiting bool) (token int64, start time.Time, left time.Duration, err error)
}

// attempts is a strategy as the engine calls it: TryOnce stays out of the
// primitives' method sets.
type attempts struct{ s strategy }

func (a attempts) TryOnce(ctx context.Context, name, owner string, waiting bool) (int64, time.Time, time.Duration, error) {
	return a.s.tryOnce(ctx, name, owner, waiting)
}

// init sets the locker up on table, of strategy on d. notifier announces
// the releases that wake waiters; nil: they poll.
func (l *leaseLocker) init(strategy string, d dialect.Dialect, table sqlrun.LeaseTable, notifier dialect.Notifier, opts engine.Config) error {
	opts.Lost, opts.NotHeld = ErrLockLost, ErrNotHeld
	if err := l.eng.Init(strategy, d, table, notifier, opts); err != nil {
		return err
	}
	l.owners = newOwnerSource()
	return nil
}

// TryAcquire acquires name if it is free, expired, or held by the owner on
// ctx (see WithOwner); otherwise it returns ErrLocked at once.
func (l *leaseLocker) TryAcquire(ctx context.Context, name string) (*Lock, error) {
	owner, err := l.prepare(ctx, name)
	if err != nil {
		return nil, err
	}
	g, err := l.eng.Acquire(ctx, engine.Call{Name: name, Owner: owner, Try: l.try})
	return l.lockOf(g), err
}

// Acquire acquires name, waiting while another owner holds it. Waiting
// calls of one locker line up per name, and only the first of them asks the
// database, holding no connection in between: it retries when this locker
// releases the lock, when the database announces a release (PostgreSQL
// LISTEN/NOTIFY, for the lock table), when the holder's lease ends, or after
// a jittered, exponentially growing backoff capped at MaxBackoff
// (while notifications arrive, only when the lease ends). When ctx ends
// first it returns an error wrapping ctx.Err().
func (l *leaseLocker) Acquire(ctx context.Context, name string) (*Lock, error) {
	owner, err := l.prepare(ctx, name)
	if err != nil {
		return nil, err
	}
	g, err := l.eng.Acquire(ctx, engine.Call{Name: name, Owner: owner, Try: l.try, Wait: true})
	return l.lockOf(g), err
}

// List returns the currently held locks (including expired leases not yet
// taken over), ordered by name, with times from the database clock.
func (l *leaseLocker) List(ctx context.Context) ([]LockInfo, error) {
	return l.eng.List(ctx)
}

func (l *leaseLocker) prepare(ctx context.Context, name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	return l.owners.owner(ctx)
}

// lockOf returns the handle of the hold g, nil if there is none.
func (l *leaseLocker) lockOf(g engine.Grant) *Lock {
	if g.Lease == nil {
		return nil
	}
	return &Lock{h: leaseHold{g.Lease}, reentered: g.Reentered, values: l.values}
}

// leaseHold is a lease as a Lock holds it.
type leaseHold struct{ *engine.Lease }

func (leaseHold) Tx() *sql.Tx { return nil }

func (h leaseHold) ReleaseHold(ctx context.Context, _ bool) error { return h.Lease.ReleaseHold(ctx) }

// held describes lock for the events of its acquire call.
func held(lock *Lock) engine.Held {
	if lock == nil {
		return engine.Held{}
	}
	return engine.Held{OK: true, Ref: lock.h.Ident(), Reentered: lock.reentered}
}

// acquireFair is Acquire for a locker whose waiters take tickets of f.
func (l *leaseLocker) acquireFair(ctx context.Context, f *fairQueue, name string) (*Lock, error) {
	owner, err := l.prepare(ctx, name)
	if err != nil {
		return nil, err
	}
	w := &fairWaiter{f: f, name: name, owner: owner, logger: l.eng.Config().Logger}
	g, err := l.eng.Acquire(ctx, engine.Call{Name: name, Owner: owner, Try: w, Wait: true, Queue: w})
	return l.lockOf(g), err
}
