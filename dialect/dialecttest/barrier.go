package dialecttest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/internal/testutil"
)

// barrierChecks are the checks of a sqlrun.BarrierTable: of concurrent
// entries into a round of N exactly N join and one fills it, a full round
// refuses entries until its members have left, a member's lease ends by
// its TTL (dropped before the round is full, seen dead after), leaving
// waits for every member, and where entries are announced the one that
// fills is.
var barrierChecks = []struct {
	name  string
	check func(t *testing.T, e *env, bt sqlrun.BarrierTable)
}{
	{"EnterUntilFull", checkBarrierEnterUntilFull},
	{"Size", checkBarrierSize},
	{"DeadMember", checkBarrierDeadMember},
	{"LeaveWaitsForAll", checkBarrierLeave},
	{"Renew", checkBarrierRenew},
	{"Announce", checkBarrierAnnounce},
}

// barrierTTL is the lease of the members that must stay live throughout
// a check, however slow the machine.
const barrierTTL = time.Minute

// Of 2N concurrent entries into a barrier of N, exactly N join, exactly
// one of them fills the round, and the others are refused as the round is
// full; the members read the round full.
func checkBarrierEnterUntilFull(t *testing.T, e *env, bt sqlrun.BarrierTable) {
	const n = 4
	var (
		mu                   sync.Mutex
		joined, filled, busy int
		wg                   sync.WaitGroup
	)
	for i := range 2 * n {
		wg.Go(func() {
			en, err := bt.Enter(e.ctx, "b", fmt.Sprint("m", i), n, barrierTTL)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case en.Joined && en.Size == n:
				joined++
				if en.Filled {
					filled++
				}
			case en.Busy:
				busy++
			default:
				t.Errorf("Enter = %+v; want joined or busy", en)
			}
		})
	}
	wg.Wait()
	if joined != n || filled != 1 || busy != n {
		t.Fatalf("%d entries joined, %d filled and %d were refused; want %d, 1 and %d", joined, filled, busy, n, n)
	}
	m, err := bt.Members(e.ctx, "b", "m0")
	if err != nil || !m.Filled || m.Inside != n || m.Dead != 0 || m.Leaving != 0 {
		t.Fatalf("Members = %+v, %v; want %d inside, full", m, err, n)
	}
}

// A round with members keeps its size (another is refused, not Busy); an
// empty one takes the size of its first member.
func checkBarrierSize(t *testing.T, e *env, bt sqlrun.BarrierTable) {
	if en, err := bt.Enter(e.ctx, "b", "a", 3, barrierTTL); err != nil || !en.Joined || en.Filled {
		t.Fatalf("Enter(3) = %+v, %v; want joined, not full", en, err)
	}
	if en, err := bt.Enter(e.ctx, "b", "b", 2, barrierTTL); err != nil || en.Joined || en.Busy || en.Size != 3 {
		t.Fatalf("Enter(2) = %+v, %v; want refused with size 3", en, err)
	}
	if err := bt.Quit(e.ctx, "b", "a"); err != nil {
		t.Fatal(err)
	}
	if en, err := bt.Enter(e.ctx, "b", "b", 2, barrierTTL); err != nil || !en.Joined || en.Size != 2 {
		t.Fatalf("Enter(2) of the empty round = %+v, %v; want joined with size 2", en, err)
	}
}

// A member's lease ends by its TTL: before the round is full, the next
// entry drops it, so that the round fills with live members; once the
// round is full, a member whose lease ended is read dead, and the round
// is over once no member is live.
func checkBarrierDeadMember(t *testing.T, e *env, bt sqlrun.BarrierTable) {
	const short = 50 * time.Millisecond
	if en, err := bt.Enter(e.ctx, "b", "dead", 2, short); err != nil || !en.Joined {
		t.Fatalf("Enter = %+v, %v; want joined", en, err)
	}
	testutil.Eventually(e.ctx, t, "the member's lease ending", func() bool {
		m, err := bt.Members(e.ctx, "b", "dead")
		return err == nil && m.Dead == 1 && !m.Mine
	})
	if en, err := bt.Enter(e.ctx, "b", "a", 2, barrierTTL); err != nil || !en.Joined || en.Filled {
		t.Fatalf("Enter after the lease ended = %+v, %v; want joined, not full (the dead member dropped)", en, err)
	}
	if m, err := bt.Members(e.ctx, "b", "a"); err != nil || m.Dead != 0 || m.Inside != 1 {
		t.Fatalf("Members = %+v, %v; want 1 inside, none dead", m, err)
	}
	if en, err := bt.Enter(e.ctx, "b", "dead2", 2, short); err != nil || !en.Joined || !en.Filled {
		t.Fatalf("second Enter = %+v, %v; want joined, full", en, err)
	}
	testutil.Eventually(e.ctx, t, "a member of the full round dying", func() bool {
		m, err := bt.Members(e.ctx, "b", "a")
		return err == nil && m.Dead == 1 && m.Inside == 1 && m.Filled
	})
	if ok, err := bt.Leave(e.ctx, "b", "a"); err != nil || !ok {
		t.Fatalf("Leave = %v, %v; want true", ok, err)
	}
	if m, err := bt.Members(e.ctx, "b", "a"); err != nil || m.Dead != 1 || m.Leaving != 1 || !m.Mine {
		t.Fatalf("Members after Leave = %+v, %v; want 1 dead, 1 leaving (mine)", m, err)
	}
	if en, err := bt.Enter(e.ctx, "b", "c", 1, barrierTTL); err != nil || !en.Busy {
		t.Fatalf("Enter while a member of the full round is live = %+v, %v; want busy", en, err)
	}
	if err := bt.Quit(e.ctx, "b", "a"); err != nil {
		t.Fatal(err)
	}
	if en, err := bt.Enter(e.ctx, "b", "c", 1, barrierTTL); err != nil || !en.Joined || !en.Filled {
		t.Fatalf("Enter once no member of the full round is live = %+v, %v; want joined, full (a new round of 1)", en, err)
	}
	if m, err := bt.Members(e.ctx, "b", "c"); err != nil || m.Dead != 0 || m.Inside != 1 || !m.Mine {
		t.Fatalf("Members of the new round = %+v, %v; want 1 inside (mine), none dead", m, err)
	}
}

