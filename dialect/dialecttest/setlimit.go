package dialecttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/testutil"
)

// available reads name's state, failing the test when it has no head row.
func (e *env) available(name string) dialect.SemaphoreState {
	e.t.Helper()
	st, ok, err := e.tables(e.Dialect).Semaphores.Available(e.ctx, name)
	e.must(err, "Available "+name)
	if !ok {
		e.t.Fatalf("Available %s: no head row", name)
	}
	return st
}

// setLimit sets name's limit to n.
func (e *env) setLimit(name string, n int) {
	e.t.Helper()
	e.must(e.tables(e.Dialect).Semaphores.SetLimit(e.ctx, name, n), fmt.Sprintf("SetLimit %s %d", name, n))
}

// A lower limit ends no lease and grants nothing until fewer than it hold;
// a raise grants at once; a set limit holds for grants asking for any
// other, even once the name has no holder; tokens go on growing; Available
// reports the limit, the live holders and whether the limit was set.
func checkSemaphoreSetLimit(t *testing.T, e *env) {
	const name = "setlimit"
	st := e.tables(e.Dialect).Semaphores
	if _, ok, err := st.Available(e.ctx, name); err != nil || ok {
		t.Fatalf("Available before any grant: %v, %v; want no row", ok, err)
	}
	tb := e.semaphoreTable(3)
	var held []dialect.Lease
	var last int64
	for i := range 3 {
		l := e.grant(tb, name, fmt.Sprint("h", i))
		held, last = append(held, l), l.Token
	}
	if got := e.available(name); got != (dialect.SemaphoreState{Limit: 3, Holders: 3}) {
		t.Fatalf("Available with 3 holders of 3: %+v", got)
	}
	e.setLimit(name, 1)
	if got := e.available(name); got != (dialect.SemaphoreState{Limit: 1, Holders: 3, Set: true}) {
		t.Fatalf("Available after SetLimit 1 beside 3 holders: %+v", got)
	}
	// The holders keep their leases: renewals go on.
	ok, err := testutil.Renewed(st.RenewMany(e.ctx, held, long))
	e.must(err, "RenewMany")
	for i, r := range ok {
		if !r {
			t.Fatalf("holder %d not renewed after the limit was lowered", i)
		}
	}
	for i := range 3 {
		e.refused(tb, name, "w")
		e.refused(e.semaphoreTable(10), name, "w10")
		e.release(tb, held[i], true)
	}
	l := e.grant(tb, name, "w")
	if l.Token <= last {
		t.Fatalf("token %d after SetLimit, want > %d", l.Token, last)
	}
	e.refused(tb, name, "x")
	// Re-entry is granted whatever the limit.
	if again := e.grant(tb, name, "w"); again != l {
		t.Fatalf("re-entry under the set limit: %+v, want %+v", again, l)
	}
	e.release(tb, l, true)
	e.release(tb, l, true)
	// Without holders, a grant asking for another limit does not replace
	// a set one.
	a := e.grant(tb, name, "a")
	e.refused(tb, name, "b")
	if got := e.available(name); got != (dialect.SemaphoreState{Limit: 1, Holders: 1, Set: true}) {
		t.Fatalf("Available after a grant asking for 3 under the set limit 1: %+v", got)
	}
	e.setLimit(name, 3)
	e.grant(tb, name, "b")
	c := e.grant(e.semaphoreTable(1), name, "c")
	if c.Token <= a.Token {
		t.Fatalf("token %d after the raise, want > %d", c.Token, a.Token)
	}
	e.refused(e.semaphoreTable(7), name, "d")
	if got := e.available(name); got != (dialect.SemaphoreState{Limit: 3, Holders: 3, Set: true}) {
		t.Fatalf("Available with 3 holders of the set 3: %+v", got)
	}
	// SetLimit of a name never granted creates it.
	e.setLimit("setlimit-new", 2)
	if got := e.available("setlimit-new"); got != (dialect.SemaphoreState{Limit: 2, Set: true}) {
		t.Fatalf("Available of a name SetLimit created: %+v", got)
	}
	one := e.semaphoreTable(1)
	e.grant(one, "setlimit-new", "a")
	e.grant(one, "setlimit-new", "b")
	e.refused(one, "setlimit-new", "c")
}

// phases is the limits a SetLimit race goes through, and their phases: an
// even phase 2i+2 starts once SetLimit(limits[i]) returned, and ends when
// the odd phase 2i+3 begins, before the next SetLimit is sent.
type phases struct {
	limits []int
	phase  atomic.Int64
	inside []atomic.Int32 // by even phase: holders granted wholly inside it
}

// limitOf returns the limit of even phase p.
func (ph *phases) limitOf(p int64) int { return ph.limits[(p-2)/2] }

// granted counts a grant whose attempt began in phase from, and returns
// the phase it counts in (0: none) and the holders counted there with it.
// Grants that began and returned inside one phase were serialised after
// its SetLimit and before the next: two of them inside at once were both
// granted under its limit, so no more than the limit are ever inside.
func (ph *phases) granted(from int64) (int64, int32) {
	if to := ph.phase.Load(); to != from || from%2 != 0 || from == 0 {
		return 0, 0
	}
	return from, ph.inside[from].Add(1)
}

