package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/engine"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/observe"
)

// MaxValueLen is the longest value of a leader or a lock, in bytes.
const MaxValueLen = 65535

// LeaderInfo describes the leader of an election, as read from the
// database: its owner identity, its term (the fencing token of its lease),
// the value it proclaimed, and its lease's expiry on the database clock.
// The zero Term means no leader (see Election.Observe).
type LeaderInfo = dialect.LeaderInfo

// Election is leader election over the lock table: the leader of the
// election named N is the holder of the lock N — a lease granted, renewed
// and lost exactly as NewTable's — that has proclaimed a value for it.
// Campaign waits to become leader; Leader and Observe tell everyone who
// leads.
//
// The term of a leadership is its lease's fencing token: fixed for the
// whole leadership, strictly greater than every earlier term of the name
// (across expiry, reaping and restarts; carrying the timeline on
// PostgreSQL, the grant's clock on MySQL/MariaDB), and checked by Guard in
// the leader's own transactions. So there is at most one leader per term,
// and a deposed leader's writes can be refused by the data.
//
// An election name is a lock name: a NewTable locker acquiring the same
// name competes with the campaigners (and, holding it, keeps everyone from
// leading without being a leader itself).
//
// An Election is safe for concurrent use. It needs schema version 11 (see
// Migrate) and a dialect that implements sqlrun.Elections (PostgreSQL,
// MySQL/MariaDB, SQLite; not TiDB).
type Election struct {
	table    *Table
	el       sqlrun.Elections
	notifier dialect.Notifier // nil: Observe polls only
	watches  bool             // the notifier announces the names watched (dialect.Catalogue.WatchesNames)
}

// NewElection returns leader elections on d's lock table. TTL bounds how long an election stays leaderless after its
// leader dies (failover takes up to TTL), and MaxBackoff bounds the
// interval of Observe's reads. It returns an error wrapping ErrUnsupported
// if d does not offer elections.
func NewElection(d dialect.Dialect, opts LeaseOptions) (*Election, error) {
	cat, tb, err := open(d)
	if err != nil {
		return nil, err
	}
	t, err := newTable(d, cat, tb, opts.config(0, false))
	if err != nil {
		return nil, err
	}
	if tb.Elections == nil {
		return nil, cat.Unsupported(d.Name(), "Elections")
	}
	return &Election{table: t, el: tb.Elections, notifier: cat.Notifier, watches: cat.WatchesNames}, nil
}

// ValidateValue reports whether value can be a leader's value or a lock's
// (Lock.SetValue): at most MaxValueLen bytes of valid UTF-8 without NUL
// bytes (empty is fine). The error wraps ErrInvalidValue.
func ValidateValue(value string) error {
	switch {
	case len(value) > MaxValueLen:
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidValue, len(value), MaxValueLen)
	case !utf8.ValidString(value):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidValue)
	}
	for i := 0; i < len(value); i++ {
		if value[i] == 0 {
			return fmt.Errorf("%w: contains a NUL byte", ErrInvalidValue)
		}
	}
	return nil
}

// Campaign waits until the caller is the leader of the election name and
// has proclaimed value, or until ctx ends (it then returns an error
// wrapping ctx.Err(), and leaves no leadership behind). It waits as
// Table.Acquire does: woken by a release announced by the database, by the
// end of the leader's lease, or after a bounded backoff.
//
// Each call campaigns as a new owner identity, whatever WithOwner says: two
// campaigns never share a leadership. The lease's grant stores value in
// the same statement: a campaign that wins costs one statement, as
// Table.TryAcquire does, and Leader and Observe report its value from the
// grant on.
func (e *Election) Campaign(ctx context.Context, name, value string) (*Leadership, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if err := ValidateValue(value); err != nil {
		return nil, err
	}
	g, err := e.table.eng.Acquire(ctx, engine.Call{Name: name, Owner: e.table.owners.fresh(), Try: campaign{e, value}, Wait: true})
	if err != nil {
		return nil, err
	}
	return &Leadership{lock: e.table.lockOf(g), el: e.el, value: value}, nil
}

// campaign is one Campaign's acquisition attempt: the lock table's, whose
// grant stores value in the same statement.
type campaign struct {
	e     *Election
	value string
}

