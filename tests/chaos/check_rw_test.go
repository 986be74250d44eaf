package chaos

import "testing"

// read is an acquisition of the read side of name by w, granted token.
func (h *hist) read(w, name string, token int64) {
	h.add(w, AcquireInvoke, name, 0, 0)
	h.es[len(h.es)-1].Shared = true
	h.add(w, AcquireOK, name, token, 0)
	h.es[len(h.es)-1].Shared = true
}

// trust records that w trusted token of name now.
func (h *hist) trust(w, name string, token int64) { h.add(w, Trusted, name, token, 0) }

func TestCheckRWCorrectHistory(t *testing.T) {
	t.Parallel()
	var h hist
	// Readers overlap each other.
	h.read("a", "x", 1)
	h.read("b", "x", 2)
	h.trust("a", "x", 1)
	h.trust("b", "x", 2)
	h.add("a", ReleaseInvoke, "x", 1, 0)
	h.add("a", ReleaseOK, "x", 1, 0)
	h.add("b", ReleaseInvoke, "x", 2, 0)
	h.add("b", ReleaseOK, "x", 2, 0)
	// A writer after them, then readers again.
	h.turn("c", "x", 3, 1)
	h.read("a", "x", 4)
	h.trust("a", "x", 4)
	// A writer after the reader stopped trusting.
	h.grant("d", "x", 5)
	h.trust("d", "x", 5)
	wantKinds(t, CheckRW(h.es, Data{Counters: map[string]int64{"x": 1},
		Writes: []Write{{Name: "x", Value: 1, Token: 3, Worker: "c"}}}))
}

func TestCheckRWReaderBesideWriter(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("w", "x", 1)
	h.trust("w", "x", 1)
	h.read("r", "x", 2)
	h.trust("w", "x", 1) // the writer still trusts after a reader came in
	wantKinds(t, CheckRW(h.es, Data{}), "double holder")
}

func TestCheckRWWriterBesideReader(t *testing.T) {
	t.Parallel()
	var h hist
	h.read("r1", "x", 1)
	h.read("r2", "x", 2)
	h.trust("r1", "x", 1)
	h.grant("w", "x", 3)
	h.trust("r1", "x", 1) // a reader still trusts after the writer came in
	wantKinds(t, CheckRW(h.es, Data{}), "double holder")
}

func TestCheckRWTwoWriters(t *testing.T) {
	t.Parallel()
	var h hist
	h.read("r", "x", 1)
	h.trust("r", "x", 1)
	h.add("r", ReleaseInvoke, "x", 1, 0)
	h.add("r", ReleaseOK, "x", 1, 0)
	h.grant("w1", "x", 2)
	h.trust("w1", "x", 2)
	h.grant("w2", "x", 3)
	h.trust("w1", "x", 2)
	wantKinds(t, CheckRW(h.es, Data{}), "double holder")
}

func TestCheckRWWriterTokenBelowReader(t *testing.T) {
	t.Parallel()
	var h hist
	h.read("r", "x", 5)
	h.add("r", ReleaseInvoke, "x", 5, 0)
	h.add("r", ReleaseOK, "x", 5, 0)
	h.grant("w", "x", 4) // asked for after the reader's grant, with a smaller token
	wantKinds(t, CheckRW(h.es, Data{}), "token order")
}

func TestCheckRWSharedToken(t *testing.T) {
	t.Parallel()
	var h hist
	h.read("r1", "x", 1)
	h.read("r2", "x", 1) // two readers with one token
	wantKinds(t, CheckRW(h.es, Data{}), "double holder")
}
