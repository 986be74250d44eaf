// Package inspect lists, for operators, who holds sqllock's locks: every
// primitive's holders on one dialect, in one call, as the sqllock
// command's locks view shows them. It reads through the dialect's
// catalogue, so it knows the tables of the schema version the dialect
// migrates to, and writes nothing.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// Report is what Locks found.
type Report struct {
	// Holders are the holders of every primitive the dialect holds, by
	// name, then primitive: the leases held, or released within their
	// minimum hold, or expired and not yet taken over or reaped (see
	// dialect.LockInfo); one entry per holder of a semaphore or a
	// read/write lock; and the row locks of the pessimistic strategy
	// that the server shows.
	Holders []dialect.Holder
	// Unlisted, if not nil, says why the pessimistic strategy's row locks
	// are missing from Holders: the server shows none, or not to this
	// user. It wraps dialect.ErrUnsupported.
	Unlisted error
}

// Locks lists the holders of d's locks. A table the schema lacks (a
// schema older than the semaphores, say) is an error wrapping
// dialect.ErrSchemaMissing, but for the semaphores', which are left out.
func Locks(ctx context.Context, d dialect.Dialect) (Report, error) {
	var r Report
	if d == nil || d.DB() == nil {
		return r, dialect.ErrNilDB
	}
	tb, err := sqlrun.Open(d)
	if err != nil {
		return r, err
	}
	if err := r.leases(ctx, tb); err != nil {
		return Report{}, err
	}
	if err := r.semaphores(ctx, tb.Semaphores); err != nil {
		return Report{}, err
	}
	if err := r.rwlocks(ctx, tb.RWLocks); err != nil {
		return Report{}, err
	}
	if list := d.Catalogue().RowLocks; list != nil {
		rows, err := list(ctx)
		switch {
		case errors.Is(err, dialect.ErrUnsupported):
			r.Unlisted = err
		case err != nil:
			return Report{}, err
		}
		r.Holders = append(r.Holders, rows...)
	}
	sort.SliceStable(r.Holders, func(i, j int) bool {
		a, b := r.Holders[i], r.Holders[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Primitive < b.Primitive
	})
	return r, nil
}

// leases adds the lock table's leases, with their election values and
// tickets, and the version table's.
func (r *Report) leases(ctx context.Context, tb *sqlrun.Tables) error {
	infos, err := tb.Locks.List(ctx)
	if err != nil {
		return err
	}
	n := len(r.Holders)
	r.add("table", "exclusive", infos)
	locks := r.Holders[n:]
	if el := tb.Elections; el != nil {
		values, err := el.Values(ctx)
		if err != nil {
			return fmt.Errorf("listing elections: %w", err)
		}
		for i, h := range locks {
			if v, ok := values[dialect.Lease{Name: h.Name, Owner: h.Owner, Token: h.Token}]; ok {
				locks[i].Primitive, locks[i].Value = "election", v
			}
		}
	}
	// Fair and unfair waiters take tickets of the same queue.
	q := tb.Fair
	if q == nil {
		q = tb.Waking
	}
	if q != nil {
		waiting, err := q.Waiting(ctx)
		if err != nil {
			return fmt.Errorf("counting waiters: %w", err)
		}
		for i, h := range locks {
			locks[i].Waiters = waiting[h.Name]
		}
	}
	if vt := tb.Versions; vt != nil {
		infos, err := vt.List(ctx)
		if err != nil {
			return err
		}
		r.add("optimistic", "exclusive", infos)
	}
	return nil
}

// semaphores adds the semaphores' holders, with their limits.
func (r *Report) semaphores(ctx context.Context, sems sqlrun.SemaphoreTable) error {
	if sems == nil {
		return nil
	}
	infos, err := sems.List(ctx)
	switch {
	case errors.Is(err, dialect.ErrSchemaMissing):
		return nil
	case err != nil:
		return err
	}
	limits, err := sems.Limits(ctx)
	if err != nil {
		return fmt.Errorf("listing semaphores: %w", err)
	}
	n := len(r.Holders)
	r.add("semaphore", "shared", infos)
	for i := n; i < len(r.Holders); i++ {
		r.Holders[i].Limit = limits[r.Holders[i].Name]
	}
	return nil
}

// rwlocks adds the read/write locks' holders, shared for the read side.
func (r *Report) rwlocks(ctx context.Context, rw sqlrun.RWLockTable) error {
	if rw == nil {
		return nil
	}
	infos, err := rw.List(ctx)
	if err != nil {
		return err
	}
	readers, err := rw.Readers(ctx)
	if err != nil {
		return fmt.Errorf("listing read/write locks: %w", err)
	}
	shared := make(map[dialect.Lease]bool, len(readers))
	for _, l := range readers {
		shared[l] = true
	}
	n := len(r.Holders)
	r.add("rwlock", "exclusive", infos)
	for i := n; i < len(r.Holders); i++ {
		if h := &r.Holders[i]; shared[dialect.Lease{Name: h.Name, Owner: h.Owner, Token: h.Token}] {
			h.Mode = "shared"
		}
	}
	return nil
}

// add appends the leases of infos as holders of primitive in mode.
func (r *Report) add(primitive, mode string, infos []dialect.LockInfo) {
	for _, li := range infos {
		// The database's now is ExpiresAt - ExpiresIn.
		now := li.ExpiresAt.Add(-li.ExpiresIn)
		r.Holders = append(r.Holders, dialect.Holder{LockInfo: li, Primitive: primitive, Mode: mode, HeldFor: now.Sub(li.AcquiredAt)})
	}
}