// TryOnce implements engine.Strategy.
func (c campaign) TryOnce(ctx context.Context, name, owner string, waiting bool) (int64, time.Time, time.Duration, error) {
	t, cfg := c.e.table, c.e.table.eng.Config()
	p := dialect.AcquireParams{Name: name, Owner: owner, TTL: cfg.TTL}
	return attemptLease(ctx, name, waiting, cfg.Logger, observe.StrategyTable,
		func() (int64, error) { return c.e.el.Campaign(ctx, p, c.value) },
		func() (time.Duration, bool, error) { return t.locks.Remaining(ctx, name) })
}

// Leader returns the current leader of the election name, read from the
// database, or ErrNoLeader if it has none.
func (e *Election) Leader(ctx context.Context, name string) (LeaderInfo, error) {
	if err := ValidateName(name); err != nil {
		return LeaderInfo{}, err
	}
	info, ok, err := e.el.Leader(ctx, name)
	switch {
	case err != nil:
		return LeaderInfo{}, fmt.Errorf("sqllock: leader %q: %w", name, err)
	case !ok:
		return LeaderInfo{}, ErrNoLeader
	}
	return info, nil
}

// Leadership is a won election: a held lease on the election's name with a
// proclaimed value. It is safe for concurrent use.
//
// The leader must stop acting as leader when Done is closed: the lease was
// lost (its Context's cause is ErrLockLost) or resigned (ErrNotHeld). Done
// is closed by the end of the lease's trust window at the latest — TTL
// minus a margin (TTL/10, at most 1s) after the start of the last renewal
// that succeeded, on the local monotonic clock — which comes before the
// lease can expire on the database clock, and so before anyone else can be
// elected (as long as nobody deletes or changes the lock's row by hand). A
// process paused through that instant learns it from Context().Err(),
// which checks the window when called: check it right before acting as
// leader, or Guard the leader's transactions with the term.
type Leadership struct {
	lock *Lock
	el   sqlrun.Elections

	mu    sync.Mutex
	value string
}

// Name returns the election's name.
func (l *Leadership) Name() string { return l.lock.Name() }

// Owner returns the owner identity of the leadership's lease.
func (l *Leadership) Owner() string { return l.lock.Owner() }

// Term returns the leadership's term: its lease's fencing token, greater
// than the term of every earlier leader of the election.
func (l *Leadership) Term() int64 { return l.lock.Token() }

// Value returns the value last proclaimed.
func (l *Leadership) Value() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// Context returns a context cancelled when the leadership ends: with cause
// ErrLockLost when the lease is lost, ErrNotHeld after Resign. See
// Leadership and Lock.Context.
func (l *Leadership) Context() context.Context { return l.lock.Context() }

// Done is shorthand for Context().Done().
func (l *Leadership) Done() <-chan struct{} { return l.lock.Done() }

// Guard makes the caller's transaction tx safe to commit only while this
// leadership lasts, as Lock.Guard does: it returns ErrLockLost when the
// leader's lease is no longer live.
func (l *Leadership) Guard(ctx context.Context, tx *sql.Tx) error { return l.lock.Guard(ctx, tx) }

// Proclaim replaces the leader's value, in one statement that succeeds
// only while the leadership's lease is live: it returns ErrLockLost when it
// is not (the lease's context ends at its next renewal at the latest).
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	if err := ValidateValue(value); err != nil {
		return err
	}
	if err := l.Context().Err(); err != nil {
		return context.Cause(l.Context())
	}
	if err := l.proclaim(ctx, value); err != nil {
		return fmt.Errorf("sqllock: proclaim %q: %w", l.Name(), err)
	}
	return nil
}

func (l *Leadership) proclaim(ctx context.Context, value string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	ref := dialect.Lease{Name: l.lock.Name(), Owner: l.lock.Owner(), Token: l.lock.Token()}
	ok, err := l.el.Proclaim(ctx, ref, value)
	switch {
	case err != nil:
		return err
	case !ok:
		return ErrLockLost
	}
	l.value = value
	return nil
}

// Lock returns the lock the leadership holds, for code written against
// *Lock: its Token is the term, its Context the leadership's, and
// releasing it resigns.
func (l *Leadership) Lock() *Lock { return l.lock }

// Resign ends the leadership: it releases the lease (one statement), so
// that a campaigner can be elected at once, and cancels the leadership's
// context with ErrNotHeld. It returns ErrNotHeld if called again, and
// ErrLockLost if the lease had been lost meanwhile; see Lock.Release for
// failed releases.
func (l *Leadership) Resign(ctx context.Context) error { return l.lock.Release(ctx) }

