package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/observe"
)

// memTable is a lease table and a strategy in memory: one owner per name,
// granted a growing token, holding it as many times as it acquired it.
type memTable struct {
	okStore
	mu    sync.Mutex
	holds map[string]*memHold
	token int64
}

type memHold struct {
	owner string
	token int64
	n     int
}

func (m *memTable) TryOnce(_ context.Context, name, owner string, _ bool) (int64, time.Time, time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	start := time.Now()
	h := m.holds[name]
	switch {
	case h == nil:
		m.token++
		h = &memHold{owner: owner, token: m.token}
		m.holds[name] = h
	case h.owner != owner:
		return 0, start, time.Hour, dialect.ErrLocked
	}
	h.n++
	return h.token, start, 0, nil
}

func (m *memTable) Release(_ context.Context, l dialect.Lease, _ time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.holds[l.Name]
	if h == nil || h.token != l.Token {
		return false, nil
	}
	if h.n--; h.n == 0 {
		delete(m.holds, l.Name)
	}
	return true, nil
}

// takeOver gives name to another owner, as a takeover of an expired lease
// would.
func (m *memTable) takeOver(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.token++
	m.holds[name] = &memHold{owner: "other", token: m.token, n: 1}
}

// A Locker on its own: TryAcquire grants or refuses at once; Acquire
// waits in the room and is woken by the holder's release through the same
// locker (not by its lease's end, an hour away); a released lease's
// context ends with Config.NotHeld, and a second release reports
// Config.Lost.
func TestLockerAcquireRelease(t *testing.T) {
	t.Parallel()
	m := &memTable{holds: make(map[string]*memHold)}
	var l Locker
	if err := l.Init(observe.StrategyTable, nil, m, nil, withErrors(Config{TTL: 3 * time.Hour})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	first, err := l.Acquire(ctx, Call{Name: "n", Owner: "a", Try: m})
	if err != nil || first.Lease == nil || first.Reentered {
		t.Fatalf("TryAcquire: %+v, %v; want a new lease", first, err)
	}
	if g, err := l.Acquire(ctx, Call{Name: "n", Owner: "b", Try: m}); !errors.Is(err, dialect.ErrLocked) || g.Lease != nil {
		t.Fatalf("TryAcquire of a held name: %+v, %v; want ErrLocked", g, err)
	}
	again, err := l.Acquire(ctx, Call{Name: "n", Owner: "a", Try: m})
	if err != nil || again.Lease != first.Lease || !again.Reentered {
		t.Fatalf("TryAcquire by the holder: %+v, %v; want the same lease, re-entered", again, err)
	}

	got := make(chan Grant, 1)
	go func() {
		g, err := l.Acquire(ctx, Call{Name: "n", Owner: "b", Try: m, Wait: true})
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	for range 2 {
		if err := first.Lease.ReleaseHold(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if cause := context.Cause(first.Lease.Context()); !errors.Is(cause, errNotHeld) {
		t.Fatalf("released lease's context: cause %v, want Config.NotHeld", cause)
	}
	g := <-got
	if g.Lease == nil || g.Lease.Ident().Owner != "b" || g.Lease.Ident().Token <= first.Lease.Ident().Token {
		t.Fatalf("Acquire after the release: %+v", g.Lease)
	}
	if err := g.Lease.ReleaseHold(ctx); err != nil {
		t.Fatal(err)
	}
	// The database no longer knows the lease: the release reports it lost.
	h, err := l.Acquire(ctx, Call{Name: "m", Owner: "a", Try: m})
	if err != nil {
		t.Fatal(err)
	}
	m.takeOver("m")
	if err := h.Lease.ReleaseHold(ctx); !errors.Is(err, errLockLost) {
		t.Fatalf("release of a lease taken over: %v, want Config.Lost", err)
	}
}

// Config.WithDefaults refuses a Config without the errors to report.
func TestConfigNeedsErrors(t *testing.T) {
	t.Parallel()
	if _, err := (Config{}).WithDefaults(); err == nil {
		t.Fatal("WithDefaults without Lost and NotHeld: nil error")
	}
	if _, err := withErrors(Config{}).WithDefaults(); err != nil {
		t.Fatal(err)
	}
}
