package chaos

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Read/write locks whose holds change sides.
//
// An acquisition of a read/write lock may change sides while it lasts:
// Lock.Downgrade turns a write hold into a plain read, and Lock.Upgrade an
// upgradeable read (RWLock.AcquireUpgradeable, recorded with
// Event.Upgradeable beside Event.Shared) into the write hold. A change is an
// operation of its own, recorded as DowngradeInvoke or UpgradeInvoke with
// the acquisition's name and token, then the completion with the token the
// handle reports afterwards. The change takes effect at one moment within
// [invoke, completion]; after a failure, or without a completion, the side
// may have changed or not from the invoke on.
//
// The model: an acquisition holds one side at a time, read, upgradeable or
// write. A writer excludes everyone, an upgradeable read excludes writers
// and other upgradeable reads, and readers share the name with readers and
// the upgradeable read. A holder trusts its lease at t only if the lease is
// live at t, and a lease that was live at its grant and at t was live in
// between (renewals and changes of side are scoped to a live lease). So the
// checker flags (as "double holder"):
//
//   - an entry into a side (a grant, or an upgrade that succeeded) while an
//     acquisition granted before it (a smaller token, or a grant that
//     returned before the entry was asked for) was trusted at or after the
//     entry returned, on a side that conflicts with the entered one for
//     every moment the entry may have happened;
//   - two acquisitions both trusted at an instant by which both had
//     certainly entered sides that conflict (and neither had begun to
//     change them).
//
// An entry into the write side while the other acquisition was downgrading
// (between its write phase and its read phase) is flagged as "downgrade
// gap": Downgrade is one statement, with no moment in which a writer can
// enter. Tokens follow the documented rules (as "token order", besides
// Check's own order of grants): a change keeps the acquisition's token, and
// an upgrade's token exceeds those of the writers and upgradeable readers
// granted before it (which the upgradeable read kept out since its grant).
// A guarded write is stale when it began after a grant with a greater
// token, except a plain reader's granted while the writer was still an
// upgradeable read (readers come in beside it, with greater tokens, and
// leave before the upgrade).

// Event kinds of a change of sides of a read/write lock's hold. Op links
// an invoke to its completion; Name and Token are the acquisition's, on
// the completion the token the handle reports after the change.
const (
	// DowngradeInvoke starts a Lock.Downgrade (write to read);
	// DowngradeOK ends it done, DowngradeFail with an error (the side is
	// then unknown).
	DowngradeInvoke Kind = "downgrade"
	DowngradeOK     Kind = "downgrade-ok"
	DowngradeFail   Kind = "downgrade-fail"
	// UpgradeInvoke starts a Lock.Upgrade (upgradeable read to write);
	// UpgradeOK ends it done, UpgradeFail with an error (the side is then
	// unknown: a failed upgrade may have happened all the same).
	UpgradeInvoke Kind = "upgrade"
	UpgradeOK     Kind = "upgrade-ok"
	UpgradeFail   Kind = "upgrade-fail"
)

// CheckRWSides is Check for a history of read/write locks whose holds
// change sides; Check applies this model by itself to every name with an
// upgradeable read or a change of sides, so CheckRWSides only documents
// the model by its name.
func CheckRWSides(events []Event, data Data) []Violation { return Check(events, data) }

// holdSide is the side of a read/write lock an acquisition holds, weakest
// first.
type holdSide int

const (
	sideRead holdSide = iota
	sideUpgradeable
	sideWrite
)

func (s holdSide) String() string {
	return [...]string{"reader", "upgradeable reader", "writer"}[s]
}

// conflict reports whether holders of sides x and y exclude each other.
func conflict(x, y holdSide) bool {
	return x == sideWrite || y == sideWrite || x == sideUpgradeable && y == sideUpgradeable
}

// phase is a side an acquisition entered, at a moment within [lo, hi]
// (hi is math.MaxInt64 when the change's outcome is unknown). The first
// phase of an acquisition is its grant.
type phase struct {
	side   holdSide
	lo, hi int64
	events []Event // the invoke (if recorded) and completion
	down   bool    // entered by a Downgrade
}

// sides holds the phases of the acquisitions of the names that change
// sides.
type sides map[*acq][]phase

