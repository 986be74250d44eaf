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
	return waitFor(ctx, name, t.opts.MaxBackoff, func() (*Lock, time.Duration, error) {
		lock, err := t.try(ctx, name, owner)
		if !errors.Is(err, ErrLocked) {
			return lock, 0, err
		}
		if left, ok, err := t.d.Remaining(ctx, name); err == nil && ok {
			return nil, left, ErrLocked
		}
		return nil, -1, ErrLocked
	})
}

// waitFor calls try until it returns anything but ErrLocked, or ctx ends.
// try also reports how long the holder's lease has left, or a negative
// duration when that is unknown. Between attempts waitFor sleeps for that
// long or a jittered, exponentially growing backoff capped at maxBackoff,
// whichever is sooner.
func waitFor(ctx context.Context, name string, maxBackoff time.Duration, try func() (*Lock, time.Duration, error)) (*Lock, error) {
	backoff := minBackoff
	var timer *time.Timer
	for {
		lock, left, err := try()
		if !errors.Is(err, ErrLocked) {
			return lock, err
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, maxBackoff)
		if left >= 0 && left < wait {
			wait = left
		}
		wait = max(wait, time.Millisecond)
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
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
			return nil, acquireError(ctx, name, err)
		}
		if token == 0 {
			return nil, ErrLocked
		}
		return t.leases.grant(ctx, name, owner, token, start), nil
	}
}

// acquireError describes a failed acquire statement, joining ctx's error
// when ctx ended meanwhile.
func acquireError(ctx context.Context, name string, err error) error {
	if ctx.Err() != nil {
		err = errors.Join(ctx.Err(), err)
	}
	return fmt.Errorf("sqllock: acquire %q: %w", name, err)
}

// List returns the currently held locks (including expired leases not yet
// taken over), ordered by name, with times from the database clock.
func (t *Table) List(ctx context.Context) ([]LockInfo, error) {
	return t.d.List(ctx)
}
