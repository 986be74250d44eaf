package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Write is one committed guarded write, as logged in the database in the
// same transaction as the counter update it describes.
type Write struct {
	Name   string
	Value  int64 // the counter value it wrote
	Token  int64 // the writer's fencing token
	Worker string
}

// Data is what the guarded writes left in the database.
type Data struct {
	Counters map[string]int64 // counter value per lock name
	Tokens   map[string]int64 // token of each counter's last write (0 if none)
	Writes   []Write
}

// Violation is one broken property, with the smallest slice of the history
// that shows it.
type Violation struct {
	Kind   string // what is wrong: "double holder", "token order", "stale write", "over limit", ...; each model's doc names its kinds
	Msg    string
	Events []Event // the offending events, in time order
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", v.Kind, v.Msg)
	for _, e := range v.Events {
		b.WriteString("\n    ")
		b.WriteString(e.String())
	}
	return b.String()
}

// acq is one acquisition: a token granted to a worker for a name.
type acq struct {
	name     string
	token    int64
	worker   string
	shared   bool   // the read side of a read/write lock (see CheckRW)
	upgr     bool   // an upgradeable read (see CheckRWSides)
	invoke   *Event // nil if not recorded
	ok       Event
	trusted  []Event // Trusted events of this acquisition
	lastTrst int64   // latest Trusted time; 0 if none
	// trustEnd is the latest end of a trust window recorded for it
	// (Event.TrustUntil of its AcquireOK and Renewed events); 0 if none.
	trustEnd int64
	window   Event // the event that recorded trustEnd
}

func (a *acq) events() []Event {
	var es []Event
	if a.invoke != nil {
		es = append(es, *a.invoke)
	}
	es = append(es, a.ok)
	if n := len(a.trusted); n > 0 {
		es = append(es, a.trusted[n-1]) // the latest is the one that matters
	}
	return es
}

// acquisitions gathers the grants of a history, per name and keyed by
// token, with the invocation and the trusted events of each (invokes: the
// invocations by worker and op). A token granted to two workers is a
// "double holder"; a trusted event of no grant of its worker's is
// "malformed" (what names the thing granted: "lock", "permit").
func acquisitions(events []Event, invokes map[opKey]Event, what string) (map[string]map[int64]*acq, []Violation) {
	var vs []Violation
	byName := map[string]map[int64]*acq{}
	for _, e := range events {
		if e.Kind != AcquireOK {
			continue
		}
		m := byName[e.Name]
		if m == nil {
			m = map[int64]*acq{}
			byName[e.Name] = m
		}
		if prev := m[e.Token]; prev != nil {
			if prev.worker != e.Worker {
				vs = append(vs, Violation{Kind: "double holder",
					Msg:    fmt.Sprintf("token %d of %q granted to %s and %s", e.Token, e.Name, prev.worker, e.Worker),
					Events: sortEvents(append(prev.events(), e))})
			}
			continue // a re-entry of the same acquisition
		}
		a := &acq{name: e.Name, token: e.Token, worker: e.Worker, shared: e.Shared, upgr: e.Upgradeable, ok: e, trustEnd: e.TrustUntil, window: e}
		if inv, ok := invokes[opKey{e.Worker, e.Op}]; ok {
			a.invoke = &inv
		}
		m[e.Token] = a
	}
	for _, e := range events {
		if e.Kind != Trusted && e.Kind != Renewed {
			continue
		}
		a := byName[e.Name][e.Token]
		if e.Kind == Renewed {
			// A renewal may run before its grant is recorded, and a
			// process killed in between records no grant.
			if a != nil && a.worker == e.Worker && e.TrustUntil > a.trustEnd {
				a.trustEnd, a.window = e.TrustUntil, e
			}
			continue
		}
		if a == nil || a.worker != e.Worker {
			vs = append(vs, Violation{Kind: "malformed", Msg: "trusted a " + what + " it was never granted", Events: []Event{e}})
			continue
		}
		a.trusted = append(a.trusted, e)
		a.lastTrst = max(a.lastTrst, e.At)
	}
	// A holder trusts its lease only inside its trust window.
	for _, n := range slices.Sorted(maps.Keys(byName)) {
		for _, tok := range slices.Sorted(maps.Keys(byName[n])) {
			a := byName[n][tok]
			if a.trustEnd == 0 {
				continue
			}
			for _, t := range a.trusted {
				if t.At > a.trustEnd {
					vs = append(vs, Violation{Kind: "trust window",
						Msg: fmt.Sprintf("%s trusted token %d of %q after its trust window had ended",
							a.worker, a.token, a.name),
						Events: sortEvents([]Event{a.window, t})})
					break
				}
			}
		}
	}
	return byName, vs
}

type opKey struct {
	worker string
	op     int64
}

type write struct {
	invoke Event
	done   *Event // nil if the worker never learned the outcome
}