// Observe streams the leaders of the election name until ctx ends, then
// closes the channel. It sends the state found first (the leader, or a
// LeaderInfo with Term 0 and only Name set when there is none), then every
// change it sees: a new term, a new value, or the end of a leadership with
// no successor yet (Term 0).
//
// It reads the leader from the database after every announced release of
// the name (PostgreSQL LISTEN/NOTIFY, MySQL/MariaDB wake-ups, where the
// dialect offers them: an observer subscribes to the dialect's one
// listening connection, as waiters do) and at least every
// MaxBackoff otherwise.
// Changes are coalesced: a state the receiver has not taken yet is
// replaced by a newer one, and leaderships that begin and end between two
// reads go unseen. So the channel never lags behind: the last state sent
// before the receiver stops reading is the newest read, and the terms of
// the leaders it sends strictly increase. A failed read is reported to
// the Logger and retried after MaxBackoff. Observe's goroutine ends when
// ctx does, whether or not the channel is drained.
func (e *Election) Observe(ctx context.Context, name string) <-chan LeaderInfo {
	ch := make(chan LeaderInfo)
	if err := ValidateName(name); err != nil {
		e.table.eng.Config().Logger.WarnContext(ctx, "sqllock: observe: invalid election name", "err", err)
		close(ch)
		return ch
	}
	o := &observer{e: e, name: name, wake: make(chan struct{}, 1)}
	if e.notifier != nil {
		o.sub = e.notifier.Subscribe(o)
		o.sub.Watch(name)
		o.hint = !e.watches
	}
	go o.run(ctx, ch)
	return ch
}

// observer is one Observe call: a dialect.Subscriber that wakes its loop on
// announcements of its name.
type observer struct {
	e    *Election
	name string
	sub  dialect.Subscription // nil without a notifier
	hint bool                 // a leader's row must be marked as waited for to be announced
	wake chan struct{}        // buffered 1: a pending wake-up
}

func (o *observer) kick() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Ready implements dialect.Subscriber: releases may have gone by unseen.
func (o *observer) Ready() { o.kick() }

// Released implements dialect.Subscriber.
func (o *observer) Released(name string) {
	if name == o.name {
		o.kick()
	}
}

// Lost implements dialect.Subscriber: reads go on at the polling interval.
func (o *observer) Lost(error) {}

func (o *observer) run(ctx context.Context, ch chan<- LeaderInfo) {
	defer close(ch)
	if o.sub != nil {
		defer o.sub.Unsubscribe()
	}
	opts := o.e.table.eng.Config()
	var (
		sent, pending LeaderInfo
		have, first   = false, true
		hinted        int64 // the term whose release was asked to be announced
		top           int64 // the largest term queued
	)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		var out chan<- LeaderInfo
		if have {
			out = ch
		}
		select {
		case <-ctx.Done():
			return
		case out <- pending:
			sent, have = pending, false
			continue
		case <-timer.C:
		case <-o.wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		info, ok, err := o.e.el.Leader(ctx, o.name)
		timer.Reset(opts.MaxBackoff)
		if err != nil {
			if ctx.Err() == nil {
				opts.Logger.WarnContext(ctx, "sqllock: observe: reading the leader failed; retrying",
					"name", o.name, "err", err)
			}
			continue
		}
		if !ok {
			info = LeaderInfo{Name: o.name}
		}
		if o.hint && ok && info.Term != hinted {
			// Waiters' reads mark the row, so that its release is
			// announced (PostgreSQL); a failure only means polling.
			if _, _, err := o.e.table.locks.Remaining(ctx, o.name); err == nil {
				hinted = info.Term
			}
		}
		latest := sent
		if have {
			latest = pending
		}
		switch {
		case info.Term != 0 && info.Term < top:
			continue // never step back to an older term
		case first:
			first = false
		case sameLeader(info, latest):
			continue
		}
		pending, have, top = info, true, max(top, info.Term)
	}
}

// sameLeader reports whether a and b describe the same leadership with the
// same value.
func sameLeader(a, b LeaderInfo) bool {
	return a.Term == b.Term && a.Owner == b.Owner && a.Value == b.Value
}
