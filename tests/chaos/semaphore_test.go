package chaos

import "testing"

func TestCheckSemaphoreCorrect(t *testing.T) {
	t.Parallel()
	var h hist
	// Two holders side by side, a third once one has left, a re-entry.
	h.grant("w1", "s", 1)
	h.grant("w2", "s", 2)
	h.add("w1", Trusted, "s", 1, 0)
	h.add("w2", Trusted, "s", 2, 0)
	h.grant("w2", "s", 2)
	h.add("w2", Trusted, "s", 2, 0)
	h.add("w1", ReleaseInvoke, "s", 1, 0)
	h.add("w1", ReleaseOK, "s", 1, 0)
	h.grant("w3", "s", 3)
	h.add("w3", Trusted, "s", 3, 0)
	h.add("w2", Trusted, "s", 2, 0)
	// Another name has permits of its own.
	h.grant("w1", "t", 4)
	h.add("w1", Trusted, "t", 4, 0)
	wantKinds(t, CheckSemaphore(h.es, 2))
}

func TestCheckSemaphoreOverLimit(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("w1", "s", 1)
	h.grant("w2", "s", 2)
	h.grant("w3", "s", 3)
	h.add("w1", Trusted, "s", 1, 0)
	h.add("w2", Trusted, "s", 2, 0)
	h.add("w3", Trusted, "s", 3, 0)
	vs := CheckSemaphore(h.es, 2)
	wantKinds(t, vs, "over limit")
	if len(vs) != 1 {
		t.Errorf("%d violations, want 1 for one run of over-limit instants", len(vs))
	}
	// With a limit of 3 the same history is correct.
	wantKinds(t, CheckSemaphore(h.es, 3))
}

// A holder that stopped trusting its permit before the next grant is no
// longer counted.
func TestCheckSemaphoreEndedHolderNotCounted(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("w1", "s", 1)
	h.add("w1", Trusted, "s", 1, 0)
	h.add("w1", Lost, "s", 1, 0)
	h.grant("w2", "s", 2)
	h.add("w2", Trusted, "s", 2, 0)
	wantKinds(t, CheckSemaphore(h.es, 1))
	// But one trusted after the next grant is.
	h.add("w1", Trusted, "s", 1, 0)
	wantKinds(t, CheckSemaphore(h.es, 1), "over limit")
}

func TestCheckSemaphoreTokens(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("w1", "s", 5)
	h.grant("w2", "s", 5)
	wantKinds(t, CheckSemaphore(h.es, 3), "double holder")

	var g hist
	g.grant("w1", "s", 5)
	g.grant("w2", "s", 4)
	wantKinds(t, CheckSemaphore(g.es, 3), "token order")
}

func TestCheckSemaphoreMalformed(t *testing.T) {
	t.Parallel()
	var h hist
	h.add("w1", Trusted, "s", 7, 0)
	wantKinds(t, CheckSemaphore(h.es, 1), "malformed")
}

// setLimit is an operator's SetLimit of name to n that completes with
// end (LimitOK, LimitFail) right after it is asked for.
func (h *hist) setLimit(name string, n int64, end Kind) {
	h.add("op", LimitInvoke, name, 0, n)
	h.add("op", end, name, 0, 0)
}

func TestCheckSemaphoreLimitCorrect(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("w1", "s", 1)
	h.grant("w2", "s", 2)
	h.setLimit("s", 1, LimitOK)
	// Lowered below its holders: both may stay.
	h.trust("w1", "s", 1)
	h.trust("w2", "s", 2)
	h.release("w1", "s", 1)
	h.trust("w2", "s", 2)
	// A grant once fewer than the new limit hold.
	h.grant("w3", "s", 3)
	h.trust("w3", "s", 3)
	// A raise admits more at once, up to the new limit.
	h.setLimit("s", 3, LimitOK)
	h.grant("w4", "s", 4)
	h.grant("w5", "s", 5)
	h.trust("w3", "s", 3)
	h.trust("w4", "s", 4)
	h.trust("w5", "s", 5)
	// Another name keeps the initial limit.
	h.grant("w1", "t", 6)
	h.grant("w2", "t", 7)
	h.trust("w1", "t", 6)
	h.trust("w2", "t", 7)
	wantKinds(t, CheckSemaphore(h.es, 2))
}

func TestCheckSemaphoreLimitLowered(t *testing.T) {
	t.Parallel()
	for _, end := range []Kind{LimitOK, LimitFail} {
		var h hist
		h.grant("w1", "s", 1)
		h.grant("w2", "s", 2)
		h.setLimit("s", 2, end)
		h.grant("w3", "s", 3) // above the lowered limit, if it took effect
		h.trust("w1", "s", 1)
		h.trust("w2", "s", 2)
		h.trust("w3", "s", 3)
		if end == LimitOK {
			wantKinds(t, CheckSemaphore(h.es, 3), "grant over limit")
		} else {
			// A failed SetLimit may not have taken effect.
			wantKinds(t, CheckSemaphore(h.es, 3))
		}
	}
}