// Check reads a history and the data left by its guarded writes, and
// returns every violation found (none for a correct run).
func Check(events []Event, data Data) []Violation {
	var vs []Violation
	invokes := map[opKey]Event{}
	for _, e := range events {
		switch e.Kind {
		case AcquireInvoke, WriteInvoke, ReleaseInvoke:
			invokes[opKey{e.Worker, e.Op}] = e
		}
	}

	byName, bad := acquisitions(events, invokes, "lock")
	vs = append(vs, bad...)
	changing, phases, bad := sidePhases(events, byName)
	vs = append(vs, bad...)

	names := slices.Sorted(maps.Keys(byName))
	byToken := map[string][]*acq{}
	for _, n := range names {
		as := make([]*acq, 0, len(byName[n]))
		for _, a := range byName[n] {
			as = append(as, a)
		}
		slices.SortFunc(as, func(x, y *acq) int { return cmp.Compare(x.token, y.token) })
		byToken[n] = as
		switch {
		case changing[n]:
			vs = append(vs, checkOverlapSides(as, phases)...)
		case anyShared(as):
			vs = append(vs, checkOverlapRW(as)...)
		default:
			vs = append(vs, checkOverlap(as)...)
		}
		vs = append(vs, checkTokenOrder(as)...)
	}

	// Guarded writes, from the history.
	writes := map[opKey]*write{}
	var order []opKey
	for _, e := range events {
		k := opKey{e.Worker, e.Op}
		switch e.Kind {
		case WriteInvoke:
			writes[k] = &write{invoke: e}
			order = append(order, k)
		case WriteOK, WriteFail, WriteUnknown:
			if w := writes[k]; w != nil {
				e := e
				w.done = &e
			}
		}
	}
	vs = append(vs, checkSets(events)...)
	exempt := func(w Event, b *acq) bool { return phases.staleExempt(byName[w.Name][w.Token], b) }
	vs = append(vs, checkStaleWrites(byToken, writes, order, exempt)...)
	vs = append(vs, checkData(data, writes, order)...)
	return vs
}

// checkOverlap finds an older acquisition still trusted at or after a newer
// one was granted. as is sorted by token.
//
// A holder trusts its lock at t only if its lease is live in the database at
// t, and a newer token is granted only once the older lease has ended; so
// the newer grant returns after every moment the older one was trusted.
func checkOverlap(as []*acq) []Violation {
	var vs []Violation
	// firstAfter[i]: the acquisition with the earliest grant among as[i:].
	firstAfter := make([]*acq, len(as)+1)
	for i := len(as) - 1; i >= 0; i-- {
		firstAfter[i] = as[i]
		if f := firstAfter[i+1]; f != nil && f.ok.At < as[i].ok.At {
			firstAfter[i] = f
		}
	}
	for i, a := range as {
		b := firstAfter[i+1]
		if b == nil || a.lastTrst == 0 || b.ok.At > a.lastTrst {
			continue
		}
		es := b.events()
		for _, t := range a.trusted {
			if t.At >= b.ok.At {
				es = append(es, t)
				break
			}
		}
		if a.invoke != nil {
			es = append(es, *a.invoke)
		}
		es = append(es, a.ok)
		vs = append(vs, Violation{Kind: "double holder",
			Msg: fmt.Sprintf("%s trusted token %d of %q after %s was granted token %d",
				a.worker, a.token, a.name, b.worker, b.token),
			Events: sortEvents(dedupe(es))})
	}
	return vs
}

// checkTokenOrder finds an acquisition whose token is not greater than that
// of an acquisition granted before it was asked for. as is sorted by token.
func checkTokenOrder(as []*acq) []Violation {
	var vs []Violation
	byOK := slices.Clone(as)
	slices.SortFunc(byOK, func(x, y *acq) int { return cmp.Compare(x.ok.At, y.ok.At) })
	// maxBefore[i]: the acquisition with the largest token among byOK[:i+1].
	maxBefore := make([]*acq, len(byOK))
	for i, a := range byOK {
		maxBefore[i] = a
		if i > 0 && maxBefore[i-1].token > a.token {
			maxBefore[i] = maxBefore[i-1]
		}
	}
	for _, b := range as {
		if b.invoke == nil {
			continue
		}
		i := sort.Search(len(byOK), func(i int) bool { return byOK[i].ok.At >= b.invoke.At }) - 1
		if i < 0 {
			continue
		}
		a := maxBefore[i]
		if a.token >= b.token {
			vs = append(vs, Violation{Kind: "token order",
				Msg: fmt.Sprintf("%s was granted token %d of %q after %s had been granted token %d",
					b.worker, b.token, b.name, a.worker, a.token),
				Events: sortEvents([]Event{a.ok, *b.invoke, b.ok})})
		}
	}
	return vs
}

