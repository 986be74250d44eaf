package chaos

import (
	"fmt"
	"time"
)

// RevokeHold is one hold of a lock in a revocation scenario, as its holder
// saw it: the host times its grant was asked for and returned, its token,
// what Lock.Revoked told it (if anything) and when, and how it ended.
type RevokeHold struct {
	Token                int64
	GrantStart, GrantEnd time.Time
	// Told is when the holder found Revoked closed, zero if never, and
	// Reason is RevokeReason then.
	Told   time.Time
	Reason string
	// ReleaseStart is when the holder began to let go; Lost says that
	// the lease had been lost by then (its context ended), or that the
	// release reported it lost.
	ReleaseStart time.Time
	Lost         bool
}

// RevokeAsk is one Table.RequestRelease call: its reason (unique in the
// scenario), the host times it started and returned, and its outcome.
type RevokeAsk struct {
	Reason     string
	Start, End time.Time
	Asked      bool
	Err        string // "" for none: with an error it may or may not have asked
}

// CheckRevoke returns the violations of the revocation model, for a lock
// whose leases last ttl, in holds and asks:
//
//   - a hold told a reason that no ask gave, or that only an ask which
//     returned before the hold's grant was asked for, or reported that it
//     asked nobody, could have given: a request is kept for the lease
//     asked, and never reaches a later one;
//   - a hold told before any ask with its reason started;
//   - an ask that reported a holder asked while no hold could have been
//     held (none granted before it returned and released after it
//     started);
//   - a hold that was held, and not lost, from before an ask started
//     until ttl after it returned, with that ask reporting a holder asked,
//     and yet was never told: it renewed at least once in that time, and
//     every renewal reads the request.
func CheckRevoke(ttl time.Duration, holds []RevokeHold, asks []RevokeAsk) []string {
	var v []string
	byReason := make(map[string]RevokeAsk, len(asks))
	for _, a := range asks {
		byReason[a.Reason] = a
	}
	for _, h := range holds {
		if h.Told.IsZero() {
			continue
		}
		a, ok := byReason[h.Reason]
		switch {
		case !ok:
			v = append(v, fmt.Sprintf("token %d was told %q, which no ask gave", h.Token, h.Reason))
		case a.Err == "" && !a.Asked:
			v = append(v, fmt.Sprintf("token %d was told %q, whose ask reported nobody asked", h.Token, h.Reason))
		case a.End.Before(h.GrantStart):
			v = append(v, fmt.Sprintf("token %d, granted from %v, was told %q, asked of an earlier lease (the ask returned at %v)",
				h.Token, h.GrantStart.Format(time.StampMicro), h.Reason, a.End.Format(time.StampMicro)))
		case h.Told.Before(a.Start):
			v = append(v, fmt.Sprintf("token %d was told %q at %v, before its ask started at %v",
				h.Token, h.Reason, h.Told.Format(time.StampMicro), a.Start.Format(time.StampMicro)))
		}
	}
	for _, a := range asks {
		if !a.Asked {
			continue
		}
		held := false
		for _, h := range holds {
			if h.GrantStart.Before(a.End) && h.ReleaseStart.After(a.Start) {
				held = true
			}
			if h.Told.IsZero() && !h.Lost && h.GrantEnd.Before(a.Start) && h.ReleaseStart.After(a.End.Add(ttl)) {
				v = append(v, fmt.Sprintf("token %d, held from %v to %v, was never told of %q, asked from %v to %v",
					h.Token, h.GrantEnd.Format(time.StampMicro), h.ReleaseStart.Format(time.StampMicro), a.Reason,
					a.Start.Format(time.StampMicro), a.End.Format(time.StampMicro)))
			}
		}
		if !held {
			v = append(v, fmt.Sprintf("ask %q reported a holder asked, but no hold overlaps it", a.Reason))
		}
	}
	return v
}
