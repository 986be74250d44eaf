package chaos

import (
	"strings"
	"testing"
	"time"
)

func TestCheckLatch(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(from, to int) (time.Time, time.Time) {
		return t0.Add(time.Duration(from) * time.Millisecond), t0.Add(time.Duration(to) * time.Millisecond)
	}
	op := func(kind string, from, to, value int, err string) LatchOp {
		s, e := at(from, to)
		return LatchOp{Kind: kind, Start: s, End: e, Value: value, Err: err}
	}
	good := []LatchOp{
		op("countdown", 0, 10, 2, ""),
		op("wait", 0, 40, 0, ""),
		op("countdown", 5, 20, 1, ""),
		op("count", 21, 22, 1, ""),
		op("countdown", 25, 30, 0, ""),
		op("countdown", 31, 32, 0, ""), // past 0: does nothing
	}
	for _, tc := range []struct {
		name string
		h    LatchHistory
		want string // a fragment of the one violation; "" for none
	}{
		{"good", LatchHistory{Initial: 3, Ops: good, Final: 0}, ""},
		{"a count-down's outcome unknown", LatchHistory{Initial: 2, Ops: []LatchOp{
			op("countdown", 0, 10, 0, "connection reset"), op("countdown", 11, 12, 0, ""), op("wait", 0, 20, 0, "")}, Final: 0}, ""},
		{"below zero", LatchHistory{Initial: 1, Ops: []LatchOp{op("countdown", 0, 1, -1, "")}, Final: 0}, "outside 0 to 1"},
		{"above the initial count", LatchHistory{Initial: 1, Ops: []LatchOp{op("count", 0, 1, 2, "")}, Final: 1}, "outside 0 to 1"},
		{"the same count left twice", LatchHistory{Initial: 3, Ops: []LatchOp{
			op("countdown", 0, 1, 2, ""), op("countdown", 0, 1, 2, "")}, Final: 2}, "each left 2"},
		{"a Wait returned early", LatchHistory{Initial: 2, Ops: []LatchOp{
			op("countdown", 0, 1, 1, ""), op("wait", 0, 5, 0, ""), op("countdown", 6, 7, 0, "")}, Final: 0}, "Wait returned"},
		{"a count rose", LatchHistory{Initial: 3, Ops: []LatchOp{
			op("countdown", 0, 1, 2, ""), op("count", 2, 3, 3, "")}, Final: 2}, "after a count-down had left 2"},
		{"final count too high", LatchHistory{Initial: 2, Ops: []LatchOp{
			op("countdown", 0, 1, 1, ""), op("countdown", 2, 3, 0, "")}, Final: 1}, "final count 1 above 0"},
		{"final count too low", LatchHistory{Initial: 3, Ops: []LatchOp{op("countdown", 0, 1, 2, "")}, Final: 0}, "1 count-downs ran from 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := CheckLatch(tc.h)
			switch {
			case tc.want == "" && len(v) > 0:
				t.Fatalf("violations %q, want none", v)
			case tc.want != "" && (len(v) != 1 || !strings.Contains(v[0], tc.want)):
				t.Fatalf("violations %q, want one with %q", v, tc.want)
			}
		})
	}
}