// sidePhases finds the names of a history whose acquisitions change sides
// (or are upgradeable), and the phases of their acquisitions.
func sidePhases(events []Event, byName map[string]map[int64]*acq) (map[string]bool, sides, []Violation) {
	var vs []Violation
	names := map[string]bool{}
	for n, m := range byName {
		for _, a := range m {
			if a.upgr {
				names[n] = true
			}
		}
	}
	type change struct {
		a      *acq
		to     holdSide
		invoke Event
		done   *Event
	}
	var changes []*change
	open := map[opKey]*change{}
	for _, e := range events {
		switch e.Kind {
		case DowngradeInvoke, UpgradeInvoke:
			a := byName[e.Name][e.Token]
			if a == nil || a.worker != e.Worker {
				vs = append(vs, Violation{Kind: "malformed", Msg: "changed the side of a lock it was never granted", Events: []Event{e}})
				continue
			}
			c := &change{a: a, to: sideRead, invoke: e}
			if e.Kind == UpgradeInvoke {
				c.to = sideWrite
			}
			names[e.Name] = true
			changes = append(changes, c)
			open[opKey{e.Worker, e.Op}] = c
		case DowngradeOK, DowngradeFail, UpgradeOK, UpgradeFail:
			k := opKey{e.Worker, e.Op}
			if c := open[k]; c != nil {
				delete(open, k)
				c.done = &e
				if ok := e.Kind == DowngradeOK || e.Kind == UpgradeOK; ok && e.Token != c.invoke.Token {
					vs = append(vs, Violation{Kind: "token order",
						Msg: fmt.Sprintf("%s's token %d of %q became %d as it changed sides (a hold keeps its token)",
							e.Worker, c.invoke.Token, e.Name, e.Token),
						Events: []Event{c.invoke, e}})
				}
			}
		}
	}
	ps := sides{}
	for n := range names {
		for _, a := range byName[n] {
			p := phase{side: sideWrite, hi: a.ok.At, events: []Event{a.ok}}
			switch {
			case a.upgr:
				p.side = sideUpgradeable
			case a.shared:
				p.side = sideRead
			}
			if a.invoke != nil {
				p.lo, p.events = a.invoke.At, []Event{*a.invoke, a.ok}
			}
			ps[a] = []phase{p}
		}
	}
	slices.SortStableFunc(changes, func(x, y *change) int { return cmp.Compare(x.invoke.At, y.invoke.At) })
	for _, c := range changes {
		p := phase{side: c.to, lo: c.invoke.At, hi: math.MaxInt64, events: []Event{c.invoke}, down: c.to == sideRead}
		if c.done != nil {
			p.events = append(p.events, *c.done)
			if c.done.Kind == DowngradeOK || c.done.Kind == UpgradeOK {
				p.hi = c.done.At
			}
		}
		ps[c.a] = append(ps[c.a], p)
	}
	return names, ps, vs
}

// sideWithin returns the weakest side a holds at some moment of [x, y]
// by its phases ps: the side every conflict certainly meets.
func sideWithin(ps []phase, x, y int64) holdSide {
	s := sideWrite
	for k, p := range ps {
		if p.lo <= y && (k == len(ps)-1 || ps[k+1].hi > x) {
			s = min(s, p.side)
		}
	}
	return s
}

// describe names a's sides, in order: "writer→reader".
func describe(ps []phase) string {
	var b strings.Builder
	for k, p := range ps {
		if k > 0 {
			b.WriteString("→")
		}
		b.WriteString(p.side.String())
		if p.hi == math.MaxInt64 {
			b.WriteString("?")
		}
	}
	return b.String()
}

