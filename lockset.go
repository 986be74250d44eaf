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
)

// MaxLockSet is the most names one TryAcquireAll or AcquireAll call takes.
const MaxLockSet = dialect.MaxMultiAcquire

// maxSetTransientRetries bounds the immediate retries of a set's
// acquisition that the database rolled back (a deadlock InnoDB reports
// through a gap lock, say): more than a single name's, as a transaction
// meets more of them, each after a short random pause.
const maxSetTransientRetries = 10

// setUndoTimeout bounds the release of a set whose grant's commit had an
// unknown outcome.
const setUndoTimeout = 5 * time.Second

// TryAcquireAll acquires every name of names at once, or none of them: if
// another owner holds any of them, it returns an error wrapping ErrLocked
// (and naming that lock) at once, having acquired nothing. Names are
// acquired in one short transaction, by the same statement as TryAcquire,
// so each lock of the set is an ordinary lease of the table: its own
// fencing token (greater than every earlier token of its name), renewed
// with the locker's other leases, freed by its TTL if the process dies.
// Two calls asking for overlapping sets, in whatever order, never wait for
// each other in a cycle: every call takes the names in the same order.
//
// names must hold 1 to MaxLockSet valid, distinct names: otherwise the
// error wraps ErrInvalidName (a bad or repeated name) or ErrInvalidOptions
// (no names, too many). A dialect that cannot acquire sets (TiDB), and a
// fair table (Fair), return an error wrapping ErrUnsupported.
//
// Under an owner set with WithOwner, a name that owner holds already is
// re-entered, as Acquire re-enters it: one more hold on the same lease and
// token, released by the set's Release. A name held by another owner
// refuses the whole set.
func (t *Table) TryAcquireAll(ctx context.Context, names ...string) (*LockSet, error) {
	sorted, owner, err := t.prepareSet(ctx, names)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	set, _, _, err := t.trySet(ctx, names, sorted, owner, false)
	if set != nil {
		set.acquired(ctx, time.Since(start))
	}
	return set, err
}

// AcquireAll acquires every name of names at once, as TryAcquireAll does,
// waiting while another owner holds any of them. It never holds some of
// the names while waiting for the others: each attempt takes all or none.
// Between attempts it waits, as Acquire does, for the lock that refused
// the last attempt: until it is released (through this locker, or
// anywhere where the database announces releases), its lease ends, or a
// jittered backoff passes. When ctx ends first it returns an error
// wrapping ctx.Err().
func (t *Table) AcquireAll(ctx context.Context, names ...string) (*LockSet, error) {
	sorted, owner, err := t.prepareSet(ctx, names)
	if err != nil {
		return nil, err
	}
	var set *LockSet
	start := time.Now()
	for name := sorted[0]; ; {
		var refused string
		_, err := t.eng.Room.Wait(ctx, name, func() (engine.Grant, time.Duration, error) {
			s, by, left, err := t.trySet(ctx, names, sorted, owner, true)
			if errors.Is(err, ErrLocked) && by != name {
				// Another lock refused: wait in its line instead.
				refused = by
				return engine.Grant{}, 0, errWaitElsewhere
			}
			set = s
			return engine.Grant{}, left, err
		})
		if errors.Is(err, errWaitElsewhere) {
			name = refused
			continue
		}
		if err != nil {
			return nil, err
		}
		set.acquired(ctx, time.Since(start))
		return set, nil
	}
}

// acquired reports each lock of the set, acquired after wait, as an
// acquisition of its own (an observe.AcquiredObserver's event, a debug
// record).
func (s *LockSet) acquired(ctx context.Context, wait time.Duration) {
	for _, k := range s.sorted {
		s.t.eng.Events.AcquiredInSet(ctx, k.h.Ident(), k.reentered, wait, len(s.sorted))
	}
}

// errWaitElsewhere ends a wait for one name of a set when another name
// refused the set.
var errWaitElsewhere = errors.New("sqllock: another lock of the set refused it")

// prepareSet checks names and returns them sorted, with the owner on ctx.
func (t *Table) prepareSet(ctx context.Context, names []string) ([]string, string, error) {
	switch {
	case t.fair != nil:
		return nil, "", fmt.Errorf("%w: a fair table (TableOptions.Fair) does not acquire several locks at once: a set would pass its names' queues", ErrUnsupported)
	case t.multi == nil:
		return nil, "", fmt.Errorf("%w: the %s dialect cannot acquire several locks at once", ErrUnsupported, t.eng.Events.Dialect())
	}
	switch {
	case len(names) == 0:
		return nil, "", fmt.Errorf("%w: no lock names", ErrInvalidOptions)
	case len(names) > MaxLockSet:
		return nil, "", fmt.Errorf("%w: %d lock names, more than %d", ErrInvalidOptions, len(names), MaxLockSet)
	}
	for _, name := range names {
		if err := ValidateName(name); err != nil {
			return nil, "", err
		}
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return nil, "", fmt.Errorf("%w: %q appears more than once", ErrInvalidName, sorted[i])
		}
	}
	owner, err := t.owners.owner(ctx)
	return sorted, owner, err
}

