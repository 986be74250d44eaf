package sqllock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/internal/testutil"
)

// semaphore returns a semaphore of limit on e's dialect.
func (e *env) semaphore(t *testing.T, limit int, opts sqllock.SemaphoreOptions) *sqllock.Semaphore {
	t.Helper()
	s, err := sqllock.NewSemaphore(e.d, limit, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSemaphoreAdmitsLimitHolders(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		s := e.semaphore(t, 3, sqllock.SemaphoreOptions{})
		var held []*sqllock.Lock
		var last int64
		for i := range 3 {
			l, err := s.TryAcquire(ctx, "pool")
			if err != nil {
				t.Fatalf("permit %d: %v", i, err)
			}
			if l.Token() <= last {
				t.Fatalf("permit %d: token %d, want > %d", i, l.Token(), last)
			}
			last = l.Token()
			held = append(held, l)
		}
		if _, err := s.TryAcquire(ctx, "pool"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("fourth TryAcquire: got %v, want ErrLocked", err)
		}
		// Another name has permits of its own.
		other, err := s.TryAcquire(ctx, "other")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Release(ctx)
		list, err := s.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := countName(list, "pool"); n != 3 {
			t.Fatalf("List: %d holders of pool, want 3: %+v", n, list)
		}
		if err := held[1].Release(ctx); err != nil {
			t.Fatal(err)
		}
		l, err := s.TryAcquire(ctx, "pool")
		if err != nil {
			t.Fatalf("after a release: %v", err)
		}
		if l.Token() <= last {
			t.Fatalf("token after release %d, want > %d", l.Token(), last)
		}
		for _, h := range []*sqllock.Lock{held[0], held[2], l} {
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := held[1].Release(ctx); !errors.Is(err, sqllock.ErrNotHeld) {
			t.Fatalf("second release: got %v, want ErrNotHeld", err)
		}
	})
}

func countName(list []sqllock.LockInfo, name string) int {
	n := 0
	for _, li := range list {
		if li.Name == name && li.Holds > 0 {
			n++
		}
	}
	return n
}

// A Semaphore built with another limit counts against the holders' while
// they hold; the first acquire after they drained gives the name its own.
func TestSemaphoreOtherLimitCountsAgainstHolders(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		three := e.semaphore(t, 3, sqllock.SemaphoreOptions{})
		two := e.semaphore(t, 2, sqllock.SemaphoreOptions{})
		var held []*sqllock.Lock
		for i, s := range []*sqllock.Semaphore{three, two, two} {
			l, err := s.TryAcquire(ctx, "res")
			if err != nil {
				t.Fatalf("permit %d of the holders' 3: %v", i, err)
			}
			held = append(held, l)
		}
		if _, err := two.TryAcquire(ctx, "res"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("a fourth permit: got %v, want ErrLocked", err)
		}
		for _, l := range held {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// Without holders, the next acquire sets the limit.
		a, err := two.TryAcquire(ctx, "res")
		if err != nil {
			t.Fatalf("after the holders left: %v", err)
		}
		defer a.Release(ctx)
		b, err := three.TryAcquire(ctx, "res")
		if err != nil {
			t.Fatalf("a second permit of 2: %v", err)
		}
		defer b.Release(ctx)
		if _, err := three.TryAcquire(ctx, "res"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("a third permit of 2: got %v, want ErrLocked", err)
		}
	})
}

