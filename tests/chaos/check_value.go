package chaos

import (
	"fmt"
	"time"
)

// ValueHold is one hold of the lock name a values scenario is about, as
// its holder saw it: its token, the host times its grant was asked for
// and returned, and when its release was asked for and returned.
// ReleaseEnd is zero when the release did not report the lease released
// (an error, the lease lost), and Lost says that the lease had been lost
// by the time the holder let go.
type ValueHold struct {
	Token                    int64
	GrantStart, GrantEnd     time.Time
	ReleaseStart, ReleaseEnd time.Time
	Lost                     bool
}

// ValueOutcome is what a Lock.SetValue call reported.
type ValueOutcome int

const (
	// ValueOK is a nil error: the value was written, for the token.
	ValueOK ValueOutcome = iota
	// ValueLost is ErrLockLost or ErrNotHeld: nothing was written.
	ValueLost
	// ValueErr is any other error: the value may or may not have been
	// written.
	ValueErr
)

// ValueSet is one Lock.SetValue call: the token of the hold that made it,
// the value (unique in the scenario), the host times it started and
// returned, and its outcome.
type ValueSet struct {
	Token      int64
	Value      string
	Start, End time.Time
	Outcome    ValueOutcome
}

// ValueRead is one Table.Value call that returned no error: the host
// times it started and returned and, when Found, the token of the lease
// it reported and that lease's value ("" for none).
type ValueRead struct {
	Start, End time.Time
	Found      bool
	Token      int64
	Value      string
}

// ValueBreak is one Table.Break (or BreakToken) that reported breaking the
// lease with Token, with the host times it started and returned.
type ValueBreak struct {
	Token      int64
	Start, End time.Time
}

// CheckValue returns the violations of the model of the values on a lock
// (Lock.SetValue, Table.Value), for one name, in holds, sets, reads and
// breaks:
//
//   - a read returned a value that no SetValue wrote, or only one that
//     reported writing nothing (ErrLockLost, ErrNotHeld), or one that
//     started after the read returned;
//   - a read returned a value written under another token than the one it
//     returned: a takeover never shows an earlier holder's value;
//   - a read returned a value that a later write for the same token had
//     replaced: one that started after the value's write returned, and
//     returned, successfully, before the read started (values are
//     unique, so which write a read saw is known);
//   - a read returned a token with no value after a successful SetValue
//     for that token returned before the read started;
//   - a read returned a token older than one whose grant returned before
//     the read started, or one whose grant was asked for only after the
//     read returned;
//   - a SetValue reported success for a hold whose release returned before
//     it started, for a lease whose Break returned before it started, or
//     after a grant of a later token returned before it started: the
//     write is fenced by the lease, and a lease that has ended stays
//     ended.
func CheckValue(holds []ValueHold, sets []ValueSet, reads []ValueRead, breaks []ValueBreak) []string {
	var v []string
	stamp := func(t time.Time) string { return t.Format(time.StampMicro) }
	byValue := make(map[string]ValueSet, len(sets))
	for _, s := range sets {
		byValue[s.Value] = s
	}
	holdOf := make(map[int64]ValueHold, len(holds))
	for _, h := range holds {
		holdOf[h.Token] = h
	}
	for _, r := range reads {
		if !r.Found {
			continue
		}
		for _, h := range holds {
			if h.Token > r.Token && h.GrantEnd.Before(r.Start) {
				v = append(v, fmt.Sprintf("a read from %v to %v returned token %d, after token %d's grant returned at %v",
					stamp(r.Start), stamp(r.End), r.Token, h.Token, stamp(h.GrantEnd)))
				break
			}
		}
		if h, ok := holdOf[r.Token]; ok && h.GrantStart.After(r.End) {
			v = append(v, fmt.Sprintf("a read returning at %v returned token %d, whose grant was asked for only at %v",
				stamp(r.End), r.Token, stamp(h.GrantStart)))
		}
		if r.Value == "" {
			for _, s := range sets {
				if s.Token == r.Token && s.Outcome == ValueOK && s.End.Before(r.Start) {
					v = append(v, fmt.Sprintf("a read from %v returned token %d with no value, after its SetValue(%q) returned ok at %v",
						stamp(r.Start), r.Token, s.Value, stamp(s.End)))
					break
				}
			}
			continue
		}
		w, ok := byValue[r.Value]
		switch {
		case !ok:
			v = append(v, fmt.Sprintf("a read from %v returned %q, which no SetValue wrote", stamp(r.Start), r.Value))
			continue
		case w.Outcome == ValueLost:
			v = append(v, fmt.Sprintf("a read from %v returned %q, whose SetValue (token %d) reported writing nothing",
				stamp(r.Start), r.Value, w.Token))
		case w.Token != r.Token:
			v = append(v, fmt.Sprintf("a read from %v returned token %d with %q, written for token %d",
				stamp(r.Start), r.Token, r.Value, w.Token))
		case w.Start.After(r.End):
			v = append(v, fmt.Sprintf("a read returning at %v returned %q, whose SetValue started only at %v",
				stamp(r.End), r.Value, stamp(w.Start)))
		}
		for _, s := range sets {
			if s.Token == r.Token && s.Outcome == ValueOK && s.Start.After(w.End) && s.End.Before(r.Start) {
				v = append(v, fmt.Sprintf("a read from %v returned token %d's %q, replaced by its SetValue(%q) from %v to %v",
					stamp(r.Start), r.Token, r.Value, s.Value, stamp(s.Start), stamp(s.End)))
				break
			}
		}
	}
	for _, s := range sets {
		if s.Outcome != ValueOK {
			continue
		}
		if h, ok := holdOf[s.Token]; ok && !h.ReleaseEnd.IsZero() && h.ReleaseEnd.Before(s.Start) {
			v = append(v, fmt.Sprintf("SetValue(%q) from %v reported ok, after token %d's release returned at %v",
				s.Value, stamp(s.Start), s.Token, stamp(h.ReleaseEnd)))
		}
		for _, b := range breaks {
			if b.Token == s.Token && b.End.Before(s.Start) {
				v = append(v, fmt.Sprintf("SetValue(%q) from %v reported ok, after token %d was broken at %v",
					s.Value, stamp(s.Start), s.Token, stamp(b.End)))
				break
			}
		}
		for _, h := range holds {
			if h.Token > s.Token && h.GrantEnd.Before(s.Start) {
				v = append(v, fmt.Sprintf("SetValue(%q) for token %d from %v reported ok, after token %d's grant returned at %v",
					s.Value, s.Token, stamp(s.Start), h.Token, stamp(h.GrantEnd)))
				break
			}
		}
	}
	return v
}
