package engine

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/observe"
)

// The errors the tests' leases report with: in production, the root
// package's ErrLockLost and ErrNotHeld.
var (
	errLockLost = errors.New("lock lost")
	errNotHeld  = errors.New("lock not held")
)

// withErrors returns c with the tests' errors.
func withErrors(c Config) Config {
	c.Lost, c.NotHeld = errLockLost, errNotHeld
	return c
}

// okStore accepts every lease statement.
type okStore struct{}

func (okStore) RenewMany(_ context.Context, ls []dialect.Lease, _ time.Duration) ([]sqlrun.Renewal, error) {
	rs := make([]sqlrun.Renewal, len(ls))
	for i := range rs {
		rs[i].OK = true
	}
	return rs, nil
}
func (okStore) Release(context.Context, dialect.Lease, time.Duration) (bool, error) { return true, nil }
func (okStore) Guard(context.Context, *sql.Tx, dialect.Lease) (bool, error)         { return true, nil }
func (okStore) List(context.Context) ([]dialect.LockInfo, error)                    { return nil, nil }

// A holder that asks after its trust window has passed learns of the loss
// from Err itself, even though the renewal timer has not run (here it is an
// hour away), as after a SIGSTOP longer than the TTL.
func TestLeaseContextErrChecksTrustWindow(t *testing.T) {
	t.Parallel()
	opts, err := withErrors(Config{TTL: 3 * time.Hour}).WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	ls := NewLeases(okStore{}, opts)
	fresh := ls.Grant(t.Context(), "fresh", "o", 1, time.Now()).Lease
	stale := ls.Grant(t.Context(), "stale", "o", 2, time.Now().Add(-opts.TTL)).Lease

	if err := fresh.Context().Err(); err != nil {
		t.Fatalf("fresh lease: Err() = %v, want nil", err)
	}
	ctx := stale.Context()
	if err := ctx.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("stale lease: Err() = %v, want context.Canceled", err)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, errLockLost) {
		t.Fatalf("stale lease: cause %v, want errLockLost", cause)
	}
	select {
	case <-stale.Context().Done():
	default:
		t.Fatal("Err reported the loss but Done is not closed")
	}
	for _, l := range []*Lease{fresh, stale} {
		if err := l.ReleaseHold(context.Background()); err != nil {
			t.Errorf("Release %s: %v", l.Ident().Name, err)
		}
	}
}

// Err must report the loss even while the renewal timer is ending the lease
// at the same moment (as both wake up when a stopped process resumes): it
// must never see the lease ended and its context not yet cancelled.
func TestLeaseContextErrRacesLose(t *testing.T) {
	t.Parallel()
	opts, err := withErrors(Config{TTL: 3 * time.Hour}).WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	ls := NewLeases(okStore{}, opts)
	for i := range 2000 {
		l := ls.Grant(t.Context(), "n", "o", int64(i+1), time.Now().Add(-opts.TTL)).Lease
		start := make(chan struct{})
		done := make(chan struct{})
		go func() {
			<-start
			l.lose(observe.LostTrustWindow, "test")
			close(done)
		}()
		close(start)
		if err := l.Context().Err(); err == nil {
			t.Fatalf("iteration %d: Err() = nil after the trust window", i)
		}
		<-done
	}
}

// guardStore counts Guard statements, and runs during each the function
// during, if set.
type guardStore struct {
	okStore
	guards int
	during func()
}

func (s *guardStore) Guard(context.Context, *sql.Tx, dialect.Lease) (bool, error) {
	s.guards++
	if s.during != nil {
		s.during()
	}
	return true, nil
}

// A lease whose trust window has passed is refused by Guard without a
// statement, even though the database (here: a store that accepts every
// guard) still holds it; one whose loss is reported while the guard
// statement runs is refused when it returns (issue 28 item 7).
func TestGuardRefusesLostLeaseLocally(t *testing.T) {
	t.Parallel()
	opts, err := withErrors(Config{TTL: 3 * time.Hour}).WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	store := &guardStore{}
	ls := NewLeases(store, opts)
	stale := ls.Grant(t.Context(), "stale", "o", 1, time.Now().Add(-opts.TTL)).Lease
	if err := stale.Guard(t.Context(), nil); !errors.Is(err, errLockLost) {
		t.Fatalf("Guard after the trust window: %v, want errLockLost", err)
	}
	if store.guards != 0 {
		t.Fatalf("Guard after the trust window sent %d statements, want 0", store.guards)
	}
	if cause := context.Cause(stale.Context()); !errors.Is(cause, errLockLost) {
		t.Fatalf("the lock's context ended with %v, want errLockLost", cause)
	}

	fresh := ls.Grant(t.Context(), "fresh", "o", 2, time.Now()).Lease
	if err := fresh.Guard(t.Context(), nil); err != nil {
		t.Fatalf("Guard of a live lease: %v", err)
	}
	store.during = func() { fresh.lose(observe.LostRenewFailed, "test") }
	if err := fresh.Guard(t.Context(), nil); !errors.Is(err, errLockLost) {
		t.Fatalf("Guard while the loss was reported: %v, want errLockLost", err)
	}
	store.during = nil
	if err := fresh.Guard(t.Context(), nil); !errors.Is(err, errLockLost) {
		t.Fatalf("Guard after a reported loss: %v, want errLockLost", err)
	}
	if store.guards != 2 {
		t.Fatalf("%d guard statements, want 2", store.guards)
	}
}
