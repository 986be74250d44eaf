package sqllock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/engine"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/observe"
)

// LockInfo describes one held lock, as reported by Table.List.
type LockInfo = dialect.LockInfo

// Table is the lock-table strategy: one row per lock name holding the owner,
// fencing token, hold count and lease expiry, computed on the database
// clock. Every transition is one statement: acquire (insert, re-enter, or
// take over an expired lease), renew, release.
//
// A crashed holder stops renewing and its lease expires after TTL; the next
// acquirer takes the row over in the same statement that checks the expiry,
// so correctness never waits for the Reaper (which only reclaims space).
//
// A Table is safe for concurrent use. Its TryAcquire, Acquire and List are
// those of every lease-based locker (see Locker); Acquire waits for
// PostgreSQL's announcement of a release (LISTEN/NOTIFY) where it can.
type Table struct {
	leaseLocker
	locks sqlrun.LockTable
	fair  *fairQueue // with Fair (fair.go)
	// waking orders the wake-ups of waiters without Fair, where the
	// dialect can (dialect.Catalogue.Waking); nil: they wait for
	// announcements of the name.
	waking *fairQueue
	multi  sqlrun.MultiLockTable // nil: the dialect cannot acquire sets (TryAcquireAll, AcquireAll)
	// requests keeps the requests that holders release their locks
	// (RequestRelease); nil where the dialect keeps none.
	requests sqlrun.ReleaseRequests
}

var _ Locker = (*Table)(nil)

// NewTable returns a lock-table locker on d. The schema must have been
// migrated (see Migrate).
func NewTable(d dialect.Dialect, opts TableOptions) (*Table, error) {
	cat, tb, err := open(d)
	if err != nil {
		return nil, err
	}
	t, err := newTable(d, cat, tb, opts.LeaseOptions.config(opts.MinHold, opts.Fair))
	if err != nil || opts.Fair {
		return t, err
	}
	if q := tb.Waking; q != nil {
		t.waking = newFairQueue(&t.eng, observe.StrategyTable, wakingTickets{q, t.locks, t.eng.Config().TTL})
	}
	return t, nil
}

// open returns d's catalogue and the tables the runner builds from it, or
// ErrNilDB for a nil dialect or pool.
func open(d dialect.Dialect) (dialect.Catalogue, *sqlrun.Tables, error) {
	if isNil(d) || d.DB() == nil {
		return dialect.Catalogue{}, nil, ErrNilDB
	}
	tb, err := sqlrun.Open(d)
	if err != nil {
		return dialect.Catalogue{}, nil, err
	}
	return d.Catalogue(), tb, nil
}

// newTable is NewTable without waking (whose tickets' grants would not
// store a Campaign's value), and the lock table of NewElection, whose
// campaigns make their own attempts (election.go).
func newTable(d dialect.Dialect, cat dialect.Catalogue, tb *sqlrun.Tables, opts engine.Config) (*Table, error) {
	t := &Table{locks: tb.Locks}
	t.values, t.requests = tb.LockValues, tb.Requests
	if opts.Fair {
		return newFairTable(t, d, cat, tb, opts)
	}
	t.multi = tb.Multi
	t.try = attempts{t}
	if err := t.init(observe.StrategyTable, d, t.locks, cat.Notifier, opts); err != nil {
		return nil, err
	}
	return t, nil
}