// checkSemaphoreSetLimitConcurrent races acquirers on pools of their own
// with SetLimit, raising and lowering the limit: grants that began after
// a SetLimit returned and returned before the next was sent never hold
// more than its limit at once; every acquirer finishes its rounds.
func checkSemaphoreSetLimitConcurrent(t *testing.T, e *env) {
	const (
		name            = "setlimit-race"
		workers, rounds = 5, 12
		perPhase        = 4 // grants before the next SetLimit
	)
	ph := &phases{limits: []int{3, 1, 4, 2, 1, 3, 2, 4}}
	ph.inside = make([]atomic.Int32, 2*len(ph.limits)+3)
	var (
		grants atomic.Int32
		wg     sync.WaitGroup
		bad    atomic.Value
	)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	errs := make(chan error, workers+1)
	tick := make(chan struct{}, 1) // a grant was counted
	for w := range workers {
		st := e.tables(e.Open(t, 2)).Semaphores
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprint("w", w)
			for r := 0; r < rounds && ctx.Err() == nil; {
				from := ph.phase.Load()
				// The grant asks for 2: the set limit decides.
				token, err := st.Acquire(ctx, dialect.SemaphoreParams{Name: name, Owner: owner, TTL: long, Limit: 2})
				if errors.Is(err, dialect.ErrTransient) {
					continue
				}
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				if token == 0 {
					continue
				}
				p, n := ph.granted(from)
				if p != 0 && int(n) > ph.limitOf(p) {
					bad.CompareAndSwap(nil, fmt.Sprintf("%d holders at once inside phase %d, its limit %d", n, p, ph.limitOf(p)))
				}
				grants.Add(1)
				select {
				case tick <- struct{}{}:
				default:
				}
				if p != 0 {
					ph.inside[p].Add(-1)
				}
				_, err = st.Release(ctx, dialect.Lease{Name: name, Owner: owner, Token: token}, 0)
				for errors.Is(err, dialect.ErrTransient) && ctx.Err() == nil {
					_, err = st.Release(ctx, dialect.Lease{Name: name, Owner: owner, Token: token}, 0)
				}
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				r++
			}
		}()
	}
	setter := e.tables(e.Open(t, 2)).Semaphores
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i, n := range ph.limits {
			ph.phase.Store(int64(2*i + 1))
			err := setter.SetLimit(ctx, name, n)
			for errors.Is(err, dialect.ErrTransient) && ctx.Err() == nil {
				err = setter.SetLimit(ctx, name, n)
			}
			if err != nil {
				if ctx.Err() == nil {
					errs <- err
				}
				return
			}
			ph.phase.Store(int64(2*i + 2))
			target := grants.Load() + perPhase
			for grants.Load() < target && grants.Load() < workers*rounds {
				select {
				case <-tick:
				case <-ctx.Done():
					return
				}
			}
		}
		ph.phase.Store(int64(2*len(ph.limits) + 1))
	}()
	wg.Wait()
	cancel()
	<-done
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if msg := bad.Load(); msg != nil {
		t.Fatal(msg)
	}
	if g := grants.Load(); g != workers*rounds {
		t.Fatalf("%d grants, want %d", g, workers*rounds)
	}
}

// Concurrent grants of distinct owners, more than the limit: as many as
// the limit are granted, and Available counts them, during and after.
func checkSemaphoreAvailableConcurrent(t *testing.T, e *env) {
	const (
		name          = "available-race"
		limit, owners = 3, 8
	)
	var (
		wg      sync.WaitGroup
		granted atomic.Int32
	)
	errs := make(chan error, owners)
	for o := range owners {
		st := e.tables(e.Open(t, 2)).Semaphores
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				token, err := st.Acquire(e.ctx, dialect.SemaphoreParams{Name: name, Owner: fmt.Sprint("o", o), TTL: long, Limit: limit})
				if errors.Is(err, dialect.ErrTransient) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				if token != 0 {
					granted.Add(1)
				}
				// A holder sees itself among at most limit holders.
				s, ok, err := st.Available(e.ctx, name)
				switch {
				case err != nil:
					errs <- err
				case !ok || s.Limit != limit || s.Holders > limit || (token != 0 && s.Holders < 1):
					errs <- fmt.Errorf("Available during the grants: %+v, %v", s, ok)
				}
				return
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if g := granted.Load(); g != limit {
		t.Fatalf("%d grants of %d owners, limit %d", g, owners, limit)
	}
	if got := e.available(name); got != (dialect.SemaphoreState{Limit: limit, Holders: limit}) {
		t.Fatalf("Available after the grants: %+v, want %d of %d", got, limit, limit)
	}
}

// A raise of the limit wakes a waiter refused under the old one, as a
// freed permit does: it is announced to a name someone waited for.
func checkSemaphoreRaiseAnnounced(t *testing.T, e *env) {
	st := e.tables(e.Dialect).Semaphores
	if !st.Announces() {
		t.Skip("the dialect's semaphores do not announce releases")
	}
	s := newSubscriber()
	sub := e.Dialect.Catalogue().Notifier.Subscribe(s)
	defer sub.Unsubscribe()
	select {
	case <-s.ready:
	case err := <-s.lost:
		t.Fatalf("the listening connection failed: %v", err)
	case <-e.ctx.Done():
		t.Fatal("never: Ready")
	}
	const name = "raise-announced"
	tb := e.semaphoreTable(1)
	e.grant(tb, name, "a")
	e.refused(tb, name, "b")
	_, _, err := st.Remaining(e.ctx, name)
	e.must(err, "Remaining")
	if e.Dialect.Catalogue().WatchesNames {
		sub.Watch(name)
		defer sub.Unwatch(name)
		awaitName(e, s, name)
	}
	e.setLimit(name, 2)
	awaitName(e, s, name)
	e.grant(tb, name, "b")
}