func TestSemaphoreReentryHoldsOnePermit(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		s := e.semaphore(t, 2, sqllock.SemaphoreOptions{})
		octx := sqllock.WithOwner(ctx, "worker-1")
		first, err := s.TryAcquire(octx, "res")
		if err != nil {
			t.Fatal(err)
		}
		second, err := s.Acquire(octx, "res")
		if err != nil {
			t.Fatal(err)
		}
		if first.Token() != second.Token() {
			t.Fatalf("re-entry: tokens %d and %d", first.Token(), second.Token())
		}
		other, err := s.TryAcquire(ctx, "res")
		if err != nil {
			t.Fatalf("the second permit: %v", err)
		}
		if _, err := s.TryAcquire(ctx, "res"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("a third owner: got %v, want ErrLocked", err)
		}
		if err := second.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.TryAcquire(ctx, "res"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("with one hold of the re-entered permit left: got %v, want ErrLocked", err)
		}
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		third, err := s.TryAcquire(ctx, "res")
		if err != nil {
			t.Fatalf("after the last hold: %v", err)
		}
		for _, l := range []*sqllock.Lock{other, third} {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// expireHolder makes the lease of owner's permit of name expire now.
func (e *env) expireHolder(t *testing.T, name, owner string) {
	t.Helper()
	set := "expires_at = now() - INTERVAL '1' SECOND"
	switch e.kind {
	case "mysql":
		set = "expires_at = UTC_TIMESTAMP(6) - INTERVAL '1' SECOND"
	case "sqlite":
		set = "expires_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER) - 1000000"
	}
	res, err := e.db.ExecContext(ctxT(t), e.q("UPDATE {sqllock_semaphore_holders} SET "+set+" WHERE name = ? AND owner = ?"), name, owner)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("expire %q of %q: %d rows", owner, name, n)
	}
}

func TestSemaphoreCrashedHolderPermitReturns(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		sems := testutil.Tables(t, e.d).Semaphores
		// Two holders that crashed: nobody renews their leases.
		var last int64
		for _, owner := range []string{"crashed-1", "crashed-2"} {
			tok, err := sems.Acquire(ctx, dialect.SemaphoreParams{Name: "res", Owner: owner, TTL: time.Minute, Limit: 2})
			if err != nil || tok == 0 {
				t.Fatalf("grant to %s: %d, %v", owner, tok, err)
			}
			last = tok
		}
		s := e.semaphore(t, 2, sqllock.SemaphoreOptions{})
		if _, err := s.TryAcquire(ctx, "res"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("full: got %v, want ErrLocked", err)
		}
		e.expireHolder(t, "res", "crashed-1")
		l, err := s.TryAcquire(ctx, "res")
		if err != nil {
			t.Fatalf("after a holder's lease expired: %v", err)
		}
		if l.Token() <= last {
			t.Fatalf("token %d, want > %d", l.Token(), last)
		}
		// The crashed holder learns it lost its permit.
		if ok, err := testutil.Renewed(sems.RenewMany(ctx, []dialect.Lease{{Name: "res", Owner: "crashed-1", Token: last - 1}}, time.Minute)); err != nil || ok[0] {
			t.Fatalf("renewing the expired permit: %v, %v", ok, err)
		}
		// The reaper deletes expired holders' rows.
		e.expireHolder(t, "res", "crashed-2")
		n, err := e.d.Reap(ctx, dialect.ReapParams{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if n < 1 {
			t.Fatalf("reaped %d rows, want at least 1", n)
		}
		l2, err := s.TryAcquire(ctx, "res")
		if err != nil {
			t.Fatalf("after reaping: %v", err)
		}
		if l2.Token() <= l.Token() {
			t.Fatalf("token after reaping %d, want > %d", l2.Token(), l.Token())
		}
		l.Release(ctx)
		l2.Release(ctx)
	})
}

func TestSemaphoreAcquireWaitsForRelease(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		s := e.semaphore(t, 1, sqllock.SemaphoreOptions{})
		held, err := s.TryAcquire(ctx, "one")
		if err != nil {
			t.Fatal(err)
		}
		// Another locker, as another process would be: on PostgreSQL the
		// release reaches it by NOTIFY, elsewhere by polling.
		other := e.semaphore(t, 1, sqllock.SemaphoreOptions{})
		got := make(chan *sqllock.Lock, 1)
		errc := make(chan error, 1)
		go func() {
			l, err := other.Acquire(ctx, "one")
			if err != nil {
				errc <- err
				return
			}
			got <- l
		}()
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case l := <-got:
			if l.Token() <= held.Token() {
				t.Fatalf("token %d, want > %d", l.Token(), held.Token())
			}
			l.Release(ctx)
		case err := <-errc:
			t.Fatal(err)
		}
	})
}

func TestSemaphoreGuard(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		s := e.semaphore(t, 2, sqllock.SemaphoreOptions{})
		l, err := s.TryAcquire(sqllock.WithOwner(ctx, "guarded"), "res")
		if err != nil {
			t.Fatal(err)
		}
		guard := func() error {
			tx, err := e.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			return l.Guard(ctx, tx)
		}
		if err := guard(); err != nil {
			t.Fatalf("guard of a live permit: %v", err)
		}
		e.expireHolder(t, "res", "guarded")
		if err := guard(); !errors.Is(err, sqllock.ErrLockLost) {
			t.Fatalf("guard of an expired permit: got %v, want ErrLockLost", err)
		}
		l.Release(ctx)
	})
}

