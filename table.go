package sqllock

import (
	"context"
	"errors"
	"fmt"
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
	room   *waitRoom
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
	t := &Table{d: d, opts: opts, owners: newOwnerSource(), leases: newLeases(d, opts), room: newWaitRoom(d, opts)}
	t.leases.freed = t.room.kick
	return t, nil
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

// Acquire acquires name, waiting while another owner holds it. Waiting
// calls of one Table line up per name, and only the first of them asks the
// database, holding no connection in between: it retries when this Table
// releases the lock, when the database announces a release (PostgreSQL
// LISTEN/NOTIFY, on one connection per Table while anyone waits), when the
// holder's lease ends, or after a jittered, exponentially growing backoff
// capped at Options.MaxBackoff (while notifications arrive, only when the
// lease ends).
// When ctx ends first it returns an error wrapping ctx.Err().
func (t *Table) Acquire(ctx context.Context, name string) (*Lock, error) {
	owner, err := t.prepare(ctx, name)
	if err != nil {
		return nil, err
	}
	return t.room.wait(ctx, name, func() (*Lock, time.Duration, error) {
		lock, err := t.try(ctx, name, owner)
		if !errors.Is(err, ErrLocked) {
			return lock, 0, err
		}
		left, ok, err := t.d.Remaining(ctx, name)
		switch {
		case err != nil:
			return nil, -1, ErrLocked
		case !ok:
			// The row was reaped since the attempt: the lock is free,
			// and no release will announce it. Try again at once.
			return nil, 0, ErrLocked
		}
		return nil, left, ErrLocked
	})
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
