package sqllock

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
// together have distinct tokens. A hold that changes sides keeps its
// token: a downgraded writer's is below the readers' let in after it, and
// an upgraded reader's exceeds every earlier writer's, though not those of
// the readers granted beside it (all gone when it writes).
//
// Re-entry (with WithOwner): an owner holding the read side re-enters it
// with AcquireShared (same token, one more hold), even while a writer
// waits; an owner holding the write side re-enters it with Acquire, and
// also with AcquireShared and AcquireUpgradeable, which add a hold to its
// write lease (the handle's Token is the writer's). An owner holding the
// read side gets ErrUpgrade from Acquire and TryAcquire, at once, and a
// plain reader from AcquireUpgradeable: two readers upgrading at once
// would each wait for the other forever.
//
// Changing sides: Lock.Downgrade turns a write hold into a read hold in
// one statement, so that no writer comes in between. An upgradeable read
// (AcquireUpgradeable) shares the name with plain readers but excludes
// writers and other upgradeable readers, so at most one reader of a name
// may upgrade: Lock.Upgrade waits for the other readers to leave, then
// makes the hold the writer, and two upgraders cannot deadlock.
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

// AcquireUpgradeable takes an upgradeable read of name: the read side,
// beside plain readers, while no writer and no other upgradeable reader
// holds the name and no writer waits for it; it waits (in the writers'
// line of the locker, as writers, whom it keeps out, wait) until then.
// Lock.Upgrade later makes the hold the writer. When ctx ends first it
// returns an error wrapping ctx.Err(). The owner of the write side
// re-enters its write lease; a plain reader's owner gets ErrUpgrade.
func (l *RWLock) AcquireUpgradeable(ctx context.Context, name string) (*Lock, error) {
	return l.acquireUpgradeable(ctx, name, true)
}

// TryAcquireUpgradeable takes an upgradeable read of name as
// AcquireUpgradeable does, unless a writer or another upgradeable reader
// holds the name or a writer waits for it; then it returns ErrLocked at
// once.
func (l *RWLock) TryAcquireUpgradeable(ctx context.Context, name string) (*Lock, error) {
	return l.acquireUpgradeable(ctx, name, false)
}

func (l *RWLock) acquireUpgradeable(ctx context.Context, name string, wait bool) (*Lock, error) {
	owner, err := l.prepare(ctx, name)
	if err != nil {
		return nil, err
	}
	c := engine.Call{Name: name, Owner: owner, Try: rwUpgrader{l}, Wait: wait}
	g, err := l.eng.Acquire(ctx, c)
	return l.handle(g, rwUpgradeable), err
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
	side := rwWrite
	if shared {
		side = rwRead
	}
	return l.handle(g, side), err
}

// handle returns the handle of the hold g of side, nil if there is none.
func (l *RWLock) handle(g engine.Grant, side rwSide) *Lock {
	k := l.lockOf(g)
	if k != nil {
		if g.Reentered {
			side = rwFixed
		}
		k.rw = &rwHandle{l: l, lease: g.Lease, side: side}
	}
	return k
}

// rwWriter, rwReader and rwUpgrader are the attempts of an RWLock's
// sides.
type (
	rwWriter   struct{ l *RWLock }
	rwReader   struct{ l *RWLock }
	rwUpgrader struct{ l *RWLock }
)

// TryOnce implements engine.Strategy for the write side.
func (s rwWriter) TryOnce(ctx context.Context, name, owner string, waiting bool) (int64, time.Time, time.Duration, error) {
	return s.l.attemptSide(ctx, name, owner, false, waiting)
}

// TryOnce implements engine.Strategy for the read side.
func (s rwReader) TryOnce(ctx context.Context, name, owner string, waiting bool) (int64, time.Time, time.Duration, error) {
	return s.l.attemptSide(ctx, name, owner, true, waiting)
}

// TryOnce implements engine.Strategy for upgradeable reads.
func (s rwUpgrader) TryOnce(ctx context.Context, name, owner string, waiting bool) (int64, time.Time, time.Duration, error) {
	return s.l.attempt(ctx, dialect.RWAcquireParams{Name: name, Owner: owner, Shared: true, Upgradeable: true, Wait: waiting})
}

// attemptSide makes one attempt at a side. A refusal reports how long the
// leases in the way have left; a waiting writer's is capped at
// RenewInterval, so that it refreshes its intent in time.
func (l *RWLock) attemptSide(ctx context.Context, name, owner string, shared, waiting bool) (int64, time.Time, time.Duration, error) {
	return l.attempt(ctx, dialect.RWAcquireParams{Name: name, Owner: owner, Shared: shared, Wait: waiting})
}