func isNil(d dialect.Dialect) bool {
	if d == nil {
		return true
	}
	v := reflect.ValueOf(d)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// tryOnce runs the acquire statement, and after a refusal, for a caller
// that will wait, asks how long the holder's lease has left (which marks the
// row as waited for, so that its release is announced).
func (t *Table) tryOnce(ctx context.Context, name, owner string, waiting bool) (int64, time.Time, time.Duration, error) {
	p := dialect.AcquireParams{Name: name, Owner: owner, TTL: t.eng.Config().TTL}
	return attemptLease(ctx, name, waiting, t.eng.Config().Logger, observe.StrategyTable,
		func() (int64, error) { return t.locks.Acquire(ctx, p) },
		func() (time.Duration, bool, error) { return t.locks.Remaining(ctx, name) })
}

// attemptLease is the tryOnce of a lease locker: it runs acquire, repeating
// it after a transient conflict, and after a refusal, for a caller that
// will wait, asks remaining how long the holders' leases have left. It
// returns the token, the statement's start, and the wait the waiting room
// schedules: 0 to try again at once (no holder is left: a row reaped or
// released since the attempt, which no release will announce), -1 for the
// backoff (the holders' lease ends are unknown), or the time left.
func attemptLease(ctx context.Context, name string, waiting bool, log *slog.Logger, strategy string,
	acquire func() (int64, error), remaining func() (time.Duration, bool, error)) (int64, time.Time, time.Duration, error) {
	for attempt := 0; ; attempt++ {
		start := time.Now()
		token, err := acquire()
		if errors.Is(err, dialect.ErrTransient) && attempt < maxTransientRetries {
			continue
		}
		switch {
		case err != nil:
			return 0, start, 0, acquireError(ctx, name, err)
		case token != 0:
			return token, start, 0, nil
		case !waiting:
			return 0, start, -1, ErrLocked
		}
		left, ok, err := remaining()
		switch {
		case err != nil:
			// The next attempt meets the error again if it lasts.
			log.InfoContext(ctx, "sqllock: could not read the holders' lease ends; waiting with backoff",
				"strategy", strategy, "name", name, "err", err)
			return 0, start, -1, ErrLocked
		case !ok:
			return 0, start, 0, ErrLocked
		}
		return 0, start, left, ErrLocked
	}
}

// Break ends the lease on name now, whoever holds it, and frees the lock:
// the way out when a holder is stuck or a minimum hold was set by mistake.
// It keeps the name's token floor, so the next acquisition's token is
// larger than the broken one; the broken holder's guarded writes are
// refused from then on, and it learns of the loss at its next renewal (its
// lock's context is cancelled with ErrLockLost). A lock released within
// its minimum hold is freed too.
//
// Break returns the lease it ended, with ok false (and no error) when
// nothing held name. Each break is logged at level WARN through
// TableOptions.Logger and reported to TableOptions.Observer if it
// implements observe.BreakObserver.
func (t *Table) Break(ctx context.Context, name string) (broken LockInfo, ok bool, err error) {
	return t.breakLease(ctx, name, 0)
}

// BreakToken is Break scoped to one lease: it ends the lease on name only
// if token holds it, so that an operator who confirmed a holder never
// breaks the next one. When name is free, or another lease holds it,
// nothing is broken: BreakToken returns ok false, no error, and the lease
// that holds name now (the zero LockInfo when none does).
func (t *Table) BreakToken(ctx context.Context, name string, token int64) (lease LockInfo, ok bool, err error) {
	if token <= 0 {
		return LockInfo{}, false, fmt.Errorf("%w: token %d: a lock's tokens are positive", ErrInvalidOptions, token)
	}
	return t.breakLease(ctx, name, token)
}

// breakLease is Break, scoped to token when it is not 0.
func (t *Table) breakLease(ctx context.Context, name string, token int64) (LockInfo, bool, error) {
	if err := ValidateName(name); err != nil {
		return LockInfo{}, false, err
	}
	li, ok, err := t.locks.Break(ctx, name, token)
	switch {
	case err != nil:
		return LockInfo{}, false, err
	case !ok:
		return li, false, nil
	}
	t.eng.Broken(ctx, li)
	return li, true, nil
}

// Value reads, without acquiring it, the live lease on name and the value
// its holder set with Lock.SetValue (in LockInfo.Value; empty when it set
// none): who holds the lock, since when, and what it says about its hold.
// ok is false, with no error, when nothing holds name. A lease released
// within its minimum hold is still reported, with Holds 0. A dialect that
// keeps no values (TiDB) returns an error wrapping ErrUnsupported.
func (t *Table) Value(ctx context.Context, name string) (info LockInfo, ok bool, err error) {
	if err := ValidateName(name); err != nil {
		return LockInfo{}, false, err
	}
	if t.values == nil {
		return LockInfo{}, false, fmt.Errorf("%w: lock values", ErrUnsupported)
	}
	info, ok, err = t.values.Value(ctx, name)
	if err != nil {
		return LockInfo{}, false, fmt.Errorf("sqllock: value of %q: %w", name, err)
	}
	return info, ok, nil
}

// RequestRelease asks the holder of name, whoever and wherever it is, to
// finish and release the lock: the polite way to move a lock (a deploy,
// a rebalance) before breaking it with Break. The request is kept for
// the holder's lease (its token), so a later holder is never asked by
// it; asking again replaces the reason. The holder learns of it at its
// next renewal, within one RenewInterval, on Lock.Revoked (and an
// observe.RevokedObserver's event); what it does then is its own choice.
//
// asked is false, with no error, when no lease holds name (a lock
// released within its minimum hold holds none). reason is validated as
// ValidateValue says (ErrInvalidValue). A dialect that keeps no requests
// (TiDB) returns an error wrapping ErrUnsupported.
func (t *Table) RequestRelease(ctx context.Context, name, reason string) (asked bool, err error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	if err := ValidateValue(reason); err != nil {
		return false, err
	}
	if t.requests == nil {
		return false, fmt.Errorf("%w: release requests", ErrUnsupported)
	}
	asked, err = t.requests.RequestRelease(ctx, name, reason)
	if err != nil {
		return false, fmt.Errorf("sqllock: request the release of %q: %w", name, err)
	}
	return asked, nil
}

// Acquire acquires name, waiting while another owner holds it (see
// Locker). Waiting calls of one locker line up per name, and only the
// first of them asks the database; it retries when a release is announced
// (PostgreSQL LISTEN/NOTIFY), when the holder's lease ends, or after a
// jittered backoff capped at MaxBackoff. On PostgreSQL a waiter refused at
// first takes a ticket, and a release wakes the oldest ticket's waiter
// alone, in whichever process it waits; the lock still goes to whoever asks
// first. With Fair, the lock goes to the oldest live ticket. When ctx ends
// first, Acquire gives its ticket up at once and returns an error wrapping
// ctx.Err().
func (t *Table) Acquire(ctx context.Context, name string) (*Lock, error) {
	switch {
	case t.fair != nil:
		return t.acquireFair(ctx, t.fair, name)
	case t.waking != nil:
		return t.acquireFair(ctx, t.waking, name)
	}
	return t.leaseLocker.Acquire(ctx, name)
}

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
		_, err := t.eng.Wait(ctx, name, func() (engine.Grant, time.Duration, error) {
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

// errWaitElsewhere ends a wait for one name of a set when another name
// refused the set.
var errWaitElsewhere = errors.New("sqllock: another lock of the set refused it")

// prepareSet checks names and returns them sorted, with the owner on ctx.
func (t *Table) prepareSet(ctx context.Context, names []string) ([]string, string, error) {
	switch {
	case t.fair != nil:
		return nil, "", fmt.Errorf("%w: a fair table (TableOptions.Fair) does not acquire several locks at once: a set would pass its names' queues", ErrUnsupported)
	case t.multi == nil:
		return nil, "", fmt.Errorf("%w: the %s dialect cannot acquire several locks at once", ErrUnsupported, t.eng.Dialect())
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
	p := dialect.MultiAcquireParams{Names: sorted, Owner: owner, TTL: t.eng.Config().TTL}
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
		t.eng.Config().Logger.WarnContext(ctx, "sqllock: could not release a set whose grant had an unknown outcome; its leases end by their TTL",
			"names", sorted, "owner", owner, "err", err)
	}
}

// grantSet turns the tokens granted to owner for sorted into held leases.
func (t *Table) grantSet(ctx context.Context, names, sorted []string, owner string, tokens []int64, start time.Time) *LockSet {
	s := &LockSet{eng: &t.eng, multi: t.multi, sorted: make([]*Lock, len(sorted)), locks: make([]*Lock, len(names))}
	byName := make(map[string]*Lock, len(sorted))
	for i, name := range sorted {
		k := t.lockOf(t.eng.Grant(ctx, name, owner, tokens[i], start))
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

// newFairTable sets t up as a fair lock table on d.
func newFairTable(t *Table, d dialect.Dialect, cat dialect.Catalogue, tb *sqlrun.Tables, opts engine.Config) (*Table, error) {
	q := tb.Fair
	if q == nil {
		return nil, fmt.Errorf("TableOptions.Fair: %w", cat.Unsupported(d.Name(), "Fair"))
	}
	if err := t.init(observe.StrategyTable, d, q, cat.Notifier, opts); err != nil {
		return nil, err
	}
	t.fair = newFairQueue(&t.eng, observe.StrategyTable, lockTickets{q, t.eng.Config().TTL})
	t.try = fairStrategy{t.fair}
	return t, nil
}
