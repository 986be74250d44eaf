package sqllock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"time"

	"github.com/sqllock/sqllock/dialect"
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
type Table struct {
	d      dialect.Dialect
	opts   Options
	owners *ownerSource
	leases *leases
}

var _ Locker = (*Table)(nil)

// NewTable returns a lock-table locker on d. The schema must have been
// migrated (see Migrate).
func NewTable(d dialect.Dialect, opts Options) (*Table, error) {
	if isNil(d) || d.DB() == nil {
		return nil, ErrNilDB
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Table{d: d, opts: opts, owners: newOwnerSource(), leases: newLeases(d, opts)}, nil
}

func isNil(d dialect.Dialect) bool {
	if d == nil {
		return true
	}
	v := reflect.ValueOf(d)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// TryAcquire acquires name if it is free, expired, or held by the owner on
// ctx (see WithOwner), in one statement; otherwise it returns ErrLocked.
func (t *Table) TryAcquire(ctx context.Context, name string) (*Lock, error) {
	owner, err := t.prepare(ctx, name)
	if err != nil {
		return nil, err
	}
	return t.try(ctx, name, owner)
}

// Acquire acquires name, waiting while another owner holds it. Between
// attempts it sleeps until the holder's lease ends or a jittered,
// exponentially growing backoff (capped at Options.MaxBackoff) passes,
// whichever is sooner, holding no connection meanwhile. When ctx ends first
// it returns an error wrapping ctx.Err().
func (t *Table) Acquire(ctx context.Context, name string) (*Lock, error) {
	owner, err := t.prepare(ctx, name)
	if err != nil {
		return nil, err
	}
	backoff := minBackoff
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		lock, err := t.try(ctx, name, owner)
		if !errors.Is(err, ErrLocked) {
			return lock, err
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, t.opts.MaxBackoff)
		if left, ok, err := t.d.Remaining(ctx, name); err == nil && ok && left < wait {
			wait = left
		}
		timer.Reset(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("sqllock: acquire %q: %w", name, ctx.Err())
		case <-timer.C:
		}
	}
}

func (t *Table) prepare(ctx context.Context, name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	return t.owners.owner(ctx)
}

// maxTransientRetries bounds immediate retries of an acquire statement that
// the database rolled back (deadlock, serialization failure).
const maxTransientRetries = 3

func (t *Table) try(ctx context.Context, name, owner string) (*Lock, error) {
	p := dialect.AcquireParams{Name: name, Owner: owner, TTL: t.opts.TTL}
	for attempt := 0; ; attempt++ {
		start := time.Now()
		token, err := t.d.Acquire(ctx, p)
		if errors.Is(err, dialect.ErrTransient) && attempt < maxTransientRetries {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("sqllock: acquire %q: %w", name, errors.Join(ctx.Err(), err))
			}
			return nil, fmt.Errorf("sqllock: acquire %q: %w", name, err)
		}
		if token == 0 {
			return nil, ErrLocked
		}
		return t.leases.grant(ctx, name, owner, token, start), nil
	}
}

// List returns the currently held locks (including expired leases not yet
// taken over), ordered by name, with times from the database clock.
func (t *Table) List(ctx context.Context) ([]LockInfo, error) {
	return t.d.List(ctx)
}
