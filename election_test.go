package sqllock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/testutil"
)

// newElection returns an election on d.
func newElection(t *testing.T, d dialect.Dialect, opts sqllock.LeaseOptions) *sqllock.Election {
	t.Helper()
	el, err := sqllock.NewElection(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return el
}

func TestElectionOneLeaderAtATime(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const campaigners, rounds = 6, 3
		var (
			leaders atomic.Int32
			mu      sync.Mutex
			terms   []int64
			wg      sync.WaitGroup
			errs    = make(chan error, campaigners)
		)
		for i := range campaigners {
			el := newElection(t, e.d, sqllock.LeaseOptions{TTL: time.Minute})
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- func() error {
					for r := range rounds {
						value := "node-" + strconv.Itoa(i) + "/" + strconv.Itoa(r)
						lead, err := el.Campaign(ctx, "leader", value)
						if err != nil {
							return err
						}
						if n := leaders.Add(1); n != 1 {
							return errors.New("two leaders at once")
						}
						mu.Lock()
						terms = append(terms, lead.Term())
						mu.Unlock()
						info, err := el.Leader(ctx, "leader")
						if err != nil {
							return err
						}
						if info.Term != lead.Term() || info.Value != value || info.Owner != lead.Owner() {
							return errors.New("Leader reports " + info.Value + ", not the leader " + value)
						}
						leaders.Add(-1)
						if err := lead.Resign(ctx); err != nil {
							return err
						}
					}
					return nil
				}()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		for i := 1; i < len(terms); i++ {
			if terms[i] <= terms[i-1] {
				t.Fatalf("terms in election order %v: not strictly increasing", terms)
			}
		}
		if len(terms) != campaigners*rounds {
			t.Fatalf("%d terms, want %d", len(terms), campaigners*rounds)
		}
	})
}

func TestElectionResignHandsOver(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		el := newElection(t, e.d, sqllock.LeaseOptions{TTL: time.Minute})
		if _, err := el.Leader(ctx, "svc"); !errors.Is(err, sqllock.ErrNoLeader) {
			t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
		}
		a, err := el.Campaign(ctx, "svc", "a:8080")
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			l   *sqllock.Leadership
			err error
		}
		got := make(chan result, 1)
		go func() {
			l, err := newElection(t, e.d, sqllock.LeaseOptions{TTL: time.Minute}).Campaign(ctx, "svc", "b:8080")
			got <- result{l, err}
		}()
		info, err := el.Leader(ctx, "svc")
		if err != nil || info.Term != a.Term() || info.Value != "a:8080" {
			t.Fatalf("Leader while a leads: %+v, %v", info, err)
		}
		if info.ExpiresIn <= 0 || info.ExpiresAt.IsZero() {
			t.Fatalf("Leader's expiry: %+v", info)
		}
		if err := a.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if cause := context.Cause(a.Context()); !errors.Is(cause, sqllock.ErrNotHeld) {
			t.Fatalf("resigned leadership's cause %v, want ErrNotHeld", cause)
		}
		if err := a.Resign(ctx); !errors.Is(err, sqllock.ErrNotHeld) {
			t.Fatalf("second Resign: %v, want ErrNotHeld", err)
		}
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		b := r.l
		defer b.Resign(ctx)
		if b.Term() <= a.Term() {
			t.Fatalf("term after hand-over %d, want > %d", b.Term(), a.Term())
		}
		info, err = el.Leader(ctx, "svc")
		if err != nil || info.Term != b.Term() || info.Value != "b:8080" || info.Owner != b.Owner() {
			t.Fatalf("Leader after hand-over: %+v, %v", info, err)
		}
		if err := b.Proclaim(ctx, "b:9090"); err != nil {
			t.Fatal(err)
		}
		if info, err = el.Leader(ctx, "svc"); err != nil || info.Value != "b:9090" || b.Value() != "b:9090" {
			t.Fatalf("Leader after Proclaim: %+v, %v", info, err)
		}
		if err := a.Proclaim(ctx, "a:again"); !errors.Is(err, sqllock.ErrNotHeld) {
			t.Fatalf("Proclaim by a resigned leader: %v, want ErrNotHeld", err)
		}
	})
}

