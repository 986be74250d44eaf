package chaos

import (
	"slices"
	"testing"
	"time"
)

// TestCheckTrustWindow: a trusted event after the end of its
// acquisition's trust window (the largest trust_until_ns of its acquire-ok
// and renewed events) is a violation; one inside it, or extended by a
// renewal, is not. A renewal recorded before its grant counts, and one
// without a grant (a process killed in between) is ignored.
func TestCheckTrustWindow(t *testing.T) {
	t.Parallel()
	const ms = int64(time.Millisecond)
	build := func(renew bool, trustAt int64) []Event {
		var h hist
		h.grant("a", "x", 1)
		h.es[1].TrustUntil = h.es[1].At + 10*ms
		if renew {
			h.es = append(h.es, Event{Worker: "a", Op: 1, Kind: Renewed, Name: "x", Token: 1,
				At: h.es[1].At + 5*ms, TrustUntil: h.es[1].At + 30*ms})
		}
		h.es = append(h.es, Event{Worker: "a", Op: 1, Kind: Trusted, Name: "x", Token: 1, At: h.es[1].At + trustAt*ms},
			// A renewal of a grant never recorded.
			Event{Worker: "b", Op: 1, Kind: Renewed, Name: "x", Token: 7, At: h.es[1].At + 1, TrustUntil: h.es[1].At + 2})
		return sortEvents(h.es)
	}
	wantKinds(t, Check(build(false, 9), Data{}))
	wantKinds(t, Check(build(false, 11), Data{}), "trust window")
	wantKinds(t, Check(build(true, 25), Data{}))
	wantKinds(t, Check(build(true, 31), Data{}), "trust window")
	wantKinds(t, CheckSemaphore(build(false, 11), 2), "trust window")
}

// TestRecorderOpsPerWorker: operations are numbered per worker, from 1,
// however many workers share a recorder.
func TestRecorderOpsPerWorker(t *testing.T) {
	t.Parallel()
	r := NewRecorder(nil)
	got := []int64{r.NextOp("a"), r.NextOp("b"), r.NextOp("a"), r.NextOp("b"), r.NextOp("c")}
	if want := []int64{1, 1, 2, 2, 1}; !slices.Equal(got, want) {
		t.Errorf("ops %v, want %v", got, want)
	}
}

// TestChaosDrivesToCheckedStates runs scenarios far too short to reach
// what their checks need (a grant to a FIFO ticket holder, enough work, a
// fault) on their own: the workload must drive itself there rather than
// hope (issue 28 item 6: "no waiter took a ticket" on a slow machine).
func TestChaosDrivesToCheckedStates(t *testing.T) {
	for _, c := range []struct{ kind, strategy, fault string }{
		{"mysql", "fairsem", proxied},
		{"postgres", "fair", noFault},
	} {
		t.Run(c.kind+"/"+c.strategy+"/"+c.fault, func(t *testing.T) {
			t.Parallel()
			r := runScenario(t, c.kind, c.strategy, c.fault, time.Millisecond)
			if n := ticketedGrants(r.history); n == 0 {
				t.Errorf("no grant to a ticket holder")
			}
		})
	}
}