// TestSemaphoreNeverOverAdmits runs many owners of several lockers against
// one small semaphore, counting the holders at every grant and release.
func TestSemaphoreNeverOverAdmits(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const limit, workers, rounds = 2, 6, 8
		var (
			inside, peak atomic.Int32
			mu           sync.Mutex
			tokens       []int64
			wg           sync.WaitGroup
			errs         = make(chan error, workers)
		)
		for w := range workers {
			s := e.semaphore(t, limit, sqllock.SemaphoreOptions{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					l, err := s.Acquire(ctx, "hot")
					if err != nil {
						errs <- fmt.Errorf("worker %d round %d: %w", w, r, err)
						return
					}
					n := inside.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					mu.Lock()
					tokens = append(tokens, l.Token())
					mu.Unlock()
					inside.Add(-1)
					if err := l.Release(context.WithoutCancel(ctx)); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if p := peak.Load(); p > limit {
			t.Fatalf("%d holders at once, limit %d", p, limit)
		}
		seen := make(map[int64]bool)
		for _, tok := range tokens {
			if seen[tok] {
				t.Fatalf("token %d granted twice", tok)
			}
			seen[tok] = true
		}
	})
}

func TestNewSemaphoreBadInput(t *testing.T) {
	t.Parallel()
	if _, err := sqllock.NewSemaphore(nil, 1, sqllock.SemaphoreOptions{}); !errors.Is(err, sqllock.ErrNilDB) {
		t.Fatalf("nil dialect: %v", err)
	}
	d, err := mysql.New(nonNilDB)
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{0, -1} {
		if _, err := sqllock.NewSemaphore(d, limit, sqllock.SemaphoreOptions{}); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Fatalf("limit %d: got %v, want ErrInvalidOptions", limit, err)
		}
	}
	if _, err := sqllock.NewSemaphore(d, 1, sqllock.SemaphoreOptions{LeaseOptions: sqllock.LeaseOptions{TTL: -time.Second}}); !errors.Is(err, sqllock.ErrInvalidOptions) {
		t.Fatalf("bad options: got %v, want ErrInvalidOptions", err)
	}
	if _, err := sqllock.NewSemaphore(d, 2, sqllock.SemaphoreOptions{Fair: true}); err != nil {
		t.Fatalf("Fair: %v", err)
	}
	tidb, err := mysql.NewTiDB(nonNilDB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqllock.NewSemaphore(tidb, 1, sqllock.SemaphoreOptions{}); !errors.Is(err, sqllock.ErrUnsupported) {
		t.Fatalf("TiDB: got %v, want ErrUnsupported", err)
	}
}

// A limit the database cannot store (its column is a 32-bit integer) is
// refused by NewSemaphore with ErrInvalidOptions, naming the limit, rather
// than by the first acquire with a raw out-of-range error (MariaDB 1264)
// or a false ErrOutcomeUnknown (PostgreSQL, whose driver refused to encode
// it and sent nothing); MaxSemaphoreLimit itself is granted and released
// on every database, fair or not (issue 28 item 4).
func TestSemaphoreLimitAboveInt32(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		over := math.MaxInt32
		over++ // not a constant expression: 2^31 does not fit a 32-bit int
		for _, fair := range []bool{false, true} {
			s, err := sqllock.NewSemaphore(e.d, over, sqllock.SemaphoreOptions{Fair: fair})
			if !errors.Is(err, sqllock.ErrInvalidOptions) {
				if s != nil {
					_, err = s.TryAcquire(ctx, "big")
				}
				t.Fatalf("NewSemaphore(limit %d, Fair %v): accepted; TryAcquire: %v; want ErrInvalidOptions from NewSemaphore", over, fair, err)
			}
			if want := strconv.Itoa(over); over > 0 && !strings.Contains(err.Error(), want) {
				t.Fatalf("NewSemaphore(limit %d): %v does not name the limit", over, err)
			}
			name := fmt.Sprintf("max-%v", fair)
			s = e.semaphore(t, math.MaxInt32, sqllock.SemaphoreOptions{Fair: fair})
			l, err := s.TryAcquire(ctx, name)
			if err != nil {
				t.Fatalf("TryAcquire with limit MaxSemaphoreLimit (Fair %v): %v", fair, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release (Fair %v): %v", fair, err)
			}
		}
	})
}
