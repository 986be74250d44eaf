package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// CheckSemaphore reads the history of a semaphore admitting limit holders
// per name, and returns every violation found (none for a correct run):
//
//   - "over limit": more than limit acquisitions of a name certainly held at
//     one instant. An acquisition is certainly held from its AcquireOK (its
//     grant came before) to its last Trusted event: a lease is live from
//     its grant, without a gap, until it ends, and a holder trusts it only
//     while it is live;
//   - "double holder": one token of a name granted to two workers;
//   - "token order": a grant whose token is not greater than that of a
//     grant of the same name completed before it was asked for.
//
// Guarded writes are not checked against each other: holders of one
// semaphore may write side by side.
func CheckSemaphore(events []Event, limit int) []Violation {
	var vs []Violation
	invokes := map[opKey]Event{}
	for _, e := range events {
		if e.Kind == AcquireInvoke {
			invokes[opKey{e.Worker, e.Op}] = e
		}
	}
	byName, bad := acquisitions(events, invokes, "permit")
	vs = append(vs, bad...)
	names := slices.Sorted(maps.Keys(byName))
	for _, n := range names {
		as := make([]*acq, 0, len(byName[n]))
		for _, a := range byName[n] {
			as = append(as, a)
		}
		slices.SortFunc(as, func(x, y *acq) int { return cmp.Compare(x.token, y.token) })
		vs = append(vs, checkLimit(as, limit)...)
		vs = append(vs, checkTokenOrder(as)...)
	}
	return vs
}

// checkLimit finds instants at which more than limit of as were certainly
// held, reporting each run of such instants once.
func checkLimit(as []*acq, limit int) []Violation {
	type point struct {
		at    int64
		start bool
		a     *acq
	}
	var ps []point
	for _, a := range as {
		if a.lastTrst >= a.ok.At {
			ps = append(ps, point{a.ok.At, true, a}, point{a.lastTrst, false, a})
		}
	}
	// Intervals are closed: at one instant, starts come before ends.
	slices.SortFunc(ps, func(x, y point) int {
		if c := cmp.Compare(x.at, y.at); c != 0 {
			return c
		}
		switch {
		case x.start == y.start:
			return 0
		case x.start:
			return -1
		}
		return 1
	})
	var vs []Violation
	held := map[*acq]bool{}
	over := false
	for _, p := range ps {
		if !p.start {
			delete(held, p.a)
			over = over && len(held) > limit
			continue
		}
		held[p.a] = true
		if len(held) <= limit || over {
			continue
		}
		over = true
		var es []Event
		var who []string
		for _, a := range as { // in token order
			if held[a] {
				es = append(es, a.events()...)
				who = append(who, fmt.Sprintf("%s (token %d)", a.worker, a.token))
			}
		}
		vs = append(vs, Violation{Kind: "over limit",
			Msg:    fmt.Sprintf("%d holders of %q at once, limit %d: %v", len(held), p.a.name, limit, who),
			Events: sortEvents(es)})
	}
	return vs
}
