package chaos

import (
	"fmt"
	"slices"
	"strings"
)

// Event kinds of a set's acquisition (sqllock.Table.AcquireAll). A set
// operation is recorded as a SetInvoke, an AcquireInvoke per name (same Op
// and time), and then either an AcquireOK per name granted (same Op, each
// with its token) followed by a SetOK, or a SetFail. A set without its end
// (the worker was killed) has an unknown outcome. The per-name events
// put each name of the set under the checks of single locks (no double
// holder, token order, no stale write); checkSets adds the set's own
// property.
const (
	// SetInvoke starts a set's acquisition; SetOK and SetFail end it.
	SetInvoke Kind = "set"
	SetOK     Kind = "set-ok"
	SetFail   Kind = "set-fail"
)

// checkSets finds sets granted in part: a set grant (SetOK) that does not
// come with exactly one grant of each of its names and no other, and a
// refused set (SetFail) that comes with a grant of any name. Together with
// the per-name checks (which see each name of a set as a lock granted at
// the set's grant), it is the all-or-nothing model of a set: every name of
// a granted set was held by its owner alone from the set's grant on, and a
// refused set held nothing.
func checkSets(events []Event) []Violation {
	type set struct {
		end    *Event             // SetOK or SetFail
		grants map[string][]Event // AcquireOK events of the set's op, by name
	}
	sets := map[opKey]*set{}
	var order []opKey
	for _, e := range events {
		if e.Kind == SetOK || e.Kind == SetFail {
			k := opKey{e.Worker, e.Op}
			e := e
			sets[k] = &set{end: &e, grants: map[string][]Event{}}
			order = append(order, k)
		}
	}
	for _, e := range events {
		if s := sets[opKey{e.Worker, e.Op}]; s != nil && e.Kind == AcquireOK {
			s.grants[e.Name] = append(s.grants[e.Name], e)
		}
	}
	var vs []Violation
	for _, k := range order {
		s := sets[k]
		var extra []Event
		for _, es := range s.grants {
			extra = append(extra, es...)
		}
		if s.end.Kind == SetFail {
			if len(extra) > 0 {
				vs = append(vs, Violation{Kind: "partial set",
					Msg:    fmt.Sprintf("%s's refused set %q was granted %d of its names", k.worker, s.end.SetNames(), len(extra)),
					Events: sortEvents(append(extra, *s.end))})
			}
			continue
		}
		var missing []string
		for _, name := range s.end.SetNames() {
			switch len(s.grants[name]) {
			case 0:
				missing = append(missing, name)
			case 1:
				delete(s.grants, name)
			}
		}
		if len(missing) > 0 || len(s.grants) > 0 {
			others := make([]string, 0, len(s.grants))
			for name := range s.grants {
				others = append(others, name)
			}
			slices.Sort(others)
			vs = append(vs, Violation{Kind: "partial set",
				Msg: fmt.Sprintf("%s's set %q was granted without %q, and with extra or repeated grants of %q",
					k.worker, s.end.SetNames(), missing, others),
				Events: sortEvents(append(extra, *s.end))})
		}
	}
	return vs
}

// SetNames returns the names of a set event's Set.
func (e Event) SetNames() []string {
	if e.Set == "" {
		return nil
	}
	return strings.Split(e.Set, ",")
}

// JoinSet is the Set of a set event on names, which must not contain
// commas.
func JoinSet(names []string) string { return strings.Join(names, ",") }
