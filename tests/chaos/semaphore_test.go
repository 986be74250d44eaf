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