// attempt makes one attempt of p (its TTL the locker's).
func (l *RWLock) attempt(ctx context.Context, p dialect.RWAcquireParams) (int64, time.Time, time.Duration, error) {
	cfg := l.eng.Config()
	p.TTL = cfg.TTL
	name, shared, waiting := p.Name, p.Shared, p.Wait
	for n := 0; ; n++ {
		start := time.Now()
		g, err := l.rw.Acquire(ctx, p)
		switch {
		case errors.Is(err, ErrTransient) && n < maxTransientRetries:
			continue
		case err != nil:
			return 0, start, 0, acquireError(ctx, name, err)
		case g.Upgrade && p.Upgradeable:
			return 0, start, 0, fmt.Errorf("%w: the owner holds a plain read of %q", ErrUpgrade, name)
		case g.Upgrade:
			return 0, start, 0, fmt.Errorf("%w: the owner holds the read side of %q (an upgradeable read upgrades with Lock.Upgrade)", ErrUpgrade, name)
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

// rwSide is the side of a read/write lock that a handle holds.
type rwSide uint8

const (
	rwWrite       rwSide = iota // the write side
	rwRead                      // a plain read
	rwUpgradeable               // an upgradeable read
	// rwFixed is a handle that changes sides no more: a re-entrant hold
	// (whose lease another handle holds first), or one whose last change
	// had an unknown outcome.
	rwFixed
)

// rwHandle is what a read/write lock's handle knows of its hold.
type rwHandle struct {
	l     *RWLock
	lease *engine.Lease

	mu   sync.Mutex // serialises the handle's Downgrade and Upgrade
	side rwSide     // guarded by mu
}

// changing returns k's read/write handle, locked, if k holds side want
// and may change sides: an error wrapping ErrUnsupported otherwise,
// ErrNotHeld after Release, the cause of its loss once lost.
func changing(k *Lock, op string, want rwSide) (*rwHandle, error) {
	h := k.rw
	if h == nil {
		return nil, fmt.Errorf("%w: %s of a lock that is not a read/write lock's", ErrUnsupported, op)
	}
	k.mu.Lock()
	released := k.released
	k.mu.Unlock()
	if released {
		return nil, ErrNotHeld
	}
	h.mu.Lock()
	var err error
	switch {
	case h.side == rwFixed:
		err = fmt.Errorf("%w: %s of a re-entrant hold of %q (or of one whose change of side had an unknown outcome)", ErrUnsupported, op, k.Name())
	case h.side != want:
		err = fmt.Errorf("%w: %s of %s hold of %q", ErrUnsupported, op, h.side, k.Name())
	case h.lease.Holds() > 1:
		err = fmt.Errorf("%w: %s of %q while the hold is re-entered", ErrUnsupported, op, k.Name())
	case k.Context().Err() != nil:
		err = context.Cause(k.Context())
	}
	if err != nil {
		h.mu.Unlock()
		return nil, err
	}
	return h, nil
}

// String names the side, for errors.
func (s rwSide) String() string {
	switch s {
	case rwWrite:
		return "a write"
	case rwRead:
		return "a plain read"
	case rwUpgradeable:
		return "an upgradeable read"
	}
	return "a re-entrant"
}

// downgrade is k.Downgrade.
func downgrade(ctx context.Context, k *Lock) error {
	h, err := changing(k, "Downgrade", rwWrite)
	if err != nil {
		return err
	}
	defer h.mu.Unlock()
	ok, err := h.l.rw.Downgrade(ctx, k.h.Ident())
	switch {
	case err != nil:
		if errors.Is(err, ErrOutcomeUnknown) {
			h.side = rwFixed
		}
		return fmt.Errorf("sqllock: downgrade %q: %w", k.Name(), sqlrun.WithCause(ctx, err))
	case !ok:
		return ErrLockLost
	}
	h.side = rwRead
	h.l.eng.Kick(k.Name())
	return nil
}

// upgrade is k.Upgrade.
func upgrade(ctx context.Context, k *Lock) error {
	h, err := changing(k, "Upgrade", rwUpgradeable)
	if err != nil {
		return err
	}
	defer h.mu.Unlock()
	ref := k.h.Ident()
	try := func() (engine.Grant, time.Duration, error) {
		k.mu.Lock()
		released := k.released
		k.mu.Unlock()
		switch {
		case released:
			return engine.Grant{}, 0, ErrNotHeld
		case k.Context().Err() != nil:
			return engine.Grant{}, 0, context.Cause(k.Context())
		}
		left, err := h.l.attemptUpgrade(ctx, ref)
		if err != nil {
			return engine.Grant{}, left, err
		}
		return engine.Grant{Lease: h.lease}, 0, nil
	}
	if _, err := h.l.eng.WaitUpgrade(ctx, ref.Name, try); err != nil {
		// Without an intent (or with another's) the withdrawal changes
		// nothing.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
		defer cancel()
		if werr := h.l.rw.Withdraw(wctx, ref.Name, ref.Owner); werr != nil {
			h.l.eng.Config().Logger.WarnContext(ctx, "sqllock: could not withdraw an upgrading reader's intent; it ends with its TTL",
				"name", ref.Name, "err", werr)
		}
		return err
	}
	h.side = rwWrite
	return nil
}

// attemptUpgrade makes one attempt at upgrading the upgradeable lease ref.
// A refusal (ErrLocked) reports how long the readers in the way have left,
// capped at RenewInterval, so that the intent is refreshed in time.
func (l *RWLock) attemptUpgrade(ctx context.Context, ref dialect.Lease) (time.Duration, error) {
	cfg := l.eng.Config()
	p := dialect.RWUpgradeParams{Name: ref.Name, Owner: ref.Owner, Token: ref.Token, TTL: cfg.TTL, Wait: true}
	for n := 0; ; n++ {
		g, err := l.rw.Upgrade(ctx, p)
		switch {
		case errors.Is(err, ErrTransient) && n < maxTransientRetries:
			continue
		case err != nil:
			return 0, fmt.Errorf("sqllock: upgrade %q: %w", ref.Name, sqlrun.WithCause(ctx, err))
		case g.Lost:
			return 0, ErrLockLost
		case g.Upgrade:
			return 0, fmt.Errorf("%w: the lease of %q is a plain read (another process holds it under the same owner?)", ErrUnsupported, ref.Name)
		case g.Token != 0:
			return 0, nil
		}
		left := min(g.Left, cfg.RenewInterval)
		if g.Marked {
			left = min(left, cfg.MaxBackoff)
		}
		return left, ErrLocked
	}
}