// A lower limit replaces a raise that completed before it was asked for.
func TestCheckSemaphoreLimitLoweredAfterRaise(t *testing.T) {
	t.Parallel()
	var h hist
	h.setLimit("s", 4, LimitOK)
	h.grant("w1", "s", 1)
	h.setLimit("s", 1, LimitOK)
	h.grant("w2", "s", 2)
	h.trust("w1", "s", 1)
	h.trust("w2", "s", 2)
	wantKinds(t, CheckSemaphore(h.es, 1), "grant over limit")
}

func TestCheckSemaphoreLimitRaised(t *testing.T) {
	t.Parallel()
	for _, early := range []bool{true, false} {
		var h hist
		h.grant("w1", "s", 1)
		if early { // granted before the raise that would allow it was asked for
			h.grant("w2", "s", 2)
		}
		h.setLimit("s", 2, LimitOK)
		if !early {
			h.grant("w2", "s", 2)
		}
		h.trust("w1", "s", 1)
		h.trust("w2", "s", 2)
		if early {
			wantKinds(t, CheckSemaphore(h.es, 1), "grant over limit")
		} else {
			wantKinds(t, CheckSemaphore(h.es, 1))
		}
	}
}

// A grant while a SetLimit is under way may be judged by either limit.
func TestCheckSemaphoreLimitWindow(t *testing.T) {
	t.Parallel()
	for _, n := range []int64{1, 3} { // a lower and a raise
		var h hist
		h.grant("w1", "s", 1)
		h.grant("w2", "s", 2)
		h.add("op", LimitInvoke, "s", 0, n)
		h.grant("w3", "s", 3) // fits the higher of the two limits
		h.add("op", LimitOK, "s", 0, 0)
		h.trust("w1", "s", 1)
		h.trust("w2", "s", 2)
		h.trust("w3", "s", 3)
		wantKinds(t, CheckSemaphore(h.es, map[int64]int{1: 3, 3: 2}[n]))
	}
	// And a grant asked for before a raise was, and returned after the
	// raise had, may have come after it.
	var h hist
	h.grant("w1", "s", 1)
	h.add("w2", AcquireInvoke, "s", 0, 0)
	h.setLimit("s", 2, LimitOK)
	h.add("w2", AcquireOK, "s", 2, 0)
	h.trust("w1", "s", 1)
	h.trust("w2", "s", 2)
	wantKinds(t, CheckSemaphore(h.es, 1))

	// A grant asked for before a lower was, and returned after the lower
	// had, may have come before it.
	var l hist
	l.grant("w1", "s", 1)
	l.add("w2", AcquireInvoke, "s", 0, 0)
	l.setLimit("s", 1, LimitOK)
	l.add("w2", AcquireOK, "s", 2, 0)
	l.trust("w1", "s", 1)
	l.trust("w2", "s", 2)
	wantKinds(t, CheckSemaphore(l.es, 2))

	// A holder whose grant returned while another grant was under way
	// may have been granted after it: neither grant is to blame, though
	// three at once are too many.
	var g hist
	g.setLimit("s", 2, LimitOK)
	g.grant("w1", "s", 1)
	g.add("w2", AcquireInvoke, "s", 0, 0)
	g.grant("w3", "s", 3)
	g.add("w2", AcquireOK, "s", 2, 0)
	g.trust("w1", "s", 1)
	g.trust("w2", "s", 2)
	g.trust("w3", "s", 3)
	vs := CheckSemaphore(g.es, 2)
	wantKinds(t, vs, "over limit")
	if len(vs) != 1 {
		t.Errorf("%d violations, want 1: over limit", len(vs))
	}
}

// With limit changes, no more hold at once than the largest limit set.
func TestCheckSemaphoreLimitOverLargest(t *testing.T) {
	t.Parallel()
	var h hist
	h.setLimit("s", 2, LimitOK)
	h.grant("w1", "s", 1)
	h.grant("w2", "s", 2)
	h.grant("w3", "s", 3)
	h.trust("w1", "s", 1)
	h.trust("w2", "s", 2)
	h.trust("w3", "s", 3)
	wantKinds(t, CheckSemaphore(h.es, 1), "over limit", "grant over limit")
}

func TestCheckSemaphoreLimitMalformed(t *testing.T) {
	t.Parallel()
	var h hist
	h.add("op", LimitOK, "s", 0, 0)
	wantKinds(t, CheckSemaphore(h.es, 1), "malformed")
}