func TestElectionCampaignCancelled(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		el := newElection(t, e.d, sqllock.LeaseOptions{TTL: time.Minute})
		a, err := el.Campaign(ctx, "svc", "a")
		if err != nil {
			t.Fatal(err)
		}
		defer a.Resign(ctx)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := el.Campaign(cctx, "svc", "b"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Campaign with an ended context: %v, want context.Canceled", err)
		}
		if info, err := el.Leader(ctx, "svc"); err != nil || info.Term != a.Term() {
			t.Fatalf("Leader after a cancelled campaign: %+v, %v", info, err)
		}
	})
}

// A paused or cut-off leader stops trusting its leadership before anyone
// else can be elected: when the next leader wins, the old one's context
// has ended (its Err checks the trust window on the spot, so no timer need
// have run).
func TestElectionLostLeaderKnowsBeforeSuccessor(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		opts := sqllock.LeaseOptions{TTL: time.Second}
		db, d := e.sibling(t, 0)
		a, err := newElection(t, d, opts).Campaign(ctx, "svc", "a")
		if err != nil {
			t.Fatal(err)
		}
		db.Close() // renewals fail from now on
		b, err := newElection(t, e.d, opts).Campaign(ctx, "svc", "b")
		if err != nil {
			t.Fatal(err)
		}
		defer b.Resign(ctx)
		if a.Context().Err() == nil {
			t.Fatal("a new leader was elected while the old one still trusted its leadership")
		}
		if cause := context.Cause(a.Context()); !errors.Is(cause, sqllock.ErrLockLost) {
			t.Fatalf("old leader's cause %v, want ErrLockLost", cause)
		}
		if b.Term() <= a.Term() {
			t.Fatalf("term %d after %d", b.Term(), a.Term())
		}
	})
}

// A leader whose row is taken away learns it at its next renewal, through
// its context, and nobody is reported as leader meanwhile.
func TestElectionRowDeleted(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		el := newElection(t, e.d, sqllock.LeaseOptions{TTL: time.Second})
		a, err := el.Campaign(ctx, "svc", "a")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.db.ExecContext(ctx, e.q("DELETE FROM {sqllock_locks} WHERE name = ?"), "svc"); err != nil {
			t.Fatal(err)
		}
		if _, err := el.Leader(ctx, "svc"); !errors.Is(err, sqllock.ErrNoLeader) {
			t.Fatalf("Leader after the row's deletion: %v, want ErrNoLeader", err)
		}
		select {
		case <-a.Done():
		case <-ctx.Done():
			t.Fatal("the leader never learnt that its row was gone")
		}
		if cause := context.Cause(a.Context()); !errors.Is(cause, sqllock.ErrLockLost) {
			t.Fatalf("cause %v, want ErrLockLost", cause)
		}
		if err := a.Proclaim(ctx, "a2"); !errors.Is(err, sqllock.ErrLockLost) {
			t.Fatalf("Proclaim after loss: %v, want ErrLockLost", err)
		}
	})
}

// A value proclaimed for one term is never read as a later holder's: a
// plain lock taking the row over is no leader.
func TestElectionValueBelongsToItsTerm(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		el := newElection(t, e.d, sqllock.LeaseOptions{TTL: time.Minute})
		a, err := el.Campaign(ctx, "svc", "a")
		if err != nil {
			t.Fatal(err)
		}
		e.expire(t, "svc")
		lock, err := e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}}).TryAcquire(ctx, "svc")
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Release(ctx)
		if info, err := el.Leader(ctx, "svc"); !errors.Is(err, sqllock.ErrNoLeader) {
			t.Fatalf("Leader after a plain lock's takeover: %+v, %v; want ErrNoLeader", info, err)
		}
		if err := a.Proclaim(ctx, "a2"); !errors.Is(err, sqllock.ErrLockLost) {
			t.Fatalf("Proclaim by the deposed leader: %v, want ErrLockLost", err)
		}
	})
}

