package sqllock

import (
	"context"
	"errors"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/observe"
)

// Optimistic is the optimistic strategy: a row per lock name carrying a
// version, an owner, a hold count and a lease expiry on the database clock,
// changed only by compare-and-swap. Acquiring reads the row and then updates
// it on the condition that the version is still the one read and the lease
// is free or expired:
//
//	UPDATE sqllock_versions SET owner = ?, version = version + 1, ...
//	WHERE name = ? AND version = ? AND expires_at <= <database now>
//
// One row changed means acquired; none means another owner got there first.
// The version is the fencing token. Rows are created on first use and
// deleted by the Reaper once released or expired; a name's new row starts
// above every version it had before, so a name's version only grows.
//
// Renewal, loss, release and reentrancy behave exactly as with Table: both
// are the same lease machinery over a different table. Compared with Table,
// an uncontended acquire costs one more round trip (the read), and a refused
// one costs one read and no write. Waiters poll, except on a dialect that
// announces the version table's releases (dialect.Catalogue.AnnouncesVersions: MySQL
// and MariaDB), where they wait for the wake-up as Table's do.
//
// An Optimistic is safe for concurrent use.
type Optimistic struct {
	leaseLocker
	versions sqlrun.VersionTable
}

var _ Locker = (*Optimistic)(nil)

// NewOptimistic returns an optimistic locker on d. The schema must have been
// migrated (see Migrate). It returns an error wrapping ErrUnsupported if d
// has no version table.
func NewOptimistic(d dialect.Dialect, opts OptimisticOptions) (*Optimistic, error) {
	cat, tb, err := open(d)
	if err != nil {
		return nil, err
	}
	if tb.Versions == nil {
		return nil, cat.Unsupported(d.Name(), "Versions")
	}
	o := &Optimistic{versions: tb.Versions}
	o.try = attempts{o}
	// Waiters listen when the dialect announces the version table's
	// releases too.
	var notifier dialect.Notifier
	if cat.AnnouncesVersions {
		notifier = cat.Notifier
	}
	if err := o.init(observe.StrategyOptimistic, d, o.versions, notifier, opts.LeaseOptions.config(opts.MinHold, false)); err != nil {
		return nil, err
	}
	return o, nil
}

// maxSwapAttempts bounds how often one attempt re-reads a row that changed
// between its read and its swap. A lost swap means another owner acted on
// the row, so the next read nearly always settles the question.
const maxSwapAttempts = 4

// tryOnce reads the lock's row and swaps it, re-reading when another
// process changed the row in between, a bounded number of times. A refusal
// reports how long the holder's lease has left, as read.
func (o *Optimistic) tryOnce(ctx context.Context, name, owner string, _ bool) (int64, time.Time, time.Duration, error) {
	for range maxSwapAttempts {
		row, exists, err := o.versions.Read(ctx, name)
		if err != nil {
			return 0, time.Time{}, 0, acquireError(ctx, name, err)
		}
		p := dialect.SwapParams{Name: name, Owner: owner, TTL: o.eng.Config().TTL, Version: row.Version}
		var (
			token int64
			got   bool
		)
		start := time.Now()
		switch {
		case !exists:
			token, err = o.versions.Create(ctx, dialect.AcquireParams{Name: name, Owner: owner, TTL: o.eng.Config().TTL})
			got = token != 0
		case !row.Live:
			token, err = o.versions.Take(ctx, p)
			got = token != 0
		case row.Owner == owner && row.Holds > 0:
			token = row.Version
			got, err = o.versions.Reenter(ctx, p)
		default:
			return 0, start, row.Remaining, ErrLocked
		}
		if err != nil && !errors.Is(err, dialect.ErrTransient) {
			return 0, start, 0, acquireError(ctx, name, err)
		}
		if got {
			return token, start, 0, nil
		}
	}
	return 0, time.Time{}, -1, ErrLocked
}
