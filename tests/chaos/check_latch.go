package chaos

import (
	"fmt"
	"sort"
	"time"
)

// LatchOp is one call on a countdown latch (package latch) as a latch
// scenario saw it, with the host times it started and returned.
type LatchOp struct {
	Kind       string // "countdown", "count" or "wait"
	Start, End time.Time
	// Value is what CountDown returned (the count it left) or Count read;
	// unused for Wait.
	Value int
	// Err is the call's error text, "" for none. A count-down with an
	// error may or may not have taken one.
	Err string
}

// LatchHistory is what a latch scenario leaves for CheckLatch: the count
// the latch was created with (before any op started), every op, and the
// count read once every op had returned.
type LatchHistory struct {
	Initial int
	Ops     []LatchOp
	Final   int
}

// CheckLatch returns the violations of the countdown latch's model in h:
//
//   - a count read or left outside 0 to Initial (below 0, or above the
//     count the latch was created with), or Final below 0;
//   - two count-downs that left the same count above 0 (each that takes
//     one leaves a count of its own);
//   - a Wait that returned without an error before Initial count-downs had
//     started (it returned while the count was above 0);
//   - a count read, or left, above the count that a count-down which had
//     returned before the op started left (counts only fall);
//   - a Final count that is not Initial minus the count-downs that took
//     one, as far as the history tells: at most the lowest count any op
//     saw, at least Initial minus the count-downs that ran, and 0 when at
//     least Initial count-downs returned without an error.
func CheckLatch(h LatchHistory) []string {
	var v []string
	var downs []LatchOp
	left := map[int]int{} // a count above 0 left → the count-downs that left it
	lowest := h.Initial
	for i, op := range h.Ops {
		if op.Err != "" || op.Kind == "wait" {
			if op.Kind == "countdown" {
				downs = append(downs, op)
			}
			continue
		}
		if op.Value < 0 || op.Value > h.Initial {
			v = append(v, fmt.Sprintf("op %d (%s) saw count %d, outside 0 to %d", i, op.Kind, op.Value, h.Initial))
		} else {
			lowest = min(lowest, op.Value)
		}
		if op.Kind == "countdown" {
			downs = append(downs, op)
			if op.Value > 0 {
				left[op.Value]++
			}
		}
	}
	for c, n := range left {
		if n > 1 {
			v = append(v, fmt.Sprintf("%d count-downs each left %d", n, c))
		}
	}
	sort.Slice(downs, func(i, j int) bool { return downs[i].Start.Before(downs[j].Start) })
	for i, op := range h.Ops {
		switch {
		case op.Kind == "wait" && op.Err == "":
			started := 0
			for _, d := range downs {
				if d.Start.Before(op.End) {
					started++
				}
			}
			if started < h.Initial {
				v = append(v, fmt.Sprintf("op %d: Wait returned at %s with %d count-downs started, fewer than %d",
					i, op.End.Format(time.RFC3339Nano), started, h.Initial))
			}
		case op.Err == "":
			for _, d := range downs {
				if d.Err == "" && d.End.Before(op.Start) && op.Value > d.Value {
					v = append(v, fmt.Sprintf("op %d (%s) saw %d after a count-down had left %d", i, op.Kind, op.Value, d.Value))
					break
				}
			}
		}
	}
	succeeded := 0
	for _, d := range downs {
		if d.Err == "" {
			succeeded++
		}
	}
	switch {
	case h.Final < 0:
		v = append(v, fmt.Sprintf("final count %d below 0", h.Final))
	case h.Final > lowest:
		v = append(v, fmt.Sprintf("final count %d above %d, a count seen before", h.Final, lowest))
	case h.Final < h.Initial-len(downs):
		v = append(v, fmt.Sprintf("final count %d: %d count-downs ran from %d", h.Final, len(downs), h.Initial))
	case succeeded >= h.Initial && h.Final != 0:
		v = append(v, fmt.Sprintf("final count %d after %d count-downs returned from %d", h.Final, succeeded, h.Initial))
	}
	return v
}