func TestElectionGuard(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		a, err := newElection(t, e.d, sqllock.LeaseOptions{TTL: time.Minute}).Campaign(ctx, "svc", "a")
		if err != nil {
			t.Fatal(err)
		}
		guard := func() error {
			tx, err := e.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			return a.Guard(ctx, tx)
		}
		if err := guard(); err != nil {
			t.Fatalf("Guard of the leader: %v", err)
		}
		if err := a.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if err := guard(); !errors.Is(err, sqllock.ErrNotHeld) {
			t.Fatalf("Guard after Resign: %v, want ErrNotHeld", err)
		}
	})
}

// Observe reports every change, in order, when each is awaited before the
// next: the leader found first, a new value, the end of a leadership, and
// the next leader.
func TestElectionObserve(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		opts := sqllock.LeaseOptions{TTL: time.Minute, MaxBackoff: 50 * time.Millisecond}
		el := newElection(t, e.d, opts)
		octx, stop := context.WithCancel(ctx)
		ch := el.Observe(octx, "svc")
		next := func(want string) sqllock.LeaderInfo {
			t.Helper()
			select {
			case info, ok := <-ch:
				if !ok {
					t.Fatal("Observe's channel closed early")
				}
				if got := describe(info); got != want {
					t.Fatalf("observed %s, want %s", got, want)
				}
				return info
			case <-ctx.Done():
				t.Fatalf("nothing observed; want %s", want)
			}
			return sqllock.LeaderInfo{}
		}
		next("none")
		a, err := el.Campaign(ctx, "svc", "a")
		if err != nil {
			t.Fatal(err)
		}
		if info := next("a"); info.Term != a.Term() || info.Owner != a.Owner() {
			t.Fatalf("observed %+v, want term %d", info, a.Term())
		}
		if err := a.Proclaim(ctx, "a2"); err != nil {
			t.Fatal(err)
		}
		next("a2")
		if err := a.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		next("none")
		b, err := newElection(t, e.d, opts).Campaign(ctx, "svc", "b")
		if err != nil {
			t.Fatal(err)
		}
		if info := next("b"); info.Term != b.Term() || info.Term <= a.Term() {
			t.Fatalf("observed %+v after term %d", info, a.Term())
		}
		if err := b.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		next("none")
		stop()
		for range ch { // closed once octx ends
		}
	})
}

// describe is an observed state as the tests write it: the value, or none.
func describe(info sqllock.LeaderInfo) string {
	if info.Term == 0 {
		return "none"
	}
	return info.Value
}

