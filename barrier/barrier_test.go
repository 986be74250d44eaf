package barrier_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/barrier"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/internal/testutil"
)

func TestBarrierBadInput(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if _, err := barrier.New(nil, "b", 1, barrier.Options{}); !errors.Is(err, sqllock.ErrNilDB) {
			t.Errorf("New(nil): %v, want ErrNilDB", err)
		}
		for _, name := range []string{"", "a\x00b"} {
			if _, err := barrier.New(e.d, name, 1, barrier.Options{}); !errors.Is(err, sqllock.ErrInvalidName) {
				t.Errorf("New(%q): %v, want ErrInvalidName", name, err)
			}
		}
		for _, n := range []int{0, -1, barrier.MaxSize + 1} {
			if _, err := barrier.New(e.d, "b", n, barrier.Options{}); !errors.Is(err, sqllock.ErrInvalidOptions) {
				t.Errorf("New(size %d): %v, want ErrInvalidOptions", n, err)
			}
		}
		for _, o := range []barrier.Options{{TTL: -1}, {TTL: time.Millisecond}, {MaxBackoff: -1}, {MaxBackoff: time.Microsecond}} {
			if _, err := barrier.New(e.d, "b", 1, o); !errors.Is(err, sqllock.ErrInvalidOptions) {
				t.Errorf("New(%+v): %v, want ErrInvalidOptions", o, err)
			}
		}
	})
}

// TestBarrierEnterLeave has n members, each with a Barrier of its own (as
// in processes of their own), enter and leave a barrier twice: no Enter
// returns before every member has called it, no Leave before every
// member has called it, and a second Leave is ErrNotHeld.
func TestBarrierEnterLeave(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const n = 4
		for round := range 2 {
			var entering, leaving atomic.Int32
			var wg sync.WaitGroup
			for range n {
				b := e.barrier(t, "phase", n, barrier.Options{})
				wg.Go(func() {
					entering.Add(1)
					m, err := b.Enter(ctx)
					if err != nil {
						t.Errorf("round %d: Enter: %v", round, err)
						return
					}
					if got := entering.Load(); got != n {
						t.Errorf("round %d: Enter returned with %d members entering, want %d", round, got, n)
					}
					if err := m.Context().Err(); err != nil {
						t.Errorf("round %d: a member's context ended inside: %v", round, err)
					}
					leaving.Add(1)
					if err := m.Leave(ctx); err != nil {
						t.Errorf("round %d: Leave: %v", round, err)
						return
					}
					if got := leaving.Load(); got != n {
						t.Errorf("round %d: Leave returned with %d members leaving, want %d", round, got, n)
					}
					if m.Context().Err() == nil {
						t.Errorf("round %d: the member's context did not end with Leave", round)
					}
					if err := m.Leave(ctx); !errors.Is(err, sqllock.ErrNotHeld) {
						t.Errorf("round %d: second Leave: %v, want ErrNotHeld", round, err)
					}
				})
			}
			wg.Wait()
		}
	})
}

// TestBarrierSizeMismatch has two members of a name enter with other
// sizes: whichever joins second is ErrSizeMismatch. Once the round is
// over, the other size is welcome.
func TestBarrierSizeMismatch(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		errs := make(chan error, 2)
		for _, n := range []int{2, 3} {
			b := e.barrier(t, "sized", n, barrier.Options{})
			go func() {
				_, err := b.Enter(ctx)
				errs <- err
			}()
		}
		if err := <-errs; !errors.Is(err, barrier.ErrSizeMismatch) {
			t.Fatalf("first Enter to return: %v, want ErrSizeMismatch", err)
		}
		cancel()
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("the other Enter: %v, want Canceled", err)
		}
		m, err := e.barrier(t, "sized", 1, barrier.Options{}).Enter(ctxT(t))
		if err != nil {
			t.Fatalf("Enter of another size once the round is over: %v", err)
		}
		if err := m.Leave(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestBarrierEnterContext: an Enter whose context ends fails with the
// context's error and withdraws its member.
func TestBarrierEnterContext(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		b := e.barrier(t, "never", 2, barrier.Options{})
		ctx, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
		defer cancel()
		if _, err := b.Enter(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Enter: %v, want DeadlineExceeded", err)
		}
		m, err := barrier.MembersOf(ctxT(t), b, "")
		if err != nil || m != (sqlrun.BarrierMembers{}) {
			t.Fatalf("members after the failed Enter: %+v, %v; want none", m, err)
		}
	})
}

