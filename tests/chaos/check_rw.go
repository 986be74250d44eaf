package chaos

import "fmt"

// Read/write locks.
//
// An acquisition of the read side of a read/write lock is recorded with
// Event.Shared. Check then applies the read/write model to the name's
// acquisitions instead of the mutex model: readers may overlap each other,
// but no reader may overlap a writer and no two writers may overlap.
// Tokens of a name grow in grant order whatever the side, so the token
// order check is the mutex's: each acquisition's token exceeds every token
// granted for the name before it was asked for (a writer's exceeds every
// earlier reader's and writer's).
//
// As in the mutex model, a holder trusts its lease at t only if it is live
// in the database at t, and a conflicting grant with a larger token comes
// only after that lease has ended: so the later grant of a conflicting
// pair (at least one writer) returns after every moment the holder with
// the smaller token trusted its lease. The checker flags a pair where it
// does not.

// CheckRW is Check for a history of read/write locks; Check applies the
// read/write model by itself to every name with a shared acquisition, so
// CheckRW only documents the model by its name.
func CheckRW(events []Event, data Data) []Violation { return Check(events, data) }

// anyShared reports whether any of as is a read-side acquisition.
func anyShared(as []*acq) bool {
	for _, a := range as {
		if a.shared {
			return true
		}
	}
	return false
}

// checkOverlapRW finds a pair of conflicting acquisitions (a writer and
// anyone) where the one with the smaller token was still trusted at or
// after the other was granted. as is sorted by token.
func checkOverlapRW(as []*acq) []Violation {
	var vs []Violation
	// all[i] and writer[i]: among as[:i], the acquisition (the writer's)
	// trusted last.
	all := make([]*acq, len(as)+1)
	writer := make([]*acq, len(as)+1)
	for i, a := range as {
		all[i+1], writer[i+1] = all[i], writer[i]
		if a.lastTrst != 0 && (all[i] == nil || a.lastTrst > all[i].lastTrst) {
			all[i+1] = a
		}
		if !a.shared && a.lastTrst != 0 && (writer[i] == nil || a.lastTrst > writer[i].lastTrst) {
			writer[i+1] = a
		}
	}
	for i, b := range as {
		a := writer[i] // a reader conflicts with earlier writers only
		if !b.shared {
			a = all[i]
		}
		if a == nil || b.ok.At > a.lastTrst {
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
			Msg: fmt.Sprintf("%s (%s) trusted token %d of %q after %s (%s) was granted token %d",
				a.worker, side(a), a.token, a.name, b.worker, side(b), b.token),
			Events: sortEvents(dedupe(es))})
	}
	return vs
}

func side(a *acq) string {
	if a.shared {
		return "reader"
	}
	return "writer"
}
