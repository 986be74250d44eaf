package chaos

import (
	"fmt"
	"slices"
	"time"
)

// BarrierOp is one call on a double barrier (package barrier) as a
// barrier scenario saw it, with the host times it started and returned.
type BarrierOp struct {
	Member     int    // the process that called it
	Kind       string // "enter" or "leave"
	Start, End time.Time
	// Err is the call's error text, "" for none.
	Err string
	// Lost says that the error wraps barrier.ErrMemberLost.
	Lost bool
	// Expired says that the call ran into the scenario's deadline: it
	// waited for what never came.
	Expired bool
}

// BarrierHistory is what a barrier scenario leaves for CheckBarrier: one
// round of a barrier of Size, every call, and the members whose process
// was killed while inside (they never leave).
type BarrierHistory struct {
	Size   int
	Ops    []BarrierOp
	Killed []int
}

// CheckBarrier returns the violations of the double barrier's model in h:
//
//   - a call that ran into the scenario's deadline (a wait that never
//     ended: a dead member must end by its TTL, and the others be told);
//   - an Enter that returned before Size Enters had started (it let its
//     member in before the round was full);
//   - a Leave that returned nil before every other member whose Enter
//     returned had started its Leave (it let its member out before all had
//     left; a killed member never leaves, so the others must be told);
//   - a Leave that failed with ErrMemberLost although no member was
//     killed and no call of any member failed (nobody's lease can have
//     ended).
func CheckBarrier(h BarrierHistory) []string {
	var v []string
	entered := map[int]bool{}
	faults := len(h.Killed) > 0
	for _, op := range h.Ops {
		if op.Kind == "enter" && op.Err == "" {
			entered[op.Member] = true
		}
		if op.Err != "" && !op.Lost {
			faults = true
		}
	}
	for i, op := range h.Ops {
		if op.Expired {
			v = append(v, fmt.Sprintf("op %d: member %d's %s waited until the scenario's deadline: %s", i, op.Member, op.Kind, op.Err))
			continue
		}
		switch {
		case op.Kind == "enter" && op.Err == "":
			started := 0
			for _, o := range h.Ops {
				if o.Kind == "enter" && o.Start.Before(op.End) {
					started++
				}
			}
			if started < h.Size {
				v = append(v, fmt.Sprintf("op %d: member %d's Enter returned at %s with %d Enters started, fewer than %d",
					i, op.Member, op.End.Format(time.RFC3339Nano), started, h.Size))
			}
		case op.Kind == "leave" && op.Err == "":
			for m := range entered {
				if m == op.Member {
					continue
				}
				if !slices.ContainsFunc(h.Ops, func(o BarrierOp) bool {
					return o.Member == m && o.Kind == "leave" && o.Start.Before(op.End)
				}) {
					v = append(v, fmt.Sprintf("op %d: member %d's Leave returned nil before member %d, inside, started to leave", i, op.Member, m))
				}
			}
		case op.Lost && !faults:
			v = append(v, fmt.Sprintf("op %d: member %d's %s reports a member lost, with no member killed and no call failed", i, op.Member, op.Kind))
		}
	}
	return v
}
