package sqllock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/engine"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/observe"
)

// RWLock is a read/write lock: per name, any number of readers share the
// read side, or one writer holds the write side, never both. Every holder,
// reader or writer, has a lease of its own (owner, fencing token, TTL on
// the database clock), renewed in the background in batches, lost and
// reported like a Table lock's (see Lock), and usable with Lock.Guard. A
// crashed holder's lease ends with its TTL.
//
// Acquire and TryAcquire take the write side, so an RWLock is a Locker (it
// works with Do and TryDo); AcquireShared and TryAcquireShared take the
// read side.
//
// Writers are preferred: a writer waiting in Acquire records an intent to
// write, which keeps new readers out (they wait, or TryAcquireShared
// refuses them) until the writer has had its turn, so that a stream of
// readers cannot starve writers. The intent lasts TTL; the waiting writer
// refreshes it at least every RenewInterval and withdraws it when it
// gives up (its context ends), and a crashed writer's intent ends with its
// TTL. Only the readers already in finish first. TryAcquire records no
// intent.
//
// Fencing tokens grow per name in grant order, readers' and writers'
// alike: a writer's token exceeds every token granted for the name
// before it, and readers' tokens grow too. Readers holding the read side
// together have distinct tokens.
//
// Re-entry (with WithOwner): an owner holding the read side re-enters it
// with AcquireShared (same token, one more hold), even while a writer
// waits; an owner holding the write side re-enters it with Acquire, and
// also with AcquireShared, which adds a hold to its write lease (the
// handle's Token is the writer's). An owner holding the read side gets
// ErrUpgrade from Acquire and TryAcquire, at once: upgrading is not
// offered, since two readers upgrading at once would each wait for the
// other forever. Downgrading is not offered either: release the write
// side and take the read side (another writer may come in between).
//
// Acquire waits as a Table's does; releases (and withdrawn intents) of
// names someone waits for are announced, on PostgreSQL with LISTEN/NOTIFY
// and on MySQL and MariaDB by the waiting processes' bells, and on SQLite
// through the sockets beside the database file, as for a Table (where
// none can be bound, waiters poll, every MaxBackoff at the most). MinHold
// is not supported. List returns the
// holders' leases, readers' and writers' alike, ordered by name. An RWLock
// is safe for concurrent use.
type RWLock struct {
	leaseLocker
	rw sqlrun.RWLockTable
}

var _ Locker = (*RWLock)(nil)

// NewRWLock returns a read/write locker on d. The schema must have been
// migrated (see Migrate). It returns an error wrapping ErrUnsupported for a
// dialect without read/write locks (TiDB).
func NewRWLock(d dialect.Dialect, opts RWLockOptions) (*RWLock, error) {
	cat, tb, err := open(d)
	if err != nil {
		return nil, err
	}
	rw := tb.RWLocks
	if rw == nil {
		return nil, cat.Unsupported(d.Name(), "RWLocks")
	}
	l := &RWLock{rw: rw}
	var notifier dialect.Notifier
	if rw.Announces() {
		notifier = cat.Notifier
	}
	if err := l.init(observe.StrategyRWLock, d, rw, notifier, opts.config()); err != nil {
		return nil, err
	}
	return l, nil
}

// Acquire takes the write side of name, waiting while others hold either
// side, and keeping new readers out meanwhile (see RWLock). When ctx ends
// first it returns an error wrapping ctx.Err().
func (l *RWLock) Acquire(ctx context.Context, name string) (*Lock, error) {
	return l.acquire(ctx, name, false, true)
}

// TryAcquire takes the write side of name if nobody else holds either
// side; otherwise it returns ErrLocked at once.
func (l *RWLock) TryAcquire(ctx context.Context, name string) (*Lock, error) {
	return l.acquire(ctx, name, false, false)
}

// AcquireShared takes the read side of name, waiting while a writer holds
// it or waits for it. When ctx ends first it returns an error wrapping
// ctx.Err().
func (l *RWLock) AcquireShared(ctx context.Context, name string) (*Lock, error) {
	return l.acquire(ctx, name, true, true)
}

// TryAcquireShared takes the read side of name unless a writer holds it
// or waits for it; then it returns ErrLocked at once.
func (l *RWLock) TryAcquireShared(ctx context.Context, name string) (*Lock, error) {
	return l.acquire(ctx, name, true, false)
}

// withdrawTimeout bounds the withdrawal of a writer's intent after its
// Acquire gave up.
const withdrawTimeout = 5 * time.Second

func (l *RWLock) acquire(ctx context.Context, name string, shared, wait bool) (*Lock, error) {
	owner, err := l.prepare(ctx, name)
	if err != nil {
		return nil, err
	}
	tctx, call := l.eng.Events.StartAcquire(ctx, name, wait, shared)
	var g engine.Grant
	if !wait {
		g, _, err = l.attemptSide(ctx, tctx, name, owner, shared, false)
	} else {
		try := func() (engine.Grant, time.Duration, error) {
			return l.attemptSide(ctx, tctx, name, owner, shared, true)
		}
		if shared {
			g, err = l.eng.Room.WaitShared(tctx, name, try)
		} else {
			g, err = l.eng.Room.Wait(tctx, name, try)
		}
		// A writer that gives up withdraws its intent: also when no
		// attempt told it of one, as the attempt that recorded it may
		// have been cut short before its reply (a cancelled context).
		// Without an intent the statement changes nothing.
		if err != nil && !shared {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
			if werr := l.rw.Withdraw(wctx, name, owner); werr != nil {
				l.eng.Opts.Logger.WarnContext(ctx, "sqllock: could not withdraw a waiting writer's intent; it ends with its TTL",
					"name", name, "err", werr)
			}
			cancel()
		}
	}
	lock := lockOf(g)
	l.eng.Events.EndAcquire(tctx, call, held(lock), err)
	return lock, err
}

// attemptSide makes one attempt, by statements run with tctx, and turns a grant
// into a held lease, whose context derives from ctx. A refusal reports how
// long the leases in the way have left; a waiting writer's is capped at
// RenewInterval, so that it refreshes its intent in time.
func (l *RWLock) attemptSide(ctx, tctx context.Context, name, owner string, shared, waiting bool) (engine.Grant, time.Duration, error) {
	p := dialect.RWAcquireParams{Name: name, Owner: owner, TTL: l.eng.Opts.TTL, Shared: shared, Wait: waiting}
	for n := 0; ; n++ {
		start := time.Now()
		g, err := l.rw.Acquire(tctx, p)
		switch {
		case errors.Is(err, ErrTransient) && n < maxTransientRetries:
			continue
		case err != nil:
			return engine.Grant{}, 0, acquireError(tctx, name, err)
		case g.Upgrade:
			return engine.Grant{}, 0, fmt.Errorf("%w: the owner holds the read side of %q", ErrUpgrade, name)
		case g.Token != 0:
			return l.eng.Leases.Grant(ctx, name, owner, g.Token, start), 0, nil
		case !waiting:
			return engine.Grant{}, -1, ErrLocked
		}
		left := g.Left
		if !shared {
			left = min(left, l.eng.Opts.RenewInterval)
		}
		if g.Marked {
			// A release racing with the first mark may go unannounced.
			left = min(left, l.eng.Opts.MaxBackoff)
		}
		return engine.Grant{}, left, ErrLocked
	}
}
