package chaos

import (
	"strings"
	"testing"
)

// hist builds hand-made histories: each call appends an event at the next
// millisecond.
type hist struct {
	es  []Event
	now int64
	op  map[string]int64
}

func (h *hist) add(w string, k Kind, name string, token, value int64) {
	if h.op == nil {
		h.op = map[string]int64{}
	}
	switch k {
	case AcquireInvoke, WriteInvoke, ReleaseInvoke, DowngradeInvoke, UpgradeInvoke, LimitInvoke:
		h.op[w]++
	}
	h.now += 1e6
	h.es = append(h.es, Event{Worker: w, Op: h.op[w], Kind: k, Name: name, Token: token, Value: value, At: h.now})
}

// grant is an acquisition of name by w, granted token.
func (h *hist) grant(w, name string, token int64) {
	h.add(w, AcquireInvoke, name, 0, 0)
	h.add(w, AcquireOK, name, token, 0)
}

// turn is a whole correct turn of w on name: acquire, trust, write value,
// release.
func (h *hist) turn(w, name string, token, value int64) {
	h.grant(w, name, token)
	h.add(w, Trusted, name, token, 0)
	h.add(w, WriteInvoke, name, token, 0)
	h.add(w, WriteOK, name, token, value)
	h.add(w, ReleaseInvoke, name, token, 0)
	h.add(w, ReleaseOK, name, token, 0)
}

func wantKinds(t *testing.T, vs []Violation, kinds ...string) {
	t.Helper()
	got := map[string]bool{}
	for _, v := range vs {
		got[v.Kind] = true
		t.Log(v)
	}
	for _, k := range kinds {
		if !got[k] {
			t.Errorf("no %q violation reported", k)
		}
	}
	if len(kinds) == 0 && len(vs) > 0 {
		t.Errorf("%d violations in a correct history", len(vs))
	}
}

func TestCheckCorrectHistory(t *testing.T) {
	t.Parallel()
	var h hist
	h.turn("a", "x", 1, 1)
	h.turn("b", "x", 2, 2)
	h.turn("a", "y", 7, 1)
	// c acquires, is paused, loses the lock to b, and its late write is
	// refused: no violation, since it stopped trusting in time.
	h.grant("c", "x", 3)
	h.add("c", Trusted, "x", 3, 0)
	h.grant("b", "x", 4)
	h.add("c", Lost, "x", 3, 0)
	h.add("c", WriteInvoke, "x", 3, 0)
	h.add("c", WriteFail, "x", 3, 0)
	// A write whose commit outcome is unknown, which did commit.
	h.add("b", WriteInvoke, "x", 4, 0)
	h.add("b", WriteUnknown, "x", 4, 0)
	data := Data{
		Counters: map[string]int64{"x": 3, "y": 1},
		Writes: []Write{{"x", 1, 1, "a"}, {"x", 2, 2, "b"}, {"y", 1, 7, "a"},
			{"x", 3, 4, "b"}},
	}
	wantKinds(t, Check(h.es, data))
}

func TestCheckDoubleHolder(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("a", "x", 1)
	h.grant("b", "x", 2)
	h.add("a", Trusted, "x", 1, 0) // a still trusts token 1 after token 2 was granted
	vs := Check(h.es, Data{})
	wantKinds(t, vs, "double holder")
	if s := vs[0].String(); !strings.Contains(s, "trusted token 1") || strings.Count(s, "\n") < 3 {
		t.Errorf("report lacks the offending slice:\n%s", s)
	}
}

func TestCheckSameTokenTwice(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("a", "x", 5)
	h.grant("b", "x", 5)
	wantKinds(t, Check(h.es, Data{}), "double holder")
}

func TestCheckTokenRegression(t *testing.T) {
	t.Parallel()
	var h hist
	h.turn("a", "x", 5, 1)
	h.turn("b", "x", 4, 2) // asked for after token 5 was granted, yet smaller
	data := Data{Counters: map[string]int64{"x": 2}, Writes: []Write{{"x", 1, 5, "a"}, {"x", 2, 4, "b"}}}
	vs := Check(h.es, data)
	wantKinds(t, vs, "token order", "stale write")
}

// Overlapping acquisitions may come back in either order: only a grant that
// completed before another was asked for orders their tokens.
func TestCheckConcurrentAcquisitionsAnyOrder(t *testing.T) {
	t.Parallel()
	var h hist
	h.add("a", AcquireInvoke, "x", 0, 0)
	h.grant("b", "x", 2)
	h.add("b", ReleaseInvoke, "x", 2, 0)
	h.add("b", ReleaseOK, "x", 2, 0)
	h.add("a", AcquireOK, "x", 1, 0) // a waited behind... no: a's token is older but returned later
	wantKinds(t, Check(h.es, Data{}))
}

func TestCheckStaleWriteAccepted(t *testing.T) {
	t.Parallel()
	var h hist
	h.grant("a", "x", 1)
	h.grant("b", "x", 2)
	h.add("a", WriteInvoke, "x", 1, 0) // a writes without trusting, after the takeover
	h.add("a", WriteOK, "x", 1, 1)
	data := Data{Counters: map[string]int64{"x": 1}, Writes: []Write{{"x", 1, 1, "a"}}}
	wantKinds(t, Check(h.es, data), "stale write")
}

func TestCheckLostUpdate(t *testing.T) {
	t.Parallel()
	var h hist
	h.turn("a", "x", 1, 1)
	h.turn("b", "x", 2, 1) // both read 0 and wrote 1
	data := Data{Counters: map[string]int64{"x": 1}, Writes: []Write{{"x", 1, 1, "a"}, {"x", 1, 2, "b"}}}
	wantKinds(t, Check(h.es, data), "lost update")
}

func TestCheckCommittedWriteMissing(t *testing.T) {
	t.Parallel()
	var h hist
	h.turn("a", "x", 1, 1)
	h.turn("b", "x", 2, 2)
	data := Data{Counters: map[string]int64{"x": 1}, Writes: []Write{{"x", 1, 1, "a"}}}
	wantKinds(t, Check(h.es, data), "history/data mismatch")
}

func TestCheckUnrecordedWrite(t *testing.T) {
	t.Parallel()
	var h hist
	h.turn("a", "x", 1, 1)
	data := Data{Counters: map[string]int64{"x": 2}, Writes: []Write{{"x", 1, 1, "a"}, {"x", 2, 1, "a"}}}
	wantKinds(t, Check(h.es, data), "history/data mismatch")
}

func TestReadEventsTornLine(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	r := NewRecorder(&b)
	r.Add(Event{Worker: "a", Op: 1, Kind: AcquireInvoke, Name: "x"})
	r.Add(Event{Worker: "a", Op: 1, Kind: AcquireOK, Name: "x", Token: 3})
	in := b.String() + `{"w":"a","op":2,"k":"wri`
	var got []Event
	if err := ReadEvents(strings.NewReader(in), func(e Event) { got = append(got, e) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Token != 3 {
		t.Fatalf("got %v", got)
	}
	bad := `{"w":"a"` + "\n" + b.String()
	if err := ReadEvents(strings.NewReader(bad), func(Event) {}); err == nil {
		t.Fatal("a bad line before the last was accepted")
	}
}
