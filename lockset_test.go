package sqllock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/observe"
)

// newTable returns a lock-table locker on e's dialect.
func (e *env) newTable(t *testing.T, opts sqllock.TableOptions) *sqllock.Table {
	t.Helper()
	l, err := sqllock.NewTable(e.d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// tokens returns the tokens of a set's locks, by name.
func tokens(s *sqllock.LockSet) map[string]int64 {
	m := map[string]int64{}
	for _, k := range s.Locks() {
		m[k.Name()] = k.Token()
	}
	return m
}

func TestTryAcquireAllIsAllOrNothing(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.newTable(t, sqllock.TableOptions{})
		set, err := l.TryAcquireAll(ctx, "c", "a", "b")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, k := range set.Locks() {
			names = append(names, k.Name())
			if k.Token() <= 0 {
				t.Fatalf("%s: token %d", k.Name(), k.Token())
			}
		}
		if !slices.Equal(names, []string{"c", "a", "b"}) {
			t.Fatalf("Locks() names %v, want the order asked for", names)
		}
		first := tokens(set)

		other := e.newTable(t, sqllock.TableOptions{})
		_, err = other.TryAcquireAll(ctx, "d", "c")
		if !errors.Is(err, sqllock.ErrLocked) || !strings.Contains(err.Error(), `"c"`) {
			t.Fatalf("a set overlapping a held one: %v, want ErrLocked naming \"c\"", err)
		}
		// Nothing of the refused set is held.
		d, err := other.TryAcquire(ctx, "d")
		if err != nil {
			t.Fatalf("d after a refused set: %v", err)
		}
		if err := d.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if set.Context().Err() != nil {
			t.Fatal("the set's context ended while held")
		}
		if err := set.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if cause := context.Cause(set.Context()); cause != sqllock.ErrNotHeld {
			t.Fatalf("released set's context cause %v, want ErrNotHeld", cause)
		}
		if err := set.Release(ctx); !errors.Is(err, sqllock.ErrNotHeld) {
			t.Fatalf("second Release: %v, want ErrNotHeld", err)
		}
		for _, k := range set.Locks() {
			if k.Context().Err() == nil {
				t.Fatalf("%s: context alive after the set's release", k.Name())
			}
		}
		again, err := other.TryAcquireAll(ctx, "c", "d", "a")
		if err != nil {
			t.Fatal(err)
		}
		defer again.Release(ctx)
		for name, tok := range tokens(again) {
			if old, ok := first[name]; ok && tok <= old {
				t.Fatalf("%s: token %d after release, want > %d", name, tok, old)
			}
		}
	})
}

func TestAcquireAllRefusesBadSets(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.newTable(t, sqllock.TableOptions{})
		many := make([]string, sqllock.MaxLockSet+1)
		for i := range many {
			many[i] = fmt.Sprint("n", i)
		}
		for _, c := range []struct {
			names []string
			want  error
		}{
			{nil, sqllock.ErrInvalidOptions},
			{many, sqllock.ErrInvalidOptions},
			{[]string{"a", "b", "a"}, sqllock.ErrInvalidName},
			{[]string{"a", ""}, sqllock.ErrInvalidName},
			{[]string{"a", "b\x00"}, sqllock.ErrInvalidName},
		} {
			if _, err := l.TryAcquireAll(ctx, c.names...); !errors.Is(err, c.want) {
				t.Errorf("TryAcquireAll(%d names): %v, want %v", len(c.names), err, c.want)
			}
			if _, err := l.AcquireAll(ctx, c.names...); !errors.Is(err, c.want) {
				t.Errorf("AcquireAll(%d names): %v, want %v", len(c.names), err, c.want)
			}
		}
		if _, err := l.TryAcquireAll(sqllock.WithOwner(ctx, ""), "a"); !errors.Is(err, sqllock.ErrInvalidOwner) {
			t.Errorf("empty owner: %v, want ErrInvalidOwner", err)
		}
		if infos, err := l.List(ctx); err != nil || len(infos) != 0 {
			t.Fatalf("refused sets left locks: %v, %v", infos, err)
		}
	})
}