// TestBarrierLeaveWaits: a Leave waits for every member of the round to
// leave, and a member entering a full round waits for that round to end.
func TestBarrierLeaveWaits(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		a, b := e.barrier(t, "pair", 2, barrier.Options{}), e.barrier(t, "pair", 2, barrier.Options{})
		entered := make(chan *barrier.Member, 2)
		for _, x := range []*barrier.Barrier{a, b} {
			go func() {
				m, err := x.Enter(ctx)
				if err != nil {
					t.Error(err)
				}
				entered <- m
			}()
		}
		ma, mb := <-entered, <-entered
		if ma == nil || mb == nil {
			t.FailNow()
		}
		left := make(chan error, 1)
		go func() { left <- ma.Leave(ctx) }()
		testutil.Eventually(ctx, t, "the first member leaving", func() bool {
			m, err := barrier.MembersOf(ctx, a, ma.Owner())
			return err == nil && m.Leaving == 1 && m.Inside == 1
		})
		// A third member waits for this round to end.
		var bLeft atomic.Bool
		third := make(chan error, 1)
		go func() {
			m, err := e.barrier(t, "pair", 1, barrier.Options{}).Enter(ctx)
			if err == nil {
				if !bLeft.Load() {
					err = errors.New("entered a full round before its last member left")
				}
				err = errors.Join(err, m.Leave(ctx))
			}
			third <- err
		}()
		select {
		case err := <-left:
			t.Fatalf("Leave returned with a member inside: %v", err)
		default:
		}
		bLeft.Store(true)
		if err := mb.Leave(ctx); err != nil {
			t.Fatalf("second Leave: %v", err)
		}
		if err := <-left; err != nil {
			t.Fatalf("first Leave: %v", err)
		}
		if err := <-third; err != nil {
			t.Fatalf("the next round's member: %v", err)
		}
	})
}

// TestBarrierDeadBeforeFull: a member whose lease ends before the round is
// full is dropped by the next member to enter, and the round fills with
// live members alone.
func TestBarrierDeadBeforeFull(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const n = 3
		dying := e.barrier(t, "early", n, barrier.Options{TTL: 50 * time.Millisecond})
		m, err := barrier.Join(ctx, dying)
		if err != nil {
			t.Fatal(err)
		}
		barrier.Abandon(m)
		testutil.Eventually(ctx, t, "the abandoned member's lease ending", func() bool {
			mem, err := barrier.MembersOf(ctx, dying, m.Owner())
			return err == nil && mem.Dead == 1
		})
		// Had the dead member counted, the round would fill with two live
		// members, whose Leave would then fail with ErrMemberLost.
		var wg sync.WaitGroup
		for range n {
			b := e.barrier(t, "early", n, barrier.Options{})
			wg.Go(func() {
				m, err := b.Enter(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if err := m.Leave(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	})
}

// TestBarrierMemberLost: once the round is full, a member whose lease
// ends is lost: the members waiting in Leave are told (ErrMemberLost),
// the lost member's Context ends with sqllock.ErrLockLost, and the next
// round starts without it.
func TestBarrierMemberLost(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const n = 3
		type entry struct {
			i int
			m *barrier.Member
		}
		entered := make(chan entry, n)
		for i := range n {
			opts := barrier.Options{}
			if i == 0 {
				// The member that dies. Its lease must outlive the
				// entries of the others, however slow the machine, so
				// it is abandoned only once they are in.
				opts.TTL = time.Second
			}
			b := e.barrier(t, "lost", n, opts)
			go func() {
				m, err := b.Enter(ctx)
				if err != nil {
					t.Error(err)
				}
				entered <- entry{i, m}
			}()
		}
		var live []*barrier.Member
		var dying *barrier.Member
		for range n {
			en := <-entered
			if en.m == nil {
				t.FailNow()
			}
			if en.i == 0 {
				dying = en.m
			} else {
				live = append(live, en.m)
			}
		}
		barrier.Abandon(dying)
		var wg sync.WaitGroup
		for _, m := range live {
			wg.Go(func() {
				if err := m.Leave(ctx); !errors.Is(err, barrier.ErrMemberLost) {
					t.Errorf("Leave with a member lost: %v, want ErrMemberLost", err)
				}
			})
		}
		wg.Wait()
		// The round is over: the next one fills without the lost member.
		b := e.barrier(t, "lost", 1, barrier.Options{})
		m, err := b.Enter(ctx)
		if err != nil {
			t.Fatalf("Enter after a lost round: %v", err)
		}
		if err := m.Leave(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestBarrierOwnLeaseLost: a member whose own row is gone (its lease
// ended and another member dropped it) learns it from its Context, within
// a renewal, and from its Leave.
func TestBarrierOwnLeaseLost(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		b := e.barrier(t, "own", 2, barrier.Options{TTL: 300 * time.Millisecond})
		m, err := barrier.Join(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if err := barrier.Evict(ctx, b, m.Owner()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-m.Context().Done():
		case <-ctx.Done():
			t.Fatal("never: the evicted member's context ending")
		}
		if err := context.Cause(m.Context()); !errors.Is(err, sqllock.ErrLockLost) {
			t.Fatalf("Context's cause: %v, want ErrLockLost", err)
		}
		if err := m.Leave(ctx); !errors.Is(err, sqllock.ErrLockLost) {
			t.Fatalf("Leave: %v, want ErrLockLost", err)
		}
	})
}
