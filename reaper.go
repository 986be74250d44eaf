package sqllock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/observe"
)

// ReaperOptions configure a Reaper. The zero value of each field selects
// its default.
type ReaperOptions struct {
	// Interval between passes. Default 1m. Each wait is jittered by up to
	// 10% so that reapers in many processes drift apart.
	Interval time.Duration
	// BatchSize bounds the rows one batch deletes from each table.
	// Default 1000.
	BatchSize int
	// Logger receives a line per pass that deleted rows, and errors.
	// Default: none.
	Logger *slog.Logger
	// Observer, if it implements observe.ReapObserver, is told of every
	// pass. Default: none.
	Observer observe.Observer
}

// Reaper deletes the rows that no lock needs any more, in bounded batches,
// from every table of the dialect's strategies: expired and released rows
// of the lock table ([Table]) and of the version table ([Optimistic]), on
// database time, and rows of the row-lock table ([Pessimistic]) that no
// transaction holds or waits for. Without it, these tables keep a row for
// every name ever locked. It only reclaims space: takeover of an expired
// lease never waits for it. It never deletes a live lease or a held row
// lock, never lets a later fencing token or version for a name be smaller
// than a deleted one, and may run in any number of processes at once.
//
// While it deletes an idle row of the row-lock table, for the length of one
// batch (PostgreSQL) or of a transaction of at most 100 rows (MySQL), a
// pessimistic TryAcquire of that name is refused with [ErrLocked]; a
// waiting Acquire waits, and creates the row again.
//
// A Reaper is safe for concurrent use; Run is meant to run in one goroutine
// the caller owns, until its context ends.
type Reaper struct {
	d    dialect.Dialect
	opts ReaperOptions
	obs  observe.ReapObserver // nil: none
}

// NewReaper returns a reaper for d's tables.
func NewReaper(d dialect.Dialect, opts ReaperOptions) (*Reaper, error) {
	if isNil(d) || d.DB() == nil {
		return nil, ErrNilDB
	}
	if opts.Interval < 0 || opts.BatchSize < 0 {
		return nil, fmt.Errorf("%w: reaper interval and batch size must not be negative", ErrInvalidOptions)
	}
	if err := observe.Check(opts.Observer); err != nil {
		return nil, fmt.Errorf("%w: ReaperOptions.Observer: %w", ErrInvalidOptions, err)
	}
	if opts.Interval == 0 {
		opts.Interval = time.Minute
	}
	if opts.BatchSize == 0 {
		opts.BatchSize = 1000
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reaper{d: d, opts: opts}
	r.obs, _ = opts.Observer.(observe.ReapObserver)
	return r, nil
}

// Reap runs one pass: it deletes batches until a batch deletes fewer than
// half of BatchSize rows, or ctx ends, and returns how many rows it deleted
// from all tables. A batch can come back short while more rows wait behind
// it, by the rows it had to pass over (those that a concurrent acquire of
// their name is busy with): the pass goes on after such a batch, and ends
// only when the rows left to delete no longer fill half a batch. A row that
// stays busy is deleted by no batch, so it cannot keep a pass going. A batch
// that the database rolled back to break a deadlock with acquirers
// (dialect.ErrTransient) is tried again, a few times.
func (r *Reaper) Reap(ctx context.Context) (int, error) {
	if r.obs == nil {
		return r.reap(ctx)
	}
	start := time.Now()
	n, err := r.reap(ctx)
	r.obs.Reaped(ctx, observe.ReapEvent{Dialect: r.d.Name(), Deleted: n, Took: time.Since(start), Err: err})
	return n, err
}

func (r *Reaper) reap(ctx context.Context) (int, error) {
	total, retries := 0, 0
	for {
		n, err := r.d.Reap(ctx, dialect.ReapParams{Limit: r.opts.BatchSize})
		total += n
		if errors.Is(err, dialect.ErrTransient) && retries < maxTransientRetries {
			retries++
			continue
		}
		if err != nil {
			return total, fmt.Errorf("sqllock: reap: %w", err)
		}
		if !fullEnough(n, r.opts.BatchSize) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// fullEnough reports whether a batch that deleted n rows of at most limit
// per table calls for another: at least half of limit. A batch short by a
// few rows that others held leaves more behind it; a batch that found less
// than half of limit to delete means the backlog is gone, and a reaper
// beside a steady churn of releases would otherwise never end its pass.
func fullEnough(n, limit int) bool { return 2*n >= limit }

// Run reaps at once and then every Interval until ctx ends, logging errors
// rather than stopping on them. It returns nil when ctx is done.
func (r *Reaper) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		start := time.Now()
		n, err := r.Reap(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			r.opts.Logger.Error("sqllock: reaper pass failed", "deleted", n, "err", err)
		case n > 0:
			r.opts.Logger.Info("sqllock: reaped expired and released lock rows", "deleted", n, "took", time.Since(start))
		}
		jitter := time.Duration(rand.Int64N(int64(r.opts.Interval)/10 + 1))
		timer.Reset(r.opts.Interval - jitter)
	}
}
