package sqllock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// leaseLocker is what the lease-based strategies (Table, Optimistic) share:
// owner identities, the process's leases on one lease table (renewal, trust
// window, loss, release, guard, batching) and the waiting room. A strategy
// supplies only its acquisition attempt.
type leaseLocker struct {
	table  dialect.LeaseTable
	opts   config
	owners *ownerSource
	leases *leases
	room   *waitRoom
	ev     *events
	// strategy makes the primitive's acquisition attempts.
	strategy strategy
}

// strategy is what a lease-based primitive adds to the shared machinery:
// its acquisition attempt.
type strategy interface {
	// tryOnce makes one acquisition attempt for owner, by statements sent
	// from start on. A refusal is ErrLocked, with how long the holder's
	// lease has left (negative: unknown). waiting says the caller will
	// wait for the lock (Acquire) rather than give up (TryAcquire).
	tryOnce(ctx context.Context, name, owner string, waiting bool) (token int64, start time.Time, left time.Duration, err error)
}

// init sets the locker up on table, of strategy on d. notifier announces
// the releases that wake waiters; nil: they poll.
func (l *leaseLocker) init(strategy string, d dialect.Dialect, table dialect.LeaseTable, notifier dialect.Notifier, opts config) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	l.table, l.opts, l.owners = table, opts, newOwnerSource()
	l.ev = newEvents(strategy, d, opts.Logger, opts.Observer)
	l.leases = newLeases(table, opts)
	l.leases.ev, l.leases.batch.ev = l.ev, l.ev
	l.room = newWaitRoom(notifier, opts)
	l.room.ev = l.ev
	l.leases.freed = l.room.kick
	return nil
}

// TryAcquire acquires name if it is free, expired, or held by the owner on
// ctx (see WithOwner); otherwise it returns ErrLocked at once.
func (l *leaseLocker) TryAcquire(ctx context.Context, name string) (*Lock, error) {
	owner, err := l.prepare(ctx, name)
	if err != nil {
		return nil, err
	}
	tctx, call := l.ev.startAcquire(ctx, name, false, false)
	lock, _, err := l.attempt(ctx, tctx, name, owner, false)
	l.ev.endAcquire(tctx, call, lock, err)
	return lock, err
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
	tctx, call := l.ev.startAcquire(ctx, name, true, false)
	lock, err := l.room.wait(tctx, name, func() (*Lock, time.Duration, error) {
		return l.attempt(ctx, tctx, name, owner, true)
	})
	l.ev.endAcquire(tctx, call, lock, err)
	return lock, err
}

// List returns the currently held locks (including expired leases not yet
// taken over), ordered by name, with times from the database clock.
func (l *leaseLocker) List(ctx context.Context) ([]LockInfo, error) {
	return l.table.List(ctx)
}

func (l *leaseLocker) prepare(ctx context.Context, name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	return l.owners.owner(ctx)
}

// attempt makes one attempt, by statements run with tctx, and turns a grant
// into a held lease, whose context derives from ctx.
func (l *leaseLocker) attempt(ctx, tctx context.Context, name, owner string, waiting bool) (*Lock, time.Duration, error) {
	token, start, left, err := l.strategy.tryOnce(tctx, name, owner, waiting)
	if err != nil {
		return nil, left, err
	}
	return l.leases.grant(ctx, name, owner, token, start), 0, nil
}

// acquireError describes a failed acquire statement, joining ctx's error
// when ctx ended meanwhile.
func acquireError(ctx context.Context, name string, err error) error {
	if ctx.Err() != nil {
		err = errors.Join(ctx.Err(), err)
	}
	return fmt.Errorf("sqllock: acquire %q: %w", name, err)
}
