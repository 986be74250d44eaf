package dialecttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// multiChecks are the checks of a sqlrun.MultiLockTable.
var multiChecks = []struct {
	name  string
	check func(t *testing.T, e *env, m sqlrun.MultiLockTable)
}{
	{"AllOrNothing", checkMultiAllOrNothing},
	{"Tokens", checkMultiTokens},
	{"ReleaseAll", checkMultiReleaseAll},
	{"Cancel", checkMultiCancel},
	{"Concurrent", checkMultiConcurrent},
	{"Announced", checkMultiAnnounced},
}

// acquireAll runs AcquireAll of names (sorted here) for owner.
func (e *env) acquireAll(m sqlrun.MultiLockTable, owner string, names ...string) ([]int64, string) {
	e.t.Helper()
	names = slices.Sorted(slices.Values(names))
	tokens, refused, err := m.AcquireAll(e.ctx, dialect.MultiAcquireParams{Names: names, Owner: owner, TTL: long})
	e.must(err, fmt.Sprintf("AcquireAll %v for %s", names, owner))
	if refused == "" && len(tokens) != len(names) {
		e.t.Fatalf("AcquireAll %v: %d tokens", names, len(tokens))
	}
	return tokens, refused
}

// leases names the leases of a granted set.
func leases(owner string, names []string, tokens []int64) []dialect.Lease {
	ls := make([]dialect.Lease, len(names))
	for i, name := range names {
		ls[i] = dialect.Lease{Name: name, Owner: owner, Token: tokens[i]}
	}
	return ls
}

// AcquireAll grants every name or none: a set is granted with a token per
// name, each listed as held; a name held by another owner refuses the set,
// reported as the refused name, and leaves the set's other names as they
// were (free names stay free, held ones keep their holder and holds); the
// owner of every name re-enters them all (same tokens, one more hold each);
// an owner holding some names gets the others along with one more hold of
// its own.
func checkMultiAllOrNothing(t *testing.T, e *env, m sqlrun.MultiLockTable) {
	tb := e.table(Locks)
	names := []string{"all-a", "all-b", "all-c"}
	tokens, refused := e.acquireAll(m, "o1", names...)
	if refused != "" {
		t.Fatalf("a free set refused by %q", refused)
	}
	set := leases("o1", names, tokens)
	for _, l := range set {
		e.holder(tb, l, 1)
	}
	again, refused := e.acquireAll(m, "o1", names...)
	if refused != "" || !slices.Equal(again, tokens) {
		t.Fatalf("re-entry of a set: tokens %v (refused %q), want %v", again, refused, tokens)
	}
	for _, l := range set {
		e.holder(tb, l, 2)
	}

	// A set overlapping another owner's lease on one name.
	if _, refused := e.acquireAll(m, "o2", "all-0", "all-b", "all-z"); refused != "all-b" {
		t.Fatalf("a set overlapping a held name: refused %q, want all-b", refused)
	}
	for _, free := range []string{"all-0", "all-z"} {
		if li, ok := e.held(tb, free); ok {
			t.Fatalf("a refused set left %q held: %+v", free, li)
		}
	}
	e.holder(tb, set[1], 2)

	// The refused name is the first held one in name order.
	if _, refused := e.acquireAll(m, "o2", "all-c", "all-0", "all-a"); refused != "all-a" {
		t.Fatalf("refused %q, want all-a (the first held name)", refused)
	}

	// An owner holding part of a set re-enters it and takes the rest.
	part, refused := e.acquireAll(m, "o1", "all-a", "all-d")
	if refused != "" || part[0] != tokens[0] || part[1] <= 0 {
		t.Fatalf("a set partly held by its owner: tokens %v (refused %q), want [%d, new]", part, refused, tokens[0])
	}
	e.holder(tb, set[0], 3)
	e.holder(tb, dialect.Lease{Name: "all-d", Owner: "o1", Token: part[1]}, 1)
}

// Tokens of a set follow the lock table's rules: each exceeds every token
// granted for its name before, across release, expiry, takeover and Reap,
// whether the name was granted alone or in a set.
func checkMultiTokens(t *testing.T, e *env, m sqlrun.MultiLockTable) {
	tb := e.table(Locks)
	names := []string{"tok-a", "tok-b"}
	alone := e.grant(tb, "tok-a", "x")
	e.release(tb, alone, true)
	last := map[string]int64{"tok-a": alone.Token}
	next := func(owner string) []dialect.Lease {
		t.Helper()
		tokens, refused := e.acquireAll(m, owner, names...)
		if refused != "" {
			t.Fatalf("set refused by %q", refused)
		}
		ls := leases(owner, names, tokens)
		for _, l := range ls {
			if l.Token <= last[l.Name] {
				t.Fatalf("%s: token %d, want > %d", l.Name, l.Token, last[l.Name])
			}
			last[l.Name] = l.Token
		}
		return ls
	}
	ls := next("o1")
	if _, err := m.ReleaseAll(e.ctx, ls, 0); err != nil {
		t.Fatal(err)
	}
	next("o2") // released rows
	e.expire(tb, "tok-a")
	e.expire(tb, "tok-b")
	next("o3") // takeover of expired leases
	for _, name := range names {
		e.expire(tb, name)
	}
	e.reapAll()
	next("o4") // reaped rows
	single := e.grant(tb, "tok-c", "o5")
	e.expire(tb, "tok-c")
	tokens, refused := e.acquireAll(m, "o6", "tok-c")
	if refused != "" || tokens[0] <= single.Token {
		t.Fatalf("a set of one taking over: token %v (refused %q), want > %d", tokens, refused, single.Token)
	}
}

