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

func TestCheckLedgerPassesAGoodHistory(t *testing.T) {
	if v := CheckLedger(goodLedger()); len(v) != 0 {
		t.Fatalf("violations: %v", v)
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
		{"a dead run never taken over", "never taken over", func(h *LedgerHistory) {
			h.Attempts = h.Attempts[:2]
		}},
		{"a running attempt followed by another", "is running, yet attempt 2 followed", func(h *LedgerHistory) {
			h.Attempts[1].State = "running"
		}},
		{"missed while a replica was up", "no attempt, although a was up", func(h *LedgerHistory) {
			h.Attempts = append(h.Attempts[:3:3], h.Attempts[5:]...) // occurrence 2 vanishes
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