// checkOverlapSides finds conflicting acquisitions of one name held at
// once, by the phases of its acquisitions (see CheckRWSides). as is sorted
// by token.
func checkOverlapSides(as []*acq, ps sides) []Violation {
	var vs []Violation
	// Acquisitions by the time their grant returned, and the longest any
	// lasted (from its invoke to its last trusted event or change), which
	// bounds the candidates of an overlap.
	byOK := slices.Clone(as)
	slices.SortFunc(byOK, func(x, y *acq) int { return cmp.Compare(x.ok.At, y.ok.At) })
	span := func(a *acq) (int64, int64) {
		start, end := a.ok.At, max(a.ok.At, a.lastTrst)
		if a.invoke != nil {
			start = a.invoke.At
		}
		for _, p := range ps[a][1:] {
			end = max(end, p.lo)
		}
		return start, end
	}
	var longest int64
	for _, a := range as {
		s, e := span(a)
		longest = max(longest, e-s)
	}
	type pair struct{ x, y int64 }
	seen := map[pair]bool{}
	report := func(a, b *acq, kind, msg string, es []Event) {
		k := pair{min(a.token, b.token), max(a.token, b.token)}
		if seen[k] {
			return
		}
		seen[k] = true
		es = append(es, a.events()...)
		es = append(es, b.events()...)
		vs = append(vs, Violation{Kind: kind, Msg: msg, Events: sortEvents(dedupe(es))})
	}
	trustedAfter := func(a *acq, t int64) []Event {
		for _, e := range a.trusted {
			if e.At >= t {
				return []Event{e}
			}
		}
		return nil
	}
	for _, b := range as {
		start, end := span(b)
		lo := sort.Search(len(byOK), func(i int) bool { return byOK[i].ok.At >= start-longest })
		for _, a := range byOK[lo:] {
			if a.ok.At > end+longest {
				break
			}
			if a == b || a.lastTrst == 0 {
				continue
			}
			// b's entries: its grant, and its upgrades that succeeded.
			for k, e := range ps[b] {
				if e.hi == math.MaxInt64 || k > 0 && e.down {
					continue
				}
				before := a.token < b.token || a.ok.At < e.lo
				if !before || a.lastTrst < e.hi {
					continue
				}
				s := sideWithin(ps[a], e.lo, e.hi)
				if !conflict(s, e.side) {
					continue
				}
				verb := "was granted"
				if k > 0 {
					verb = "upgraded to"
				}
				kind := "double holder"
				for _, p := range ps[a] {
					if p.down && e.side == sideWrite && e.hi >= p.lo && (p.hi == math.MaxInt64 || e.lo <= p.hi) {
						kind = "downgrade gap"
					}
				}
				report(a, b, kind, fmt.Sprintf("%s (%s) trusted token %d of %q after %s (%s) %s the %s side with token %d",
					a.worker, describe(ps[a]), a.token, a.name, b.worker, describe(ps[b]), verb, e.side, b.token),
					append(trustedAfter(a, e.hi), e.events...))
				break
			}
			// Both trusted at an instant by which both had entered
			// conflicting sides.
			for _, pa := range ps[a] {
				for _, pb := range ps[b] {
					t := max(pa.hi, pb.hi)
					if t == math.MaxInt64 || a.lastTrst < t || b.lastTrst < t {
						continue
					}
					sa, sb := sideWithin(ps[a], t, t), sideWithin(ps[b], t, t)
					if conflict(sa, sb) {
						report(a, b, "double holder", fmt.Sprintf("%s (%s, token %d) and %s (%s, token %d) both trusted %q as %s and %s at once",
							a.worker, describe(ps[a]), a.token, b.worker, describe(ps[b]), b.token, a.name, sa, sb),
							append(append(trustedAfter(a, t), trustedAfter(b, t)...), append(pa.events, pb.events...)...))
					}
				}
			}
		}
	}
	// An upgrade's token exceeds those of the writers and upgradeable
	// readers granted before it.
	for _, b := range as {
		for _, e := range ps[b][1:] {
			if e.side != sideWrite || e.hi == math.MaxInt64 {
				continue
			}
			for _, a := range as {
				if a.token > b.token && !(a.shared && !a.upgr) && a.ok.At < e.lo {
					vs = append(vs, Violation{Kind: "token order",
						Msg: fmt.Sprintf("%s upgraded with token %d of %q after %s (%s) had been granted token %d",
							b.worker, b.token, b.name, a.worker, ps[a][0].side, a.token),
						Events: sortEvents(append([]Event{a.ok}, e.events...))})
					break
				}
			}
		}
	}
	return vs
}

// staleExempt reports whether the grant b, with a greater token, that came
// before a's guarded write began (at t) leaves the write fresh: b is a plain
// reader granted while a was still an upgradeable read (a's upgrade had not
// returned before b was asked for).
func (ps sides) staleExempt(a, b *acq) bool {
	if a == nil || !a.upgr || !b.shared || b.upgr {
		return false
	}
	asked := b.ok.At
	if b.invoke != nil {
		asked = b.invoke.At
	}
	for _, p := range ps[a][1:] {
		if p.side == sideWrite && p.hi < asked {
			return false
		}
	}
	return true
}
