package sqllock

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
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
	multi  sqlrun.MultiLockTable // nil: the dialect cannot acquire sets (lockset.go)
	// campaigns, set on an Election's table, grants with the value that
	// Campaign puts on the context (election.go).
	campaigns sqlrun.Elections
}

var _ Locker = (*Table)(nil)

// NewTable returns a lock-table locker on d. The schema must have been
// migrated (see Migrate).
func NewTable(d dialect.Dialect, opts TableOptions) (*Table, error) {
	cat, tb, err := open(d)
	if err != nil {
		return nil, err
	}
	t, err := newTable(d, cat, tb, opts.config())
	if err != nil || opts.Fair {
		return t, err
	}
	if q := tb.Waking; q != nil {
		t.waking = newFairQueue(&t.leaseLocker, wakingTickets{q, t.locks, t.eng.Opts.TTL})
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
// store a Campaign's value), and the lock table of NewElection.
func newTable(d dialect.Dialect, cat dialect.Catalogue, tb *sqlrun.Tables, opts engine.Config) (*Table, error) {
	t := &Table{locks: tb.Locks}
	if opts.Fair {
		return newFairTable(t, d, cat, tb, opts)
	}
	t.multi = tb.Multi
	t.eng.Strategy = attempts{t}
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

// maxTransientRetries bounds immediate retries of an acquire statement that
// the database rolled back (deadlock, serialization failure).
const maxTransientRetries = 3

// tryOnce runs the acquire statement, and after a refusal, for a caller
// that will wait, asks how long the holder's lease has left (which marks the
// row as waited for, so that its release is announced).
func (t *Table) tryOnce(ctx context.Context, name, owner string, waiting bool) (int64, time.Time, time.Duration, error) {
	p := dialect.AcquireParams{Name: name, Owner: owner, TTL: t.eng.Opts.TTL}
	acquire := func() (int64, error) { return t.locks.Acquire(ctx, p) }
	if t.campaigns != nil {
		value, _ := ctx.Value(valueKey{}).(string)
		acquire = func() (int64, error) { return t.campaigns.Campaign(ctx, p, value) }
	}
	return attemptLease(ctx, name, waiting, t.eng.Opts.Logger, observe.StrategyTable, acquire,
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