// trySet makes one attempt at the set. A refusal is ErrLocked, with the
// name that refused and, for a caller that will wait, how long its
// holder's lease has left (negative: unknown); asking marks the row as
// waited for, as a single lock's attempt does.
func (t *Table) trySet(ctx context.Context, names, sorted []string, owner string, waiting bool) (*LockSet, string, time.Duration, error) {
	p := dialect.MultiAcquireParams{Names: sorted, Owner: owner, TTL: t.eng.Opts.TTL}
	for attempt := 1; ; attempt++ {
		start := time.Now()
		tokens, refused, err := t.multi.AcquireAll(ctx, p)
		if errors.Is(err, ErrTransient) && attempt <= maxSetTransientRetries && pause(ctx, attempt) {
			continue
		}
		switch {
		case err != nil:
			if tokens != nil {
				t.undoSet(ctx, sorted, owner, tokens)
			}
			return nil, "", 0, acquireError(ctx, fmt.Sprint(sorted), err)
		case refused == "":
			return t.grantSet(ctx, names, sorted, owner, tokens, start), "", 0, nil
		}
		locked := fmt.Errorf("sqllock: %q is held: %w", refused, ErrLocked)
		if !waiting {
			return nil, refused, -1, locked
		}
		left, ok, err := t.locks.Remaining(ctx, refused)
		switch {
		case err != nil:
			return nil, refused, -1, locked
		case !ok:
			return nil, refused, 0, locked // reaped meanwhile: try again at once
		}
		return nil, refused, left, locked
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

// undoSet releases, before a failed call returns, the leases a commit
// with an unknown outcome may have granted: a call that returned an error
// leaves nothing behind (or, if this release fails too, nothing beyond
// the leases' TTL, since nobody renews them).
func (t *Table) undoSet(ctx context.Context, sorted []string, owner string, tokens []int64) {
	ls := make([]dialect.Lease, len(sorted))
	for i, name := range sorted {
		ls[i] = dialect.Lease{Name: name, Owner: owner, Token: tokens[i]}
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), setUndoTimeout)
	defer cancel()
	if _, err := t.multi.ReleaseAll(uctx, ls, 0); err != nil {
		t.eng.Opts.Logger.WarnContext(ctx, "sqllock: could not release a set whose grant had an unknown outcome; its leases end by their TTL",
			"names", sorted, "owner", owner, "err", err)
	}
}

// grantSet turns the tokens granted to owner for sorted into held leases.
func (t *Table) grantSet(ctx context.Context, names, sorted []string, owner string, tokens []int64, start time.Time) *LockSet {
	s := &LockSet{t: t, sorted: make([]*Lock, len(sorted)), locks: make([]*Lock, len(names))}
	byName := make(map[string]*Lock, len(sorted))
	for i, name := range sorted {
		k := lockOf(t.eng.Leases.Grant(ctx, name, owner, tokens[i], start))
		s.sorted[i], byName[name] = k, k
	}
	for i, name := range names {
		s.locks[i] = byName[name]
	}
	inner, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	s.ctx = &setContext{Context: inner, cancel: cancel, locks: s.sorted}
	for _, k := range s.sorted {
		lctx := k.Context()
		s.stops = append(s.stops, context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) }))
	}
	return s
}

// LockSet is a set of locks acquired together by Table.TryAcquireAll or
// Table.AcquireAll: one hold of each name. It is safe for concurrent use.
//
// Each lock of the set (see Locks) is an ordinary lease with its own
// fencing token, renewed in the background while held. The set's Context
// ends as soon as any of them does: when a lease is lost (cause
// ErrLockLost) or a lock of the set is released on its own (ErrNotHeld).
type LockSet struct {
	t      *Table
	locks  []*Lock // in the order of the names asked for
	sorted []*Lock // by name: the order of statements
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
	t := s.t
	var (
		ok  []bool
		err error
	)
	for attempt := 1; ; attempt++ {
		ok, err = t.multi.ReleaseAll(ctx, refs, t.eng.Opts.MinHold)
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
			t.eng.Events.Released(ctx, l.Ident(), l.Granted(), freed)
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