// Leaving marks a live member leaving; the round is left by all once no
// member is inside. A member whose row is gone cannot leave.
func checkBarrierLeave(t *testing.T, e *env, bt sqlrun.BarrierTable) {
	const n = 3
	for i := range n {
		if en, err := bt.Enter(e.ctx, "b", fmt.Sprint("m", i), n, barrierTTL); err != nil || !en.Joined {
			t.Fatalf("Enter %d = %+v, %v", i, en, err)
		}
	}
	for i := range n {
		owner := fmt.Sprint("m", i)
		if ok, err := bt.Leave(e.ctx, "b", owner); err != nil || !ok {
			t.Fatalf("Leave %d = %v, %v; want true", i, ok, err)
		}
		m, err := bt.Members(e.ctx, "b", owner)
		if err != nil || m.Inside != n-1-i || m.Leaving != i+1 || !m.Mine || m.Dead != 0 {
			t.Fatalf("Members after %d leaves = %+v, %v; want %d inside, %d leaving", i+1, m, err, n-1-i, i+1)
		}
	}
	for i := range n {
		if err := bt.Quit(e.ctx, "b", fmt.Sprint("m", i)); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := bt.Leave(e.ctx, "b", "m0"); err != nil || ok {
		t.Fatalf("Leave after Quit = %v, %v; want false", ok, err)
	}
	if m, err := bt.Members(e.ctx, "b", "m0"); err != nil || m.Inside+m.Leaving+m.Dead != 0 || m.Mine {
		t.Fatalf("Members after every Quit = %+v, %v; want none", m, err)
	}
}

// Renew extends a live member's lease, and reports a member whose row is
// gone.
func checkBarrierRenew(t *testing.T, e *env, bt sqlrun.BarrierTable) {
	if ok, err := bt.Renew(e.ctx, "b", "a", barrierTTL); err != nil || ok {
		t.Fatalf("Renew without a row = %v, %v; want false", ok, err)
	}
	if en, err := bt.Enter(e.ctx, "b", "a", 2, barrierTTL); err != nil || !en.Joined {
		t.Fatalf("Enter = %+v, %v", en, err)
	}
	for range 2 {
		if ok, err := bt.Renew(e.ctx, "b", "a", barrierTTL); err != nil || !ok {
			t.Fatalf("Renew = %v, %v; want true", ok, err)
		}
	}
}

// Where the table announces entries and the dialect has a Notifier, the
// entry that fills a round, and the leave of its last member inside, are
// announced under the barrier's name.
func checkBarrierAnnounce(t *testing.T, e *env, bt sqlrun.BarrierTable) {
	n := e.Dialect.Catalogue().Notifier
	if !bt.Announces() || n == nil || e.h.Polling {
		t.Skip("barriers are not announced")
	}
	s := newSubscriber()
	sub := n.Subscribe(s)
	defer sub.Unsubscribe()
	sub.Watch("b")
	select {
	case <-s.ready:
	case err := <-s.lost:
		t.Fatalf("the listening connection failed: %v", err)
	case <-e.ctx.Done():
		t.Fatal("never: Ready")
	}
	announced := func(what string) {
		t.Helper()
		for {
			select {
			case got := <-s.released:
				if got == "b" {
					return
				}
			case err := <-s.lost:
				t.Fatalf("the listening connection failed: %v", err)
			case <-e.ctx.Done():
				t.Fatalf("never: the announcement of %s", what)
			}
		}
	}
	for _, owner := range []string{"a", "b"} {
		if _, err := bt.Enter(e.ctx, "b", owner, 2, barrierTTL); err != nil {
			t.Fatal(err)
		}
	}
	announced("the entry that filled the round")
	for _, owner := range []string{"a", "b"} {
		if _, err := bt.Leave(e.ctx, "b", owner); err != nil {
			t.Fatal(err)
		}
	}
	announced("the leave of the last member inside")
}
