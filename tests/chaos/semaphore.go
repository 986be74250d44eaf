package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
)

// Limit-change event kinds: an operator's Semaphore.SetLimit of Name to
// Value (on LimitInvoke). LimitOK means it returned nil, so its effect
// came between its invoke and its completion; LimitFail that it returned
// an error, so it may or may not have taken effect (an invoke without a
// completion is as unknown).
const (
	LimitInvoke Kind = "set-limit"
	LimitOK     Kind = "set-limit-ok"
	LimitFail   Kind = "set-limit-fail"
)

// CheckSemaphore reads the history of a semaphore admitting limit holders
// per name (a name's limit until a SetLimit in the history changes it),
// and returns every violation found (none for a correct run):
//
//   - "over limit": more than limit acquisitions of a name certainly held at
//     one instant (with limit changes, more than the largest limit ever
//     set). An acquisition is certainly held from its AcquireOK (its
//     grant came before) to its last Trusted event: a lease is live from
//     its grant, without a gap, until it ends, and a holder trusts it only
//     while it is live;
//   - "grant over limit", for a name whose limit changes: a grant while
//     at least as many others held the name as any limit that could have
//     been in force then. The grant's moment lies between its
//     AcquireInvoke and its AcquireOK, and the others certainly held at
//     a moment are counted as above; a SetLimit took effect somewhere
//     between its LimitInvoke and its completion, one that failed maybe
//     not at all, so a grant is judged by the most permissive limit the
//     order of those moments allows. Holders left above a lowered limit
//     break nothing: a lower limit ends no lease;
//   - "double holder": one token of a name granted to two workers;
//   - "token order": a grant whose token is not greater than that of a
//     grant of the same name completed before it was asked for;
//   - "malformed": a limit change's completion without its invoke.
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
	changes, bad := limitChanges(events, limit)
	vs = append(vs, bad...)
	names := slices.Sorted(maps.Keys(byName))
	for _, n := range names {
		as := make([]*acq, 0, len(byName[n]))
		for _, a := range byName[n] {
			as = append(as, a)
		}
		slices.SortFunc(as, func(x, y *acq) int { return cmp.Compare(x.token, y.token) })
		cs := changes[n]
		if len(cs) == 1 { // the limit never changed
			vs = append(vs, checkLimit(as, limit)...)
		} else {
			most := slices.MaxFunc(cs, func(x, y *limitChange) int { return cmp.Compare(x.n, y.n) }).n
			vs = append(vs, checkLimit(as, most)...)
			vs = append(vs, checkGrants(as, cs)...)
		}
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

// limitChange is one setting of a name's limit to n: a SetLimit asked for
// at start and returned at end (math.MaxInt64 if it never did), ok if it
// certainly took effect; or the initial limit, in force from the start
// (start and end math.MinInt64).
type limitChange struct {
	n          int
	start, end int64
	ok         bool
	events     []Event
}

// limitChanges gathers the limit changes of a history per name, each
// name's first the initial limit. A completion without its invoke is
// "malformed".
func limitChanges(events []Event, initial int) (map[string][]*limitChange, []Violation) {
	var vs []Violation
	byName := map[string][]*limitChange{}
	open := map[opKey]*limitChange{}
	add := func(name string, c *limitChange) {
		if byName[name] == nil {
			byName[name] = []*limitChange{{n: initial, start: math.MinInt64, end: math.MinInt64, ok: true}}
		}
		byName[name] = append(byName[name], c)
	}
	for _, e := range events {
		k := opKey{e.Worker, e.Op}
		switch e.Kind {
		case AcquireOK:
			if byName[e.Name] == nil {
				byName[e.Name] = []*limitChange{{n: initial, start: math.MinInt64, end: math.MinInt64, ok: true}}
			}
		case LimitInvoke:
			c := &limitChange{n: int(e.Value), start: e.At, end: math.MaxInt64, events: []Event{e}}
			open[k] = c
			add(e.Name, c)
		case LimitOK, LimitFail:
			c := open[k]
			if c == nil {
				vs = append(vs, Violation{Kind: "malformed", Msg: "a limit change completed that was never asked for", Events: []Event{e}})
				continue
			}
			delete(open, k)
			c.end, c.ok = e.At, e.Kind == LimitOK
			c.events = append(c.events, e)
		}
	}
	return byName, vs
}

// possibleLimits returns the changes of cs whose limit could have been in
// force at t: those that could have taken effect by t (asked for by t)
// and not certainly been replaced by then (by a change that certainly
// took effect, by t, after this one had).
func possibleLimits(cs []*limitChange, t int64) []*limitChange {
	var in []*limitChange
	for _, c := range cs {
		if c.start > t {
			continue
		}
		replaced := slices.ContainsFunc(cs, func(d *limitChange) bool { return d.ok && d.start > c.end && d.end <= t })
		if !replaced {
			in = append(in, c)
		}
	}
	return in
}

// checkGrants finds grants of as (one name, sorted by token) made while
// at least as many others were certainly held as the most permissive
// limit of cs that could have been in force: no moment between the
// grant's invoke and its completion has fewer holders than such a limit.
func checkGrants(as []*acq, cs []*limitChange) []Violation {
	held := func(g *acq, t int64) []*acq {
		var hs []*acq
		for _, h := range as {
			if h != g && h.ok.At <= t && t <= h.lastTrst {
				hs = append(hs, h)
			}
		}
		return hs
	}
	most := func(t int64) int {
		n := 0
		for _, c := range possibleLimits(cs, t) {
			n = max(n, c.n)
		}
		return n
	}
	var vs []Violation
	for _, g := range as {
		if g.invoke == nil {
			continue // the window of its grant is unknown
		}
		lo, hi := g.invoke.At, g.ok.At
		// The holders and the limits change only at these moments, so
		// the moments of the window between two of them are alike.
		ts := []int64{lo}
		in := func(t int64) {
			if t > lo && t <= hi {
				ts = append(ts, t)
			}
		}
		for _, h := range as {
			in(h.ok.At)
			if h.lastTrst < math.MaxInt64 {
				in(h.lastTrst + 1)
			}
		}
		for _, c := range cs {
			in(c.start)
			in(c.end)
		}
		allowed := slices.ContainsFunc(ts, func(t int64) bool { return len(held(g, t)) < most(t) })
		if allowed {
			continue
		}
		es := g.events()
		var who []string
		hs := held(g, hi)
		for _, h := range hs {
			es = append(es, h.ok)
			if n := len(h.trusted); n > 0 {
				es = append(es, h.trusted[n-1])
			}
			who = append(who, fmt.Sprintf("%s (token %d)", h.worker, h.token))
		}
		for _, c := range possibleLimits(cs, hi) {
			es = append(es, c.events...)
		}
		vs = append(vs, Violation{Kind: "grant over limit",
			Msg: fmt.Sprintf("%s was granted token %d of %q while, at every moment it could have been, at least as many others held the name as the largest limit that could have been in force (at its completion %d held, limit at most %d): %v",
				g.worker, g.token, g.name, len(hs), most(hi), who),
			Events: sortEvents(dedupe(es))})
	}
	return vs
}
