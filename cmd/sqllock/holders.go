package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/inspect"
)

// lockRow is one held lock, as sqllock locks shows it.
type lockRow struct {
	Name string `json:"name"`
	// Strategy is the kind of lock: "table", "election" (a lock table
	// lease whose holder proclaimed a value), "optimistic", "semaphore",
	// "rwlock" or "pessimistic".
	Strategy string `json:"strategy"`
	// Mode is "exclusive" or "shared" (a semaphore's permits are shared:
	// up to its limit of holders at once; so is a read lock).
	Mode string `json:"mode"`
	// Owner is the holder: the owner string of a lease, or the server
	// session holding a pessimistic lock.
	Owner string `json:"owner"`
	// Token is 0 where the database does not keep it (pessimistic locks).
	Token int64 `json:"token"`
	Holds int   `json:"holds"`
	// Limit is a semaphore's number of holders at once; 0 elsewhere.
	Limit int `json:"limit,omitempty"`
	// Value is the value an election's leader proclaimed (kind
	// "election"), or the value a lock table lease's holder set on it
	// (run --value, Lock.SetValue); nil elsewhere.
	Value *string `json:"value,omitempty"`
	// Waiters is the number of sessions queued for the lock, where the
	// server shows them (pessimistic locks); nil elsewhere.
	Waiters    *int       `json:"waiters,omitempty"`
	AcquiredAt time.Time  `json:"acquired_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"` // nil: no lease
	HeldForMS  int64      `json:"held_for_ms"`
	// ExpiresInMS is the lease left; negative for an expired lease not yet
	// taken over or reaped; nil without a lease.
	ExpiresInMS *int64 `json:"expires_in_ms,omitempty"`
	// MinHoldUntil is set for a lock whose run has ended before its
	// minimum hold (--min-hold): nobody holds it (Holds is 0), and nobody
	// can take it before this instant.
	MinHoldUntil *time.Time `json:"min_hold_until,omitempty"`
}

// heldFor and expiresIn are the row's durations.
func (r lockRow) heldFor() time.Duration { return time.Duration(r.HeldForMS) * time.Millisecond }

func (r lockRow) expiresIn() (time.Duration, bool) {
	if r.ExpiresInMS == nil {
		return 0, false
	}
	return time.Duration(*r.ExpiresInMS) * time.Millisecond, true
}

// live reports whether r keeps its name from being taken: a held lock
// whose lease has not expired, or a finished run's minimum hold.
func (r lockRow) live() bool {
	left, ok := r.expiresIn()
	return !ok || left > 0
}

// timeLeft is r's TIME LEFT column: the lease left, "expired", "min-hold"
// and the time left of a minimum hold, or "-" without a lease.
func (r lockRow) timeLeft() string {
	left, ok := r.expiresIn()
	switch {
	case !ok:
		return "-"
	case left <= 0:
		return "expired"
	case r.MinHoldUntil != nil:
		return "min-hold " + left.Round(time.Second).String()
	}
	return left.Round(time.Millisecond).String()
}

// describe names r's holder for messages: who, and how long it has left.
func (r lockRow) describe() string {
	var b strings.Builder
	if r.MinHoldUntil != nil {
		left, _ := r.expiresIn()
		fmt.Fprintf(&b, "kept by the minimum hold (--min-hold) of a finished run of %s (%s, token %d) until %s (%v left)",
			r.Owner, r.Strategy, r.Token, r.MinHoldUntil.Format("15:04:05 MST"), left.Round(time.Second))
		return b.String()
	}
	fmt.Fprintf(&b, "held by %s", r.Owner)
	if r.Strategy == "pessimistic" {
		fmt.Fprintf(&b, " (%s, pessimistic, for %v", r.Mode, r.heldFor().Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, " (%s, token %d, for %v", r.Strategy, r.Token, r.heldFor().Round(time.Millisecond))
	}
	if left, ok := r.expiresIn(); ok {
		if left > 0 {
			fmt.Fprintf(&b, ", lease expires in %v", left.Round(time.Millisecond))
		} else {
			b.WriteString(", lease expired")
		}
	}
	if r.Waiters != nil {
		fmt.Fprintf(&b, ", %d waiting", *r.Waiters)
	}
	b.WriteString(")")
	return b.String()
}

// isTable reports whether r is a lease of the lock table (an election's
// too).
func (r lockRow) isTable() bool { return r.Strategy == "table" || r.Strategy == "election" }

// errNoLockView is the reason the server shows no row locks, where
// listLocks leaves them out.
var errNoLockView = errors.New("this server shows no row locks")

// listLocks lists the locks of every strategy the dialect supports, held or
// with a lease not yet reaped, by name (inspect.Locks). Pessimistic locks
// the server cannot show are left out, with the reason in skipped.
func listLocks(ctx context.Context, t *target) (rows []lockRow, skipped error, err error) {
	r, err := inspect.Locks(ctx, t.d)
	if err != nil {
		return nil, nil, err
	}
	if r.Unlisted != nil {
		// The reason, without the sentinel's words ("not supported by
		// this dialect"), which errNoLockView says better.
		why := strings.TrimPrefix(r.Unlisted.Error(), dialect.ErrUnsupported.Error()+": ")
		skipped = fmt.Errorf("%w: %s", errNoLockView, why)
	} else if t.d.Catalogue().Pessimistic != nil && t.d.Catalogue().RowLocks == nil {
		skipped = errNoLockView
	}
	for _, h := range r.Holders {
		rows = append(rows, holderRow(h))
	}
	return rows, skipped, nil
}

// holderRow is h as sqllock locks shows it.
func holderRow(h dialect.Holder) lockRow {
	r := lockRow{
		Name: h.Name, Strategy: h.Primitive, Mode: h.Mode, Owner: h.Owner, Token: h.Token, Holds: h.Holds,
		Limit: h.Limit, AcquiredAt: h.AcquiredAt.Local(), HeldForMS: h.HeldFor.Milliseconds(),
	}
	if h.Primitive == "election" || h.Value != "" {
		r.Value = &h.Value
	}
	// A row lock's waiters are always shown; tickets where there are some.
	if h.Primitive == "pessimistic" || h.Waiters > 0 {
		r.Waiters = &h.Waiters
	}
	if h.Primitive != "pessimistic" { // a lease
		expires := h.ExpiresAt.Local()
		left := h.ExpiresIn.Milliseconds()
		r.ExpiresAt, r.ExpiresInMS = &expires, &left
		if h.Holds == 0 && h.ExpiresIn > 0 {
			r.MinHoldUntil = &expires
		}
	}
	return r
}