// AcquireAll waits for the lock that refuses it without holding the others,
// and gets the whole set once it is released.
func TestAcquireAllWaitsWithoutPartialHolds(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.newTable(t, sqllock.TableOptions{})
		b, err := l.TryAcquire(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		var set *sqllock.LockSet
		go func() {
			var err error
			set, err = e.newTable(t, sqllock.TableOptions{}).AcquireAll(ctx, "a", "b", "c")
			got <- err
		}()
		// While it waits, a and c stay free.
		probe := e.newTable(t, sqllock.TableOptions{})
		for range 3 {
			k, err := probe.TryAcquireAll(ctx, "a", "c")
			if err != nil {
				t.Fatalf("a and c while the set waits: %v", err)
			}
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case err := <-got:
			t.Fatalf("AcquireAll returned (%v) while b was held", err)
		default:
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("AcquireAll never got the set")
		}
		if got := tokens(set)["b"]; got <= b.Token() {
			t.Fatalf("b's token in the set %d, want > %d", got, b.Token())
		}
		if err := set.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestAcquireAllHonoursContext(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.newTable(t, sqllock.TableOptions{})
		b, err := l.TryAcquire(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		defer b.Release(ctx)
		wctx, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() {
			_, err := l.AcquireAll(wctx, "a", "b")
			got <- err
		}()
		cancel()
		select {
		case err := <-got:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("AcquireAll after cancel: %v, want context.Canceled", err)
			}
		case <-ctx.Done():
			t.Fatal("AcquireAll ignored its context")
		}
		a, err := l.TryAcquire(ctx, "a")
		if err != nil {
			t.Fatalf("a after a cancelled set: %v", err)
		}
		_ = a.Release(ctx)
	})
}

// A set's context ends when any of its leases is lost; its Release frees
// the others and reports the loss.
func TestLockSetLoss(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.newTable(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute, RenewInterval: 100 * time.Millisecond}})
		set, err := l.TryAcquireAll(ctx, "x", "y")
		if err != nil {
			t.Fatal(err)
		}
		e.expire(t, "y")
		thief, err := e.newTable(t, sqllock.TableOptions{}).TryAcquire(ctx, "y")
		if err != nil {
			t.Fatal(err)
		}
		defer thief.Release(ctx)
		select {
		case <-set.Done():
		case <-ctx.Done():
			t.Fatal("the set's context never ended")
		}
		if cause := context.Cause(set.Context()); cause != sqllock.ErrLockLost {
			t.Fatalf("cause %v, want ErrLockLost", cause)
		}
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := set.Guard(ctx, tx); !errors.Is(err, sqllock.ErrLockLost) {
			t.Fatalf("Guard of a set with a lost lease: %v, want ErrLockLost", err)
		}
		_ = tx.Rollback()
		if err := set.Release(ctx); !errors.Is(err, sqllock.ErrLockLost) {
			t.Fatalf("Release: %v, want ErrLockLost", err)
		}
		x, err := e.newTable(t, sqllock.TableOptions{}).TryAcquire(ctx, "x")
		if err != nil {
			t.Fatalf("x after the set's release: %v", err)
		}
		_ = x.Release(ctx)
	})
}

func TestLockSetGuard(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.newTable(t, sqllock.TableOptions{})
		set, err := l.TryAcquireAll(ctx, "g1", "g2")
		if err != nil {
			t.Fatal(err)
		}
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := set.Guard(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := set.Release(ctx); err != nil {
			t.Fatal(err)
		}
		tx, err = e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := set.Guard(ctx, tx); !errors.Is(err, sqllock.ErrNotHeld) {
			t.Fatalf("Guard after Release: %v, want ErrNotHeld", err)
		}
	})
}

// Under WithOwner, a name the owner holds is re-entered by a set; the set's
// release drops only its own holds.
func TestLockSetReentry(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := sqllock.WithOwner(ctxT(t), "owner-1")
		l := e.newTable(t, sqllock.TableOptions{})
		a, err := l.Acquire(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		set, err := l.AcquireAll(ctx, "a", "b")
		if err != nil {
			t.Fatal(err)
		}
		if got := tokens(set)["a"]; got != a.Token() {
			t.Fatalf("re-entered a: token %d, want %d", got, a.Token())
		}
		if got := holds(t, l, "a"); got != 2 {
			t.Fatalf("a's holds %d, want 2", got)
		}
		if err := set.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if a.Context().Err() != nil {
			t.Fatal("a's first hold ended with the set")
		}
		other := e.newTable(t, sqllock.TableOptions{})
		if _, err := other.TryAcquire(context.Background(), "a"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("a after the set's release: %v, want ErrLocked (its first hold remains)", err)
		}
		b, err := other.TryAcquire(context.Background(), "b")
		if err != nil {
			t.Fatal(err)
		}
		_ = b.Release(ctx)
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Goroutines with lockers of their own take overlapping sets in random
// orders, waiting for them: every call succeeds (no deadlock error
// leaks), and no name is ever held by two sets at once.
func TestAcquireAllOverlappingSets(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const workers, rounds = 5, 8
		pool := []string{"s1", "s2", "s3", "s4", "s5"}
		var (
			mu      sync.Mutex
			holders = map[string]int{}
			wg      sync.WaitGroup
		)
		for w := range workers {
			l := e.newTable(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{MaxBackoff: 20 * time.Millisecond}})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					names := slices.Clone(pool)
					rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
					names = names[:2+rand.N(3)]
					set, err := l.AcquireAll(ctx, names...)
					if err != nil {
						t.Errorf("worker %d: AcquireAll %v: %v", w, names, err)
						return
					}
					mu.Lock()
					for _, n := range names {
						if h, ok := holders[n]; ok {
							t.Errorf("worker %d got %s, held by worker %d", w, n, h)
						}
						holders[n] = w
					}
					mu.Unlock()
					mu.Lock()
					for _, n := range names {
						delete(holders, n)
					}
					mu.Unlock()
					if err := set.Release(ctx); err != nil {
						t.Errorf("worker %d: Release: %v", w, err)
						return
					}
				}
			}()
		}
		wg.Wait()
	})
}

