package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sqllock/sqllock/dialect"
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
	versions dialect.VersionTable
}

var _ Locker = (*Optimistic)(nil)

// NewOptimistic returns an optimistic locker on d. The schema must have been
// migrated (see Migrate). It returns an error wrapping ErrUnsupported if d
// has no version table.
func NewOptimistic(d dialect.Dialect, opts Options) (*Optimistic, error) {
	if isNil(d) || d.DB() == nil {
		return nil, ErrNilDB
	}
	if opts.Fair {
		return nil, fmt.Errorf("%w: Options.Fair: FIFO queues are a feature of the lock table and semaphores", ErrUnsupported)
	}
	cat := d.Catalogue()
	if cat.Versions == nil {
		return nil, cat.Unsupported(d.Name(), "Versions")
	}
	o := &Optimistic{versions: cat.Versions}
	o.try = o.tryOnce
	// Waiters listen when the dialect announces the version table's
	// releases too.
	var notifier dialect.Notifier
	if cat.AnnouncesVersions {
		notifier = cat.Notifier
	}
	if err := o.init(StrategyOptimistic, d, o.versions, notifier, opts); err != nil {
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
		p := dialect.SwapParams{Name: name, Owner: owner, TTL: o.opts.TTL, Version: row.Version}
		var (
			token int64
			got   bool
		)
		start := time.Now()
		switch {
		case !exists:
			token, err = o.versions.Create(ctx, dialect.AcquireParams{Name: name, Owner: owner, TTL: o.opts.TTL})
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

// CheckUpdate turns the result of a version-checked write into an error:
// ErrConflict when it affected no row, err itself when err is not nil, nil
// otherwise. It takes ExecContext's results directly:
//
//	err := sqllock.CheckUpdate(tx.ExecContext(ctx,
//		`UPDATE items SET stock = ?, version = version + 1 WHERE id = ? AND version = ?`,
//		stock, id, version))
//
// The write must change the version column, as optimistic writes do anyway.
// That makes the affected-row count equal the matched-row count on MySQL and
// MariaDB whatever the DSN's clientFoundRows says: a matching row always
// changes.
func CheckUpdate(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrConflict
	}
	return nil
}

// Querier runs a query that returns at most one row. *sql.DB, *sql.Tx and
// *sql.Conn implement it.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ConflictOrMissing tells a moved version from a missing row after
// CheckUpdate reported ErrConflict. It runs query, which must select a row
// exactly when the target row exists (for example SELECT 1 FROM items WHERE
// id = ?), and returns ErrRowNotFound if it selects none, ErrConflict if it
// selects one, or the query's error. ErrRowNotFound does not wrap
// ErrConflict, so RetryOnConflict does not retry it.
func ConflictOrMissing(ctx context.Context, q Querier, query string, args ...any) error {
	var one any
	err := q.QueryRowContext(ctx, query, args...).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ErrRowNotFound
	case err != nil:
		return err
	}
	return ErrConflict
}

// RetryOptions bound RetryOnConflict. The zero value of each field selects
// its default.
type RetryOptions struct {
	// Attempts is how many times fn may run in all. Default: for
	// RetryOnConflict, no bound — it retries until ctx ends (every
	// conflict means another writer's update went through, so contention
	// drains: 200 buyers of one hot row all get their turn); for InTx, 10.
	Attempts int
	// MinBackoff is the cap of the first wait between attempts. Default
	// 1ms.
	MinBackoff time.Duration
	// MaxBackoff caps the doubling wait between attempts. Default 100ms.
	MaxBackoff time.Duration
	// Observer, if it is a Tracer, is told of every attempt and retry
	// (Tracer.StartAttempt, EndAttempt). Default: none.
	Observer Observer
}

const (
	defaultTxAttempts      = 10
	defaultRetryMinBackoff = time.Millisecond
	defaultRetryMaxBackoff = 100 * time.Millisecond
)

// withDefaults fills in the defaults; attempts is the default of Attempts
// (0: no bound).
func (o RetryOptions) withDefaults(attempts int) (RetryOptions, error) {
	if o.Attempts < 0 || o.MinBackoff < 0 || o.MaxBackoff < 0 {
		return o, fmt.Errorf("%w: retry attempts and backoffs must not be negative", ErrInvalidOptions)
	}
	if o.Attempts == 0 {
		o.Attempts = attempts
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = defaultRetryMinBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = max(defaultRetryMaxBackoff, o.MinBackoff)
	}
	if o.MaxBackoff < o.MinBackoff {
		return o, fmt.Errorf("%w: MaxBackoff %v is below MinBackoff %v", ErrInvalidOptions, o.MaxBackoff, o.MinBackoff)
	}
	return o, nil
}

// RetryOnConflict runs fn, the read and the version-checked write of an
// optimistic update, until it returns an error that does not wrap
// ErrConflict (nil included), which RetryOnConflict returns. Only conflicts
// are retried: any other error ends it at once.
//
// Between attempts it waits a random time up to a cap that starts at
// opts.MinBackoff and doubles up to opts.MaxBackoff ("full jitter"), so that
// writers that collided do not collide again in step. By default it retries
// until ctx ends, and then returns an error wrapping ctx.Err() and the last
// conflict: give ctx the deadline your caller can wait. With
// opts.Attempts set, it returns an error wrapping ErrConflict after that
// many conflicts.
//
// fn must do all its reads inside each call: a retry that reused the old
// version would conflict again.
func RetryOnConflict(ctx context.Context, opts RetryOptions, fn func(ctx context.Context) error) error {
	return retry(ctx, opts, OpRetryOnConflict, 0, ErrConflict, fn)
}

// retry runs fn until it returns an error that does not wrap retryable,
// waiting a fully jittered, doubling backoff between attempts. op names the
// operation for events; attempts is the default of opts.Attempts (0: until
// ctx ends).
func retry(ctx context.Context, opts RetryOptions, op string, attempts int, retryable error, fn func(ctx context.Context) error) error {
	opts, err := opts.withDefaults(attempts)
	if err != nil {
		return err
	}
	ev := newAttempts(opts.Observer, op)
	backoff := opts.MinBackoff
	var timer *time.Timer
	for attempt := 1; ; attempt++ {
		actx := ev.start(ctx, attempt)
		err := fn(actx)
		again := errors.Is(err, retryable) && attempt != opts.Attempts
		ev.end(actx, attempt, err, again)
		if !errors.Is(err, retryable) {
			return err
		}
		if attempt == opts.Attempts {
			return fmt.Errorf("sqllock: gave up after %d attempts: %w", attempt, err)
		}
		wait := rand.N(backoff + 1)
		backoff = min(2*backoff, opts.MaxBackoff)
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		if ctx.Err() != nil { // also when the timer fired as ctx ended: no run after that
			return fmt.Errorf("sqllock: retry after %d attempts: %w", attempt, errors.Join(ctx.Err(), err))
		}
	}
}
