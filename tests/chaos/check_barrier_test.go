package chaos

import (
	"strings"
	"testing"
	"time"
)

func TestCheckBarrier(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	op := func(member int, kind string, from, to int, err string) BarrierOp {
		return BarrierOp{Member: member, Kind: kind, Err: err, Lost: strings.Contains(err, "lost"),
			Expired: strings.Contains(err, "deadline"),
			Start:   t0.Add(time.Duration(from) * time.Millisecond), End: t0.Add(time.Duration(to) * time.Millisecond)}
	}
	good := []BarrierOp{
		op(0, "enter", 0, 20, ""), op(1, "enter", 10, 20, ""),
		op(0, "leave", 30, 50, ""), op(1, "leave", 40, 50, ""),
	}
	for _, tc := range []struct {
		name string
		h    BarrierHistory
		want string // a fragment of the one violation; "" for none
	}{
		{"good", BarrierHistory{Size: 2, Ops: good}, ""},
		{"a member killed inside", BarrierHistory{Size: 2, Killed: []int{1}, Ops: []BarrierOp{
			op(0, "enter", 0, 20, ""), op(1, "enter", 10, 20, ""), op(0, "leave", 30, 90, "a member lost")}}, ""},
		{"an Enter returned early", BarrierHistory{Size: 2, Ops: []BarrierOp{
			op(0, "enter", 0, 5, ""), op(1, "enter", 10, 20, ""), op(0, "leave", 30, 50, ""), op(1, "leave", 30, 50, "")}}, "fewer than 2"},
		{"a Leave returned early", BarrierHistory{Size: 2, Ops: []BarrierOp{
			op(0, "enter", 0, 20, ""), op(1, "enter", 10, 20, ""), op(0, "leave", 30, 35, ""), op(1, "leave", 40, 50, "")}}, "before member 1"},
		{"a Leave let out past a killed member", BarrierHistory{Size: 2, Killed: []int{1}, Ops: []BarrierOp{
			op(0, "enter", 0, 20, ""), op(1, "enter", 10, 20, ""), op(0, "leave", 30, 90, "")}}, "before member 1"},
		{"a member lost from nowhere", BarrierHistory{Size: 2, Ops: []BarrierOp{
			op(0, "enter", 0, 20, ""), op(1, "enter", 10, 20, ""), op(0, "leave", 30, 50, "a member lost"), op(1, "leave", 40, 50, "")}}, "no member killed"},
		{"a wait that never ended", BarrierHistory{Size: 2, Killed: []int{1}, Ops: []BarrierOp{
			op(0, "enter", 0, 20, ""), op(1, "enter", 10, 20, ""), op(0, "leave", 30, 60000, "context deadline exceeded")}}, "deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := CheckBarrier(tc.h)
			switch {
			case tc.want == "" && len(v) > 0:
				t.Fatalf("violations %q, want none", v)
			case tc.want != "" && (len(v) != 1 || !strings.Contains(v[0], tc.want)):
				t.Fatalf("violations %q, want one with %q", v, tc.want)
			}
		})
	}
}