// checkStaleWrites finds a guarded write that committed although it began
// after a newer token for its name had been granted, unless exempt says
// that grant leaves the write fresh (see CheckRWSides).
func checkStaleWrites(byToken map[string][]*acq, writes map[opKey]*write, order []opKey, exempt func(w Event, b *acq) bool) []Violation {
	var vs []Violation
	for _, k := range order {
		w := writes[k]
		if w.done == nil || w.done.Kind != WriteOK {
			continue
		}
		for _, b := range byToken[w.invoke.Name] {
			if b.token > w.invoke.Token && b.ok.At < w.invoke.At && !exempt(w.invoke, b) {
				vs = append(vs, Violation{Kind: "stale write",
					Msg: fmt.Sprintf("%s's write with token %d of %q committed although it began after %s was granted token %d",
						w.invoke.Worker, w.invoke.Token, w.invoke.Name, b.worker, b.token),
					Events: sortEvents([]Event{b.ok, w.invoke, *w.done})})
				break
			}
		}
	}
	return vs
}

// checkData compares the counters with the write log, and the write log
// with what the workers recorded.
func checkData(data Data, writes map[opKey]*write, order []opKey) []Violation {
	var vs []Violation
	logged := map[string][]Write{}
	for _, w := range data.Writes {
		logged[w.Name] = append(logged[w.Name], w)
	}
	names := map[string]bool{}
	for n := range data.Counters {
		names[n] = true
	}
	for n := range logged {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	slices.Sort(sorted)

	type tally struct{ ok, unknown int }
	tallies := map[string]*tally{}
	okByValue := map[string]map[int64]Event{}
	for _, k := range order {
		w := writes[k]
		t := tallies[w.invoke.Name]
		if t == nil {
			t = &tally{}
			tallies[w.invoke.Name] = t
		}
		switch {
		case w.done == nil || w.done.Kind == WriteUnknown:
			t.unknown++
		case w.done.Kind == WriteOK:
			t.ok++
			if okByValue[w.invoke.Name] == nil {
				okByValue[w.invoke.Name] = map[int64]Event{}
			}
			okByValue[w.invoke.Name][w.done.Value] = *w.done
		}
	}

	for _, n := range sorted {
		ws := logged[n]
		slices.SortStableFunc(ws, func(x, y Write) int { return cmp.Compare(x.Value, y.Value) })
		if c := data.Counters[n]; c != int64(len(ws)) {
			vs = append(vs, Violation{Kind: "lost update",
				Msg: fmt.Sprintf("counter %q is %d but %d increments committed", n, c, len(ws))})
		}
		for i, w := range ws {
			switch {
			case w.Value != int64(i+1):
				vs = append(vs, Violation{Kind: "lost update",
					Msg: fmt.Sprintf("counter %q: the write of %s (token %d) wrote %d as increment #%d (a concurrent holder's update was overwritten)",
						n, w.Worker, w.Token, w.Value, i+1)})
			case i > 0 && w.Token < ws[i-1].Token:
				vs = append(vs, Violation{Kind: "stale write",
					Msg: fmt.Sprintf("counter %q: value %d written with token %d after value %d with token %d",
						n, w.Value, w.Token, ws[i-1].Value, ws[i-1].Token)})
			}
			if len(vs) > 20 {
				return vs // enough to see what broke
			}
		}
		t := tallies[n]
		if t == nil {
			t = &tally{}
		}
		if len(ws) < t.ok || len(ws) > t.ok+t.unknown {
			// The suspects: writes that failed for sure, by an acquisition
			// whose increment is in the database without a recorded commit.
			var es []Event
			var rows []string
			for _, lw := range ws {
				if e, ok := okByValue[n][lw.Value]; ok && e.Token == lw.Token && e.Worker == lw.Worker {
					continue
				}
				rows = append(rows, fmt.Sprintf("value %d by %s with token %d", lw.Value, lw.Worker, lw.Token))
				for _, k := range order {
					if w := writes[k]; w.invoke.Worker == lw.Worker && w.invoke.Token == lw.Token && w.invoke.Name == n {
						es = append(es, w.invoke)
						if w.done != nil {
							es = append(es, *w.done)
						}
					}
				}
			}
			vs = append(vs, Violation{Kind: "history/data mismatch",
				Msg: fmt.Sprintf("%q: %d increments in the database, but workers saw %d commit and %d of unknown outcome; in the database without a recorded commit: %s",
					n, len(ws), t.ok, t.unknown, strings.Join(rows, "; ")), Events: sortEvents(es)})
		}
		byValue := map[int64]Write{}
		for _, w := range ws {
			byValue[w.Value] = w
		}
		for v, e := range okByValue[n] {
			if w, ok := byValue[v]; !ok || w.Token != e.Token || w.Worker != e.Worker {
				vs = append(vs, Violation{Kind: "history/data mismatch",
					Msg:    fmt.Sprintf("%q: a committed write of value %d is not in the database as written", n, v),
					Events: []Event{e}})
			}
		}
	}
	return vs
}

func sortEvents(es []Event) []Event {
	slices.SortStableFunc(es, func(x, y Event) int { return cmp.Compare(x.At, y.At) })
	return es
}

func dedupe(es []Event) []Event {
	seen := map[Event]bool{}
	out := es[:0]
	for _, e := range es {
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	return out
}