// ReleaseAll drops one hold of each lease, reports which leases it
// released (not a lease taken over or already released), frees the last
// holds, takes a set of dialect.MaxMultiAcquire leases, and keeps the
// minimum hold.
func checkMultiReleaseAll(t *testing.T, e *env, m sqlrun.MultiLockTable) {
	tb := e.table(Locks)
	names := []string{"rel-a", "rel-b", "rel-c"}
	tokens, _ := e.acquireAll(m, "o1", names...)
	e.acquireAll(m, "o1", "rel-a") // a second hold of rel-a
	set := leases("o1", names, tokens)
	e.expire(tb, "rel-c")
	taken := e.grant(tb, "rel-c", "o2")

	ok, err := m.ReleaseAll(e.ctx, set, 0)
	e.must(err, "ReleaseAll")
	if want := []bool{true, true, false}; !slices.Equal(ok, want) {
		t.Fatalf("ReleaseAll = %v, want %v", ok, want)
	}
	e.holder(tb, set[0], 1)
	if li, held := e.held(tb, "rel-b"); held {
		t.Fatalf("rel-b still held after its last release: %+v", li)
	}
	e.holder(tb, taken, 1)
	ok, err = m.ReleaseAll(e.ctx, set[:2], 0)
	e.must(err, "ReleaseAll again")
	if want := []bool{true, false}; !slices.Equal(ok, want) {
		t.Fatalf("second ReleaseAll = %v, want %v", ok, want)
	}
	if b := e.grant(tb, "rel-b", "o3"); b.Token <= set[1].Token {
		t.Fatalf("rel-b after ReleaseAll: token %d, want > %d", b.Token, set[1].Token)
	}

	// The largest set, released at once.
	many := make([]string, dialect.MaxMultiAcquire)
	for i := range many {
		many[i] = fmt.Sprintf("rel-many-%02d", i)
	}
	manyTokens, _ := e.acquireAll(m, "o5", many...)
	ok, err = m.ReleaseAll(e.ctx, leases("o5", many, manyTokens), 0)
	e.must(err, "ReleaseAll of the largest set")
	if slices.Contains(ok, false) || len(ok) != len(many) {
		t.Fatalf("ReleaseAll of %d leases = %v", len(many), ok)
	}
	if infos, err := e.tables(e.Dialect).Locks.List(e.ctx); err != nil || slices.ContainsFunc(infos, func(li dialect.LockInfo) bool { return li.Owner == "o5" }) {
		t.Fatalf("the largest set still listed after its release: %v, %v", infos, err)
	}

	// A minimum hold keeps the released set taken, by nobody.
	kept, _ := e.acquireAll(m, "o4", "rel-m1", "rel-m2")
	ok, err = m.ReleaseAll(e.ctx, leases("o4", []string{"rel-m1", "rel-m2"}, kept), long)
	e.must(err, "ReleaseAll with a minimum hold")
	if !slices.Equal(ok, []bool{true, true}) {
		t.Fatalf("ReleaseAll with a minimum hold = %v", ok)
	}
	if _, refused := e.acquireAll(m, "o4", "rel-m1", "rel-m2"); refused != "rel-m1" {
		t.Fatalf("a set within its minimum hold: refused %q, want rel-m1", refused)
	}
}

// A set whose context ends while a statement waits behind another
// transaction's row lock returns an error wrapping the context's, and
// nothing of the set is granted, then or later.
func checkMultiCancel(t *testing.T, e *env, m sqlrun.MultiLockTable) {
	tb := e.table(Locks)
	blocker := e.grant(tb, "cancel-b", "x")
	e.release(tb, blocker, true)
	end, err := e.HoldRow(e.ctx, Locks, "cancel-b")
	e.must(err, "HoldRow")
	defer end()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := m.AcquireAll(ctx, dialect.MultiAcquireParams{Names: []string{"cancel-a", "cancel-b"}, Owner: "o", TTL: long})
		done <- err
	}()
	e.eventually("the set waits behind the held row", func() bool { return e.waiting() > 0 })
	cancel()
	err = await(e, "the cancelled set returns", done)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("AcquireAll with a cancelled context: %v, want an error wrapping context.Canceled", err)
	}
	e.must(end(), "end the held row")
	for _, name := range []string{"cancel-a", "cancel-b"} {
		if li, ok := e.held(tb, name); ok {
			t.Fatalf("a cancelled set left %q held: %+v", name, li)
		}
	}
}

