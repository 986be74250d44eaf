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

// noMinHold: read/write locks keep no minimum hold (see TryDoBounded).
func (*RWLock) noMinHold() {}

// NewRWLock returns a read/write locker on d. The schema must have been
// migrated (see Migrate). It returns an error wrapping ErrUnsupported for a
// dialect without read/write locks (TiDB).
func NewRWLock(d dialect.Dialect, opts LeaseOptions) (*RWLock, error) {
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
	if err := l.init(observe.StrategyRWLock, d, rw, notifier, opts.config(0, false)); err != nil {
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
	c := engine.Call{Name: name, Owner: owner, Try: rwWriter{l}, Wait: wait, Shared: shared}
	if shared {
		c.Try = rwReader{l}
	} else if wait {
		// A writer that gives up withdraws its intent: also when no
		// attempt told it of one, as the attempt that recorded it may
		// have been cut short before its reply (a cancelled context).
		// Without an intent the statement changes nothing.
		c.GaveUp = func() {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
			defer cancel()
			if werr := l.rw.Withdraw(wctx, name, owner); werr != nil {
				l.eng.Config().Logger.WarnContext(ctx, "sqllock: could not withdraw a waiting writer's intent; it ends with its TTL",
					"name", name, "err", werr)
			}
		}
	}
	g, err := l.eng.Acquire(ctx, c)
	return l.lockOf(g), err
}

// rwWriter and rwReader are the attempts of an RWLock's two sides.
type (
	rwWriter struct{ l *RWLock }
	rwReader struct{ l *RWLock }
)

// TryOnce implements engine.Strategy for the write side.
func (s rwWriter) TryOnce(ctx context.Context, name, owner string, waiting bool) (int64, time.Time, time.Duration, error) {
	return s.l.attemptSide(ctx, name, owner, false, waiting)
}

// TryOnce implements engine.Strategy for the read side.
func (s rwReader) TryOnce(ctx context.Context, name, owner string, waiting bool) (int64, time.Time, time.Duration, error) {
	return s.l.attemptSide(ctx, name, owner, true, waiting)
}

// attemptSide makes one attempt at a side. A refusal reports how long the
// leases in the way have left; a waiting writer's is capped at
// RenewInterval, so that it refreshes its intent in time.
func (l *RWLock) attemptSide(ctx context.Context, name, owner string, shared, waiting bool) (int64, time.Time, time.Duration, error) {
	cfg := l.eng.Config()
	p := dialect.RWAcquireParams{Name: name, Owner: owner, TTL: cfg.TTL, Shared: shared, Wait: waiting}
	for n := 0; ; n++ {
		start := time.Now()
		g, err := l.rw.Acquire(ctx, p)
		switch {
		case errors.Is(err, ErrTransient) && n < maxTransientRetries:
			continue
		case err != nil:
			return 0, start, 0, acquireError(ctx, name, err)
		case g.Upgrade:
			return 0, start, 0, fmt.Errorf("%w: the owner holds the read side of %q", ErrUpgrade, name)
		case g.Token != 0:
			return g.Token, start, 0, nil
		case !waiting:
			return 0, start, -1, ErrLocked
		}
		left := g.Left
		if !shared {
			left = min(left, cfg.RenewInterval)
		}
		if g.Marked {
			// A release racing with the first mark may go unannounced.
			left = min(left, cfg.MaxBackoff)
		}
		return 0, start, left, ErrLocked
	}
}