// An observer that reads late gets the newest state, not a backlog.
func TestElectionObserveCoalesces(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		opts := sqllock.LeaseOptions{TTL: time.Minute, MaxBackoff: 20 * time.Millisecond}
		el := newElection(t, e.d, opts)
		octx, stop := context.WithCancel(ctx)
		ch := el.Observe(octx, "svc")
		var last *sqllock.Leadership
		for i := range 4 {
			l, err := el.Campaign(ctx, "svc", "v"+strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			last = l
			if i < 3 {
				if err := l.Resign(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		defer last.Resign(ctx)
		// Whatever was coalesced, the stream reaches the last leader and
		// never steps back.
		var top int64
		for info := range ch {
			if info.Term != 0 && info.Term < top {
				t.Fatalf("term %d after %d", info.Term, top)
			}
			top = max(top, info.Term)
			if info.Term == last.Term() {
				break
			}
		}
		stop()
		for range ch { // closed once octx ends
		}
	})
}

// An observer that stops reading still ends with its context: not
// parallel, so that goleak sees the package's own goroutines only.
func TestElectionObserveNoLeak(t *testing.T) {
	db, _ := openSQLite(t)
	d, err := sqlite.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqllock.Migrate(ctxT(t), d); err != nil {
		t.Fatal(err)
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	defer d.Close(context.Background()) // its wake-up socket's goroutine, which Observe started
	ctx := ctxT(t)
	el := newElection(t, d, sqllock.LeaseOptions{TTL: time.Minute, MaxBackoff: 10 * time.Millisecond})
	octx, stop := context.WithCancel(ctx)
	ch := el.Observe(octx, "svc")
	<-ch // none
	a, err := el.Campaign(ctx, "svc", "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Resign(ctx)
	stop() // with a state pending or not: nobody reads any more
}

func TestElectionBadInput(t *testing.T) {
	t.Parallel()
	db, _ := openSQLite(t)
	d, err := sqlite.New(db)
	if err != nil {
		t.Fatal(err)
	}
	el := newElection(t, d, sqllock.LeaseOptions{})
	ctx := ctxT(t)
	for _, c := range []struct {
		name, value string
		want        error
	}{
		{"", "v", sqllock.ErrInvalidName},
		{strings.Repeat("n", sqllock.MaxNameLen+1), "v", sqllock.ErrInvalidName},
		{"svc", "nul\x00", sqllock.ErrInvalidValue},
		{"svc", "\xff", sqllock.ErrInvalidValue},
		{"svc", strings.Repeat("v", sqllock.MaxValueLen+1), sqllock.ErrInvalidValue},
	} {
		if _, err := el.Campaign(ctx, c.name, c.value); !errors.Is(err, c.want) {
			t.Errorf("Campaign(%.10q, %.10q): %v, want %v", c.name, c.value, err, c.want)
		}
	}
	if _, err := el.Leader(ctx, ""); !errors.Is(err, sqllock.ErrInvalidName) {
		t.Errorf("Leader(\"\"): %v, want ErrInvalidName", err)
	}
	if _, ok := <-el.Observe(ctx, ""); ok {
		t.Error("Observe(\"\") sent a state")
	}
	if _, err := sqllock.NewElection(nil, sqllock.LeaseOptions{}); !errors.Is(err, sqllock.ErrNilDB) {
		t.Errorf("NewElection(nil): %v, want ErrNilDB", err)
	}
	if _, err := sqllock.NewElection(d, sqllock.LeaseOptions{TTL: -1}); !errors.Is(err, sqllock.ErrInvalidOptions) {
		t.Errorf("NewElection with a negative TTL: %v, want ErrInvalidOptions", err)
	}
	if _, err := sqllock.NewElection(plainDialect{d}, sqllock.LeaseOptions{}); !errors.Is(err, sqllock.ErrUnsupported) {
		t.Errorf("NewElection on a dialect without elections: %v, want ErrUnsupported", err)
	}
}

// plainDialect hides every primitive of its dialect but the lock table.
type plainDialect struct{ dialect.Dialect }

func (d plainDialect) Catalogue() dialect.Catalogue {
	cat := testutil.LocksOnly(d.Dialect.Catalogue())
	locks := *cat.Locks
	locks.ReleaseAll, locks.Leader = dialect.SQL{}, dialect.SQL{}
	cat.Locks = &locks
	return cat
}

// Where the database announces releases, Observe learns of a resignation
// from the announcement: with an hour between its reads, nothing else
// could tell it within the test's time.
func TestElectionObserveWakesOnRelease(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if e.d.Catalogue().Notifier == nil {
			t.Skip("the dialect announces no releases: Observe polls")
		}
		ctx := ctxT(t)
		el := newElection(t, e.d, sqllock.LeaseOptions{TTL: time.Minute, MaxBackoff: time.Hour})
		a, err := el.Campaign(ctx, "svc", "a")
		if err != nil {
			t.Fatal(err)
		}
		octx, stop := context.WithCancel(ctx)
		defer stop()
		ch := el.Observe(octx, "svc")
		if info := <-ch; info.Term != a.Term() {
			t.Fatalf("observed %+v first, want term %d", info, a.Term())
		}
		if err := a.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case info := <-ch:
			if info.Term != 0 {
				t.Fatalf("observed %+v after the resignation, want no leader", info)
			}
		case <-ctx.Done():
			t.Fatal("the resignation was never observed")
		}
	})
}