// Goroutines taking overlapping sets in random orders (on pools of their
// own, as processes would) never hold a name together, never see a
// deadlock error other than dialect.ErrTransient (a rolled-back attempt,
// which they repeat), and all make progress.
func checkMultiConcurrent(t *testing.T, e *env, m sqlrun.MultiLockTable) {
	const (
		workers = 6
		rounds  = 15
	)
	pool := []string{"conc-a", "conc-b", "conc-c", "conc-d", "conc-e", "conc-f"}
	var (
		mu      sync.Mutex
		holders = map[string]string{}
		wg      sync.WaitGroup
		errs    = make(chan error, workers)
	)
	for w := range workers {
		d := e.Open(e.t, 3)
		mw := e.tables(d).Multi
		if mw == nil {
			t.Fatal("Open returned a dialect without a MultiLockTable")
		}
		owner := fmt.Sprintf("w%d", w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- multiWorker(e.ctx, mw, owner, pool, rounds, &mu, holders)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// multiWorker takes rounds sets of 2 to 4 names of pool, checking and
// recording their holders in holders.
func multiWorker(ctx context.Context, m sqlrun.MultiLockTable, owner string, pool []string, rounds int, mu *sync.Mutex, holders map[string]string) error {
	for done := 0; done < rounds; {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %d of %d sets: %w", owner, done, rounds, err)
		}
		names := slices.Clone(pool)
		rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		names = names[:2+rand.N(3)]
		slices.Sort(names)
		tokens, refused, err := m.AcquireAll(ctx, dialect.MultiAcquireParams{Names: names, Owner: owner, TTL: long})
		switch {
		case errors.Is(err, dialect.ErrTransient):
			continue
		case err != nil:
			return fmt.Errorf("%s: AcquireAll %v: %w", owner, names, err)
		case refused != "":
			time.Sleep(time.Duration(rand.N(3)) * time.Millisecond) // not synchronisation: a pause between attempts
			continue
		}
		mu.Lock()
		for _, name := range names {
			if h := holders[name]; h != "" {
				mu.Unlock()
				return fmt.Errorf("%s granted %q, held by %s", owner, name, h)
			}
			holders[name] = owner
		}
		mu.Unlock()
		mu.Lock()
		for _, name := range names {
			delete(holders, name)
		}
		mu.Unlock()
		for {
			ok, err := m.ReleaseAll(ctx, leases(owner, names, tokens), 0)
			if errors.Is(err, dialect.ErrTransient) {
				continue
			}
			if err != nil {
				return fmt.Errorf("%s: ReleaseAll %v: %w", owner, names, err)
			}
			if slices.Contains(ok, false) {
				return fmt.Errorf("%s: ReleaseAll %v = %v: a lease was lost", owner, names, ok)
			}
			break
		}
		done++
	}
	return nil
}

// A name that ReleaseAll frees while someone waits for it is announced,
// as Release announces it.
func checkMultiAnnounced(t *testing.T, e *env, m sqlrun.MultiLockTable) {
	cat := e.Dialect.Catalogue()
	n := cat.Notifier
	if n == nil || e.h.Polling {
		t.Skip("the dialect does not announce releases")
	}
	s := newSubscriber()
	sub := n.Subscribe(s)
	defer sub.Unsubscribe()
	select {
	case <-s.ready:
	case err := <-s.lost:
		t.Fatalf("the listening connection failed: %v", err)
	case <-e.ctx.Done():
		t.Fatal("never: Ready")
	}
	names := []string{"ann-a", "ann-b"}
	tokens, _ := e.acquireAll(m, "o", names...)
	if cat.WatchesNames {
		sub.Watch("ann-b")
		defer sub.Unwatch("ann-b")
		e.awaitAnnounced(s, "ann-b") // the registration
	} else if _, ok, err := e.tables(e.Dialect).Locks.Remaining(e.ctx, "ann-b"); err != nil || !ok {
		t.Fatalf("Remaining: %v, %v", ok, err)
	}
	_, err := m.ReleaseAll(e.ctx, leases("o", names, tokens), 0)
	e.must(err, "ReleaseAll")
	e.awaitAnnounced(s, "ann-b")
}

// awaitAnnounced waits until s is told that name was released.
func (e *env) awaitAnnounced(s *subscriber, name string) {
	e.t.Helper()
	for {
		select {
		case got := <-s.released:
			if got == name {
				return
			}
			e.t.Fatalf("announced %q, want %q", got, name)
		case err := <-s.lost:
			e.t.Fatalf("the listening connection failed: %v", err)
		case <-e.ctx.Done():
			e.t.Fatalf("never: the announcement of %q", name)
		}
	}
}
