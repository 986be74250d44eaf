package chaos

import (
	"strings"
	"testing"
	"time"
)

const ledgerTimeFormat = "2006-01-02T15:04:05.000000Z07:00" // ledger.TimeFormat

// goodLedger is a history without violations: three occurrences, the
// second taken over from a dead runner, the third failed once and retried.
func goodLedger() LedgerHistory {
	t0 := time.Date(2026, 11, 26, 15, 0, 0, 0, time.UTC)
	occ := func(i int) string { return t0.Add(time.Duration(i) * time.Second).Format(ledgerTimeFormat) }
	return LedgerHistory{
		Period: time.Second, TimeFormat: ledgerTimeFormat,
		Attempts: []LedgerAttempt{
			{Occurrence: occ(0), Attempt: 1, State: "succeeded", Owner: "a", Token: 10},
			{Occurrence: occ(1), Attempt: 1, State: "abandoned", Owner: "b", Token: 11},
			{Occurrence: occ(1), Attempt: 2, State: "succeeded", Owner: "a", Token: 12},
			{Occurrence: occ(2), Attempt: 1, State: "failed", Owner: "c", Token: 13},
			{Occurrence: occ(2), Attempt: 2, State: "succeeded", Owner: "c", Token: 14},
		},
		Reports: []LedgerReport{
			{Replica: "a", Occurrence: occ(0), Ran: true, State: "succeeded", Attempt: 1, Token: 10},
			{Replica: "b", Occurrence: occ(0), State: "succeeded", Attempt: 1, Token: 10},
			{Replica: "b", Occurrence: occ(1), Ran: true, State: "abandoned", Attempt: 1, Token: 11, Err: "lock lost"},
			{Replica: "a", Occurrence: occ(1), Ran: true, State: "succeeded", Attempt: 2, Token: 12},
		},
		Missed: []string{occ(3)},
		Up:     []Uptime{{Replica: "a", From: t0.Add(-time.Second), To: t0.Add(2600 * time.Millisecond)}},
		From:   t0, To: t0.Add(3 * time.Second),
	}
}

// occ2 is goodLedger's third occurrence.
func occ2() string { return goodLedger().Attempts[3].Occurrence }

func TestCheckLedgerPassesAGoodHistory(t *testing.T) {
	h := goodLedger()
	if v := CheckLedger(h); len(v) != 0 {
		t.Fatalf("violations: %v", v)
	}
	if up, left := LedgerLiveness(h); up != 0 || left != 0 {
		t.Fatalf("liveness: %d missed while up, %d not taken over", up, left)
	}
}

func TestLedgerLivenessCounts(t *testing.T) {
	h := goodLedger()
	h.Attempts = h.Attempts[:2] // occurrence 1 left abandoned, 2 without attempts
	if up, left := LedgerLiveness(h); up != 1 || left != 1 {
		t.Fatalf("liveness: %d missed while up, %d not taken over; want 1 and 1", up, left)
	}
}

func TestCheckLedgerCatchesBadHistories(t *testing.T) {
	for _, c := range []struct {
		name, want string
		spoil      func(h *LedgerHistory)
	}{
		{"two successes in the ledger", "2 attempts succeeded", func(h *LedgerHistory) {
			h.Attempts[1].State = "succeeded"
		}},
		{"two runners told of success", "2 runners were told", func(h *LedgerHistory) {
			h.Reports = append(h.Reports, LedgerReport{Replica: "c", Occurrence: h.Reports[0].Occurrence,
				Ran: true, State: "succeeded", Attempt: 1, Token: 10})
		}},
		{"a success the ledger lacks", "the ledger disagrees", func(h *LedgerHistory) {
			h.Reports[2] = LedgerReport{Replica: "b", Occurrence: h.Reports[2].Occurrence, Ran: true, State: "succeeded", Attempt: 1, Token: 11}
		}},
		{"a token that does not grow", "not above attempt 1's", func(h *LedgerHistory) {
			h.Attempts[2].Token = 11
		}},
		{"a token that goes back", "not above attempt 1's", func(h *LedgerHistory) {
			h.Attempts[4].Token = 5
		}},
		{"an attempt number skipped", "attempt 3 where 2 was due", func(h *LedgerHistory) {
			h.Attempts[4].Attempt = 3
		}},
		{"succeeded and missed", "reported missed, but has 1 attempts (the last succeeded)", func(h *LedgerHistory) {
			h.Missed = append(h.Missed, h.Attempts[0].Occurrence)
		}},
		{"a dead run never taken over", "is abandoned, although a was told it succeeded", func(h *LedgerHistory) {
			h.Attempts = h.Attempts[:2]
		}},
		{"a running attempt followed by another", "is running, yet attempt 2 followed", func(h *LedgerHistory) {
			h.Attempts[1].State = "running"
		}},
		{"missed although a replica asked", "no attempt, although c was answered", func(h *LedgerHistory) {
			h.Attempts = h.Attempts[:3] // occurrence 2 vanishes
			h.Reports = append(h.Reports, LedgerReport{Replica: "c", Occurrence: occ2(), State: "failed"})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := goodLedger()
			c.spoil(&h)
			v := CheckLedger(h)
			for _, s := range v {
				if strings.Contains(s, c.want) {
					return
				}
			}
			t.Fatalf("no violation %q among %v", c.want, v)
		})
	}
}