// unknownCommit is a SQLite dialect whose set grants commit but report an
// unknown outcome, as a connection lost during COMMIT would.
type unknownCommit struct{ *sqlite.Dialect }

func (u unknownCommit) Tables() (*sqlrun.Tables, error) {
	tb, err := sqlrun.Open(u.Dialect)
	if err != nil {
		return nil, err
	}
	tb.Multi = unknownMulti{tb.Multi}
	return tb, nil
}

type unknownMulti struct{ sqlrun.MultiLockTable }

func (u unknownMulti) AcquireAll(ctx context.Context, p dialect.MultiAcquireParams) ([]int64, string, error) {
	tokens, refused, err := u.MultiLockTable.AcquireAll(ctx, p)
	if err != nil || refused != "" {
		return tokens, refused, err
	}
	return tokens, "", fmt.Errorf("%w: injected after the commit", sqllock.ErrOutcomeUnknown)
}

// A set whose grant had an unknown outcome leaves nothing behind: the call
// fails, and the leases it may have been granted are released.
func TestAcquireAllUnknownOutcomeLeavesNothing(t *testing.T) {
	t.Parallel()
	dbtest.SQLite(t)
	ctx := ctxT(t)
	db, _ := openSQLite(t)
	d, err := sqlite.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	l, err := sqllock.NewTable(unknownCommit{d}, sqllock.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquireAll(ctx, "u1", "u2"); !errors.Is(err, sqllock.ErrOutcomeUnknown) {
		t.Fatalf("TryAcquireAll: %v, want ErrOutcomeUnknown", err)
	}
	if infos, err := l.List(ctx); err != nil || len(infos) != 0 {
		t.Fatalf("locks left after an unknown outcome: %v, %v", infos, err)
	}
}

func TestAcquireAllUnsupported(t *testing.T) {
	t.Parallel()
	dbtest.SQLite(t)
	db, _ := openSQLite(t)
	d, err := sqlite.New(db)
	if err != nil {
		t.Fatal(err)
	}
	l, err := sqllock.NewTable(plainDialect{d}, sqllock.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquireAll(ctxT(t), "a"); !errors.Is(err, sqllock.ErrUnsupported) {
		t.Fatalf("TryAcquireAll on a dialect without sets: %v, want ErrUnsupported", err)
	}
	fair, err := sqllock.NewTable(d, sqllock.TableOptions{Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fair.AcquireAll(ctxT(t), "a", "b"); !errors.Is(err, sqllock.ErrUnsupported) || !strings.Contains(err.Error(), "Options.Fair") {
		t.Fatalf("AcquireAll on a fair table: %v, want ErrUnsupported naming Options.Fair", err)
	}
}

// setObserver counts acquisitions and freeing releases by name.
type setObserver struct {
	mu                 sync.Mutex
	acquired, released map[string]int
}

func (o *setObserver) Acquired(_ context.Context, e observe.AcquiredEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.acquired[e.Name]++
}

func (o *setObserver) Released(_ context.Context, e observe.ReleasedEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e.Freed {
		o.released[e.Name]++
	}
}

// An Observer sees each lock of a set acquired and released.
func TestLockSetObserved(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		o := &setObserver{acquired: map[string]int{}, released: map[string]int{}}
		l := e.newTable(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{Observer: o}})
		set, err := l.TryAcquireAll(ctx, "o1", "o2")
		if err != nil {
			t.Fatal(err)
		}
		if err := set.Release(ctx); err != nil {
			t.Fatal(err)
		}
		set, err = l.AcquireAll(ctx, "o2", "o3")
		if err != nil {
			t.Fatal(err)
		}
		if err := set.Release(ctx); err != nil {
			t.Fatal(err)
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		want := map[string]int{"o1": 1, "o2": 2, "o3": 1}
		if fmt.Sprint(o.acquired) != fmt.Sprint(want) || fmt.Sprint(o.released) != fmt.Sprint(want) {
			t.Fatalf("acquired %v, freed %v, want %v for both", o.acquired, o.released, want)
		}
	})
}
