package main

import (
	"context"
	"errors"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

// The read/write lock in run: --shared takes its read side, --exclusive
// its write side, for the lease strategy (the default, table). Without
// either flag run takes the table lock, as it always did; the cross-strategy
// check below makes it exclude the read/write lock's holders too.

// strategyRWLock is run's strategy for the read/write lock, chosen by
// --shared or --exclusive with the table strategy.
const strategyRWLock = "rwlock"

// rwSide returns run's strategy for the flags: strategy, or the read/write
// lock when --shared or --exclusive asks for a side of a lease-based lock.
func rwSide(strategy string, shared, exclusive bool) (string, error) {
	switch {
	case shared && exclusive:
		return "", usageError{msg: "--shared and --exclusive contradict each other: give one"}
	case strategy == "pessimistic":
		return strategy, nil
	case (shared || exclusive) && strategy != "table":
		return "", usageError{msg: "--shared and --exclusive need --strategy table (the read/write lock) or pessimistic"}
	case shared || exclusive:
		return strategyRWLock, nil
	}
	return strategy, nil
}

// newRWLock builds the read/write locker of run.
func newRWLock(d dialect.Dialect, opts sqllock.LeaseOptions) (sqllock.Locker, error) {
	return sqllock.NewRWLock(d, opts)
}

// heldAsRWLock reports whether another process holds either side of the
// name's read/write lock, by taking its write side at once and giving it
// back. A dialect without read/write locks has no holders.
func (r *runner) heldAsRWLock(ctx context.Context, t *target) (bool, error) {
	if t.d.Catalogue().RWLocks == nil { // TiDB
		return false, nil
	}
	l, err := sqllock.NewRWLock(t.d, sqllock.LeaseOptions{TTL: r.ttl})
	if err != nil {
		return false, err
	}
	probe, err := l.TryAcquire(ctx, r.name)
	switch {
	case errors.Is(err, sqllock.ErrLocked):
		return true, nil
	case err != nil:
		return false, err
	}
	return false, probe.Release(ctx)
}
