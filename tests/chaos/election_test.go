package chaos

import "testing"

// kinds lists the kinds of vs.
func kinds(vs []Violation) []string {
	var ks []string
	for _, v := range vs {
		ks = append(ks, v.Kind)
	}
	return ks
}

// wantOnly fails unless vs has a violation of each kind in want, and none
// of another kind.
func wantOnly(t *testing.T, vs []Violation, want ...string) {
	t.Helper()
	got := map[string]int{}
	for _, v := range vs {
		got[v.Kind]++
	}
	for _, k := range want {
		if got[k] == 0 {
			t.Errorf("no %q violation; got %v", k, kinds(vs))
		}
		delete(got, k)
	}
	if len(got) != 0 {
		t.Errorf("unexpected violations %v:\n%v", kinds(vs), vs)
	}
}

func TestCheckElectionCorrect(t *testing.T) {
	t.Parallel()
	var h hist
	h.turn("a", "lead", 10, 1)
	h.turn("b", "lead", 11, 2)
	h.turn("a", "lead", 15, 3)
	h.turn("c", "other", 12, 1)
	data := Data{
		Counters: map[string]int64{"lead": 3, "other": 1},
		Writes:   []Write{{"lead", 1, 10, "a"}, {"lead", 2, 11, "b"}, {"lead", 3, 15, "a"}, {"other", 1, 12, "c"}},
	}
	wantOnly(t, CheckElection(h.es, data))
}

// Two workers elected with one term.
func TestCheckElectionTwoLeadersInOneTerm(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("a", "lead", 10)
	h.grant("b", "lead", 10)
	wantOnly(t, CheckElection(h.es, Data{}), "two leaders")
}

// A campaign begun after term 11 was won wins term 9.
func TestCheckElectionTermGoesBack(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("a", "lead", 11)
	h.add("a", ReleaseInvoke, "lead", 11, 0)
	h.add("a", ReleaseOK, "lead", 11, 0)
	h.grant("b", "lead", 9)
	wantOnly(t, CheckElection(h.es, Data{}), "term order")
}

// The leader of term 10 still trusts its leadership after term 11 was won.
func TestCheckElectionTwoLeadersTrusted(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("a", "lead", 10)
	h.add("a", Trusted, "lead", 10, 0)
	h.grant("b", "lead", 11)
	h.add("a", Trusted, "lead", 10, 0)
	wantOnly(t, CheckElection(h.es, Data{}), "two leaders trusted")
}

// A leader trusts its term after it had learnt it lost it.
func TestCheckElectionTrustedAfterLoss(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("a", "lead", 10)
	h.add("a", Lost, "lead", 10, 0)
	h.add("a", Trusted, "lead", 10, 0)
	wantOnly(t, CheckElection(h.es, Data{}), "trusted after its end")
}

// A resigned leader trusts its term again.
func TestCheckElectionTrustedAfterResign(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("a", "lead", 10)
	h.add("a", ReleaseInvoke, "lead", 10, 0)
	h.add("a", ReleaseOK, "lead", 10, 0)
	h.add("a", Trusted, "lead", 10, 0)
	wantOnly(t, CheckElection(h.es, Data{}), "trusted after its end")
}
