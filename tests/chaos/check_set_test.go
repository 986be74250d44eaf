package chaos

import "testing"

// setInvoke records w asking for the set names: a SetInvoke and an
// AcquireInvoke per name, all of one operation, which it returns.
func (h *hist) setInvoke(w string, names ...string) int64 {
	if h.op == nil {
		h.op = map[string]int64{}
	}
	h.op[w]++
	op := h.op[w]
	h.now += 1e6
	h.es = append(h.es, Event{Worker: w, Op: op, Kind: SetInvoke, Set: JoinSet(names), At: h.now})
	for _, n := range names {
		h.es = append(h.es, Event{Worker: w, Op: op, Kind: AcquireInvoke, Name: n, At: h.now})
	}
	return op
}

// setEnd records the end of w's set operation op: SetOK or SetFail,
// followed by the grants given (name and token, in turn).
func (h *hist) setEnd(w string, op int64, k Kind, names []string, grants ...any) {
	h.now += 1e6
	h.es = append(h.es, Event{Worker: w, Op: op, Kind: k, Set: JoinSet(names), At: h.now})
	for i := 0; i < len(grants); i += 2 {
		h.es = append(h.es, Event{Worker: w, Op: op, Kind: AcquireOK, Name: grants[i].(string), Token: grants[i+1].(int64), At: h.now})
	}
}

// release records w releasing name's token.
func (h *hist) release(w, name string, token int64) {
	h.add(w, ReleaseInvoke, name, token, 0)
	h.add(w, ReleaseOK, name, token, 0)
}

func TestCheckSetsCorrectHistory(t *testing.T) {
	t.Parallel()
	var h hist
	xy := []string{"x", "y"}
	op := h.setInvoke("a", xy...)
	h.setEnd("a", op, SetOK, xy, "x", int64(1), "y", int64(2))
	h.add("a", Trusted, "x", 1, 0)
	h.add("a", Trusted, "y", 2, 0)
	// b is refused while a holds the set, and gets nothing.
	opb := h.setInvoke("b", "y", "z")
	h.setEnd("b", opb, SetFail, []string{"y", "z"})
	h.release("a", "x", 1)
	h.release("a", "y", 2)
	opb = h.setInvoke("b", "y", "z")
	h.setEnd("b", opb, SetOK, []string{"y", "z"}, "y", int64(3), "z", int64(4))
	h.add("b", Trusted, "y", 3, 0)
	wantKinds(t, Check(h.es, Data{}))
}

// A set granted without one of its names is a partial set.
func TestCheckSetMissingName(t *testing.T) {
	t.Parallel()
	var h hist
	xy := []string{"x", "y"}
	op := h.setInvoke("a", xy...)
	h.setEnd("a", op, SetOK, xy, "x", int64(1))
	wantKinds(t, Check(h.es, Data{}), "partial set")
}

// A refused set that was granted a name is a partial set.
func TestCheckRefusedSetWithAGrant(t *testing.T) {
	t.Parallel()
	var h hist
	xy := []string{"x", "y"}
	op := h.setInvoke("a", xy...)
	h.setEnd("a", op, SetFail, xy, "x", int64(1))
	wantKinds(t, Check(h.es, Data{}), "partial set")
}

// A set granted a name it did not ask for, or a name twice, is a partial
// set.
func TestCheckSetExtraGrant(t *testing.T) {
	t.Parallel()
	var h hist
	op := h.setInvoke("a", "x")
	h.setEnd("a", op, SetOK, []string{"x"}, "x", int64(1), "w", int64(2))
	op = h.setInvoke("b", "y")
	h.setEnd("b", op, SetOK, []string{"y"}, "y", int64(3), "y", int64(3))
	vs := Check(h.es, Data{})
	wantKinds(t, vs, "partial set")
	if len(vs) != 2 {
		t.Errorf("%d violations, want 2", len(vs))
	}
}

// A set whose name another owner still trusts is a double holder, and
// a set granted a token below one granted before it asked is a token
// regression: the per-name checks see the names of sets.
func TestCheckSetOverlapsAHolder(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("b", "y", 5)
	xy := []string{"x", "y"}
	op := h.setInvoke("a", xy...)
	h.setEnd("a", op, SetOK, xy, "x", int64(1), "y", int64(4))
	h.add("b", Trusted, "y", 5, 0)
	wantKinds(t, Check(h.es, Data{}), "token order")

	var h2 hist
	h2.grant("b", "y", 5)
	op = h2.setInvoke("a", xy...)
	h2.setEnd("a", op, SetOK, xy, "x", int64(1), "y", int64(6))
	h2.add("b", Trusted, "y", 5, 0) // b trusts y after the set got it
	wantKinds(t, Check(h2.es, Data{}), "double holder")
}
