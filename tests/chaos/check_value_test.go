package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// CheckValue accepts a history in which each read shows the value its
// holder last wrote, including a write that failed yet took and a read
// overlapping a write, and reports each kind of violation in a history
// changed in one place.
func TestCheckValue(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	holds := []ValueHold{
		{Token: 1, GrantStart: at(0), GrantEnd: at(10), ReleaseStart: at(1000), ReleaseEnd: at(1010)},
		{Token: 2, GrantStart: at(900), GrantEnd: at(1020), ReleaseStart: at(2500), Lost: true},
		{Token: 3, GrantStart: at(2100), GrantEnd: at(2200), ReleaseStart: at(3000), ReleaseEnd: at(3010)},
	}
	sets := []ValueSet{
		{Token: 1, Value: "a1", Start: at(100), End: at(110), Outcome: ValueOK},
		{Token: 1, Value: "a2", Start: at(300), End: at(310), Outcome: ValueOK},
		{Token: 2, Value: "b1", Start: at(1100), End: at(1200), Outcome: ValueErr},
		// Token 2 is broken at 2000, and its write after that is fenced.
		{Token: 2, Value: "b2", Start: at(2050), End: at(2060), Outcome: ValueLost},
		{Token: 3, Value: "c1", Start: at(2300), End: at(2310), Outcome: ValueOK},
	}
	reads := []ValueRead{
		{Start: at(20), End: at(30), Found: true, Token: 1},
		{Start: at(120), End: at(130), Found: true, Token: 1, Value: "a1"},
		{Start: at(290), End: at(305), Found: true, Token: 1, Value: "a1"}, // overlaps a2's write
		{Start: at(295), End: at(320), Found: true, Token: 1, Value: "a2"},
		{Start: at(1050), End: at(1060), Found: true, Token: 2},
		{Start: at(1300), End: at(1310), Found: true, Token: 2, Value: "b1"},
		{Start: at(2010), End: at(2020)},
		{Start: at(2305), End: at(2320), Found: true, Token: 3, Value: "c1"},
	}
	breaks := []ValueBreak{{Token: 2, Start: at(1990), End: at(2000)}}
	if v := CheckValue(holds, sets, reads, breaks); len(v) != 0 {
		t.Fatalf("a good history: %v", v)
	}
	withRead := func(r ValueRead) []ValueRead { return append(slices.Clone(reads), r) }
	withSet := func(s ValueSet) []ValueSet { return append(slices.Clone(sets), s) }
	for _, c := range []struct {
		name  string
		sets  []ValueSet
		reads []ValueRead
		want  string
	}{
		{"unwritten", sets, withRead(ValueRead{Start: at(400), End: at(410), Found: true, Token: 1, Value: "zz"}), "which no SetValue wrote"},
		{"fenced write shown", sets, withRead(ValueRead{Start: at(2070), End: at(2080), Found: true, Token: 2, Value: "b2"}), "reported writing nothing"},
		{"earlier holder's value", sets, withRead(ValueRead{Start: at(1050), End: at(1060), Found: true, Token: 2, Value: "a2"}), "written for token 1"},
		{"before the write", sets, withRead(ValueRead{Start: at(200), End: at(210), Found: true, Token: 1, Value: "a2"}), "started only at"},
		{"stale value", sets, withRead(ValueRead{Start: at(400), End: at(410), Found: true, Token: 1, Value: "a1"}), "replaced by its SetValue"},
		{"value forgotten", sets, withRead(ValueRead{Start: at(400), End: at(410), Found: true, Token: 1}), "with no value, after"},
		{"stale token", sets, withRead(ValueRead{Start: at(2250), End: at(2260), Found: true, Token: 2}), "after token 3's grant returned"},
		{"token from the future", sets, withRead(ValueRead{Start: at(2050), End: at(2060), Found: true, Token: 3}), "whose grant was asked for only"},
		{"write after release", withSet(ValueSet{Token: 3, Value: "c2", Start: at(3100), End: at(3110), Outcome: ValueOK}), reads, "after token 3's release returned"},
		{"write after break", withSet(ValueSet{Token: 2, Value: "b3", Start: at(2010), End: at(2020), Outcome: ValueOK}), reads, "after token 2 was broken"},
		{"write after takeover", withSet(ValueSet{Token: 2, Value: "b3", Start: at(2250), End: at(2260), Outcome: ValueOK}), reads, "after token 3's grant returned"},
	} {
		v := CheckValue(holds, c.sets, c.reads, breaks)
		if len(v) == 0 || !strings.Contains(strings.Join(v, "\n"), c.want) {
			t.Errorf("%s: violations %v, want one saying %q", c.name, v, c.want)
		}
	}
}
