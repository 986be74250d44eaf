package engine

import (
	"context"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// Locker is what the lease-based primitives share: the process's leases on
// one lease table (renewal, trust window, loss, release, guard, batching),
// the waiting room and the events. A primitive hands each call its
// acquisition attempt (Strategy) and its owner (Call); it reaches none of
// the parts, which are the Locker's.
type Locker struct {
	cfg    Config
	leases *Leases
	room   *Room
	events *Events
	table  sqlrun.LeaseTable
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

// Call is one acquire call: what it asks for, and how its attempts are
// made.
type Call struct {
	Name, Owner string
	// Try makes the call's attempts.
	Try Strategy
	// Wait waits in the room while the attempts are refused (Acquire);
	// otherwise one attempt decides (TryAcquire).
	Wait bool
	// Shared waits in the readers' line of Name (a read/write lock's read
	// side), and events report the call as shared.
	Shared bool
	// Queue, for a waiting call, takes its place in the database's queue
	// (see Room.WaitQueued); nil: none.
	Queue Queue
	// GaveUp, if set, runs when a waiting call fails, before the call's
	// events end (a waiting writer withdraws its intent).
	GaveUp func()
}

// Grant is a hold granted by the database: its lease, and whether the
// grant re-entered a lease this process held already. The zero Grant is
// none.
type Grant struct {
	Lease     *Lease
	Reentered bool
}

// Init sets the locker up on table, of strategy on d, with cfg (defaulted
// and checked: see Config.WithDefaults). notifier announces the releases
// that wake waiters; nil: they poll.
func (l *Locker) Init(strategy string, d dialect.Dialect, table sqlrun.LeaseTable, notifier dialect.Notifier, cfg Config) error {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return err
	}
	l.table, l.cfg = table, cfg
	l.events = NewEvents(strategy, d, cfg.Logger, cfg.Observer)
	l.leases = NewLeases(table, cfg)
	l.leases.ev, l.leases.batch.ev = l.events, l.events
	l.room = NewRoom(notifier, cfg)
	l.room.ev = l.events
	l.leases.freed = l.room.Kick
	return nil
}

// Config returns the locker's configuration, defaults filled in.
func (l *Locker) Config() Config { return l.cfg }

// Acquire makes the call c: one attempt, or attempts until one is granted
// or ctx ends for a waiting call, between its acquire events.
func (l *Locker) Acquire(ctx context.Context, c Call) (Grant, error) {
	tctx, call := l.events.StartAcquire(ctx, c.Name, c.Wait, c.Shared)
	try := func() (Grant, time.Duration, error) { return l.attempt(ctx, tctx, c) }
	var (
		g   Grant
		err error
	)
	if !c.Wait {
		g, _, err = try()
	} else {
		g, err = l.room.waitQueued(tctx, line{name: c.Name, shared: c.Shared}, c.Queue, try)
		if err != nil && c.GaveUp != nil {
			c.GaveUp()
		}
	}
	l.events.EndAcquire(tctx, call, g.held(), err)
	return g, err
}

// attempt makes one attempt of c, by statements run with tctx, and turns a
// grant into a held lease, whose context derives from ctx.
func (l *Locker) attempt(ctx, tctx context.Context, c Call) (Grant, time.Duration, error) {
	token, start, left, err := c.Try.TryOnce(tctx, c.Name, c.Owner, c.Wait)
	if err != nil {
		return Grant{}, left, err
	}
	return l.leases.Grant(ctx, c.Name, c.Owner, token, start), 0, nil
}

// Wait waits in the room's line of name, as a waiting Acquire does, for
// attempts that try makes itself (a lock set's, which grant several
// leases at once, by Grant).
func (l *Locker) Wait(ctx context.Context, name string, try func() (Grant, time.Duration, error)) (Grant, error) {
	return l.room.Wait(ctx, name, try)
}

// WaitUpgrade waits in the room's upgrade line of name, for attempts
// that try makes itself: a read/write lock's upgrade, whose holder keeps
// the writers of the name out (see line).
func (l *Locker) WaitUpgrade(ctx context.Context, name string, try func() (Grant, time.Duration, error)) (Grant, error) {
	return l.room.WaitUpgrade(ctx, name, try)
}

// Grant turns a token granted to owner for name, by a statement sent at
// start, into a held lease (see Leases.Grant).
func (l *Locker) Grant(ctx context.Context, name, owner string, token int64, start time.Time) Grant {
	return l.leases.Grant(ctx, name, owner, token, start)
}

// UseTickets sets how the waiting room finds the name one of this
// locker's tickets waits for (see Room.SetTickets); call it before the
// locker is used.
func (l *Locker) UseTickets(tickets func(id int64) (name string, ok bool)) {
	l.room.SetTickets(tickets)
}

// List returns the leases of the locker's table.
func (l *Locker) List(ctx context.Context) ([]dialect.LockInfo, error) {
	return l.table.List(ctx)
}

// Broken reports the lease info ended by a break, and wakes this locker's
// waiters of its name.
func (l *Locker) Broken(ctx context.Context, info dialect.LockInfo) {
	l.room.Kick(info.Name)
	l.events.Broken(ctx, info)
}

// AcquiredInSet reports a lock of a set of n, acquired after wait.
func (l *Locker) AcquiredInSet(ctx context.Context, ref dialect.Lease, reentered bool, wait time.Duration, n int) {
	l.events.AcquiredInSet(ctx, ref, reentered, wait, n)
}

// Dialect returns the name of the locker's dialect.
func (l *Locker) Dialect() string { return l.events.Dialect() }

// SetHooks sets the waiting room's test hooks (see Room.SetHooks).
func (l *Locker) SetHooks(h *Hooks) { l.room.SetHooks(h) }

// State reports whether notifications reach the waiting room, and how
// many calls wait for name.
func (l *Locker) State(name string) (listening bool, waiting int) { return l.room.State(name) }

// Kick wakes this locker's waiters of name, as a release through it does:
// something that may let them in (a semaphore's raised limit) committed.
func (l *Locker) Kick(name string) { l.room.Kick(name) }
