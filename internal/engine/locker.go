package engine

import (
	"context"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// Locker is what the lease-based primitives share: the process's leases on
// one lease table (renewal, trust window, loss, release, guard, batching),
// the waiting room and the events. A primitive supplies its acquisition
// attempt (Strategy) and the owner of each call.
type Locker struct {
	Opts   Config
	Leases *Leases
	Room   *Room
	Events *Events
	// Strategy makes the primitive's acquisition attempts.
	Strategy Strategy

	table sqlrun.LeaseTable
}

// Strategy is what a lease-based primitive adds to the shared machinery:
// its acquisition attempt.
type Strategy interface {
	// TryOnce makes one acquisition attempt for owner, by statements sent
	// from start on. A refusal is dialect.ErrLocked, with how long the
	// holder's lease has left (negative: unknown). waiting says the caller
	// will wait for the lock (Acquire) rather than give up (TryAcquire).
	TryOnce(ctx context.Context, name, owner string, waiting bool) (token int64, start time.Time, left time.Duration, err error)
}

// Grant is a hold granted by the database: its lease, and whether the
// grant re-entered a lease this process held already. The zero Grant is
// none.
type Grant struct {
	Lease     *Lease
	Reentered bool
}

// Init sets the locker up on table, of strategy on d. notifier announces
// the releases that wake waiters; nil: they poll.
func (l *Locker) Init(strategy string, d dialect.Dialect, table sqlrun.LeaseTable, notifier dialect.Notifier, opts Config) error {
	opts, err := opts.WithDefaults()
	if err != nil {
		return err
	}
	l.table, l.Opts = table, opts
	l.Events = NewEvents(strategy, d, opts.Logger, opts.Observer)
	l.Leases = NewLeases(table, opts)
	l.Leases.ev, l.Leases.batch.ev = l.Events, l.Events
	l.Room = NewRoom(notifier, opts)
	l.Room.ev = l.Events
	l.Leases.freed = l.Room.Kick
	return nil
}

// TryAcquire makes one attempt to acquire name for owner.
func (l *Locker) TryAcquire(ctx context.Context, name, owner string) (Grant, error) {
	tctx, call := l.Events.StartAcquire(ctx, name, false, false)
	g, _, err := l.Attempt(ctx, tctx, name, owner, false)
	l.Events.EndAcquire(tctx, call, g.held(), err)
	return g, err
}

// Acquire acquires name for owner, waiting in the room while another
// owner holds it.
func (l *Locker) Acquire(ctx context.Context, name, owner string) (Grant, error) {
	tctx, call := l.Events.StartAcquire(ctx, name, true, false)
	g, err := l.Room.Wait(tctx, name, func() (Grant, time.Duration, error) {
		return l.Attempt(ctx, tctx, name, owner, true)
	})
	l.Events.EndAcquire(tctx, call, g.held(), err)
	return g, err
}

// List returns the leases of the locker's table.
func (l *Locker) List(ctx context.Context) ([]dialect.LockInfo, error) {
	return l.table.List(ctx)
}

// Attempt makes one attempt, by statements run with tctx, and turns a
// grant into a held lease, whose context derives from ctx.
func (l *Locker) Attempt(ctx, tctx context.Context, name, owner string, waiting bool) (Grant, time.Duration, error) {
	token, start, left, err := l.Strategy.TryOnce(tctx, name, owner, waiting)
	if err != nil {
		return Grant{}, left, err
	}
	return l.Leases.Grant(ctx, name, owner, token, start), 0, nil
}
