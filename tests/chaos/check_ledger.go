package chaos

import (
	"fmt"
	"sort"
	"time"
)

// LedgerAttempt is a row of the run ledger (package ledger) as a ledger
// scenario left it: one attempt of an occurrence of the scenario's job.
type LedgerAttempt struct {
	Occurrence string
	Attempt    int
	State      string // running, succeeded, failed, abandoned
	Owner      string
	Token      int64
	StartedAt  time.Time
}

// LedgerReport is what a runner was told by one call of Ledger.Run that
// returned.
type LedgerReport struct {
	Replica    string
	Occurrence string
	Ran        bool
	State      string
	Attempt    int
	Token      int64
	Err        string
}

// Uptime is a span of host time during which a replica was running: not
// stopped, not yet killed.
type Uptime struct {
	Replica  string
	From, To time.Time
}

// LedgerHistory is what a ledger scenario leaves for CheckLedger: the
// ledger's rows, what the runners were told, which occurrences the ledger
// reported missed, and when each replica was up (for LedgerLiveness).
// Times of Up and of the occurrences are on the host's clock, which the
// database servers of the test share.
type LedgerHistory struct {
	Period   time.Duration
	Attempts []LedgerAttempt
	Reports  []LedgerReport
	// Missed are the occurrences Ledger.Missed reported.
	Missed []string
	// Up are the replicas' spans of being up; From and To bound the
	// occurrences LedgerLiveness looks at.
	Up       []Uptime
	From, To time.Time
	// TimeFormat parses the occurrences (ledger.TimeFormat).
	TimeFormat string
}

// CheckLedger returns the violations of the run ledger's model in h:
//
//   - an occurrence with more than one succeeded attempt, or run
//     successfully (as its runner was told) more than once, or whose runner
//     was told of a success that the ledger does not hold;
//   - an attempt whose token is not greater than the previous attempt's
//     of the same occurrence, attempts not numbered 1, 2, 3…, or a running
//     or succeeded attempt followed by another;
//   - an occurrence reported missed although it has an attempt (so also
//     one both succeeded and missed);
//   - an occurrence without any attempt although a runner's Run for it
//     returned without an error (a live replica asked for it);
//   - an occurrence whose last attempt is still running or abandoned at
//     the end although a runner was told it had succeeded.
//
// These do not depend on how fast the machine is. LedgerLiveness counts
// what does.
func CheckLedger(h LedgerHistory) []string {
	var v []string
	// answered names a runner whose Run for the occurrence returned
	// without an error; done one that was told it succeeded.
	answered, done := map[string]string{}, map[string]string{}
	for _, r := range h.Reports {
		if r.Err == "" {
			answered[r.Occurrence] = r.Replica
			if r.State == "succeeded" {
				done[r.Occurrence] = r.Replica
			}
		}
	}
	byOcc := map[string][]LedgerAttempt{}
	for _, a := range h.Attempts {
		byOcc[a.Occurrence] = append(byOcc[a.Occurrence], a)
	}
	occs := make([]string, 0, len(byOcc))
	for o := range byOcc {
		occs = append(occs, o)
	}
	sort.Strings(occs)
	for _, o := range occs {
		as := byOcc[o]
		sort.Slice(as, func(i, j int) bool { return as[i].Attempt < as[j].Attempt })
		succeeded := 0
		for i, a := range as {
			if a.Attempt != i+1 {
				v = append(v, fmt.Sprintf("%s: attempt %d where %d was due", o, a.Attempt, i+1))
			}
			if i > 0 && a.Token <= as[i-1].Token {
				v = append(v, fmt.Sprintf("%s: attempt %d has token %d, not above attempt %d's %d",
					o, a.Attempt, a.Token, as[i-1].Attempt, as[i-1].Token))
			}
			if a.State == "succeeded" {
				succeeded++
			}
			if i < len(as)-1 && (a.State == "running" || a.State == "succeeded") {
				v = append(v, fmt.Sprintf("%s: attempt %d is %s, yet attempt %d followed", o, a.Attempt, a.State, as[i+1].Attempt))
			}
		}
		if succeeded > 1 {
			v = append(v, fmt.Sprintf("%s: %d attempts succeeded", o, succeeded))
		}
		if last := as[len(as)-1]; (last.State == "running" || last.State == "abandoned") && done[o] != "" {
			v = append(v, fmt.Sprintf("%s: its last attempt %d (%s, token %d) is %s, although %s was told it succeeded",
				o, last.Attempt, last.Owner, last.Token, last.State, done[o]))
		}
	}

	told := map[string][]LedgerReport{}
	for _, r := range h.Reports {
		if r.Ran && r.State == "succeeded" && r.Err == "" {
			told[r.Occurrence] = append(told[r.Occurrence], r)
		}
	}
	for o, who := range answered {
		if len(byOcc[o]) == 0 {
			v = append(v, fmt.Sprintf("%s: no attempt, although %s was answered", o, who))
		}
	}
	for o, rs := range told {
		if len(rs) > 1 {
			v = append(v, fmt.Sprintf("%s: %d runners were told they ran it successfully (%s, %s…)",
				o, len(rs), rs[0].Replica, rs[1].Replica))
		}
		for _, r := range rs {
			found := false
			for _, a := range byOcc[o] {
				found = found || (a.Attempt == r.Attempt && a.Token == r.Token && a.State == "succeeded")
			}
			if !found {
				v = append(v, fmt.Sprintf("%s: %s was told attempt %d (token %d) succeeded; the ledger disagrees",
					o, r.Replica, r.Attempt, r.Token))
			}
		}
	}

	for _, o := range h.Missed {
		if as := byOcc[o]; len(as) > 0 {
			v = append(v, fmt.Sprintf("%s: reported missed, but has %d attempts (the last %s)", o, len(as), as[len(as)-1].State))
		}
	}

	return v
}

// LedgerLiveness counts, in h's span, the occurrences without an attempt
// although a replica's process was up throughout the half period on
// either side of them, and those whose last attempt is still running or
// abandoned at the end (a dead runner's that nobody took over). On a
// machine fast enough for the scenario both are 0; on a slower one a
// replica may reach the database more than half a period after its timer
// fired (it then asks for the next occurrence), or a waiting replica may
// give up before the dead runner's lease ends.
func LedgerLiveness(h LedgerHistory) (missedWhileUp, notTakenOver int) {
	byOcc := map[string][]LedgerAttempt{}
	for _, a := range h.Attempts {
		byOcc[a.Occurrence] = append(byOcc[a.Occurrence], a)
	}
	for _, as := range byOcc {
		last := as[0]
		for _, a := range as {
			if a.Attempt > last.Attempt {
				last = a
			}
		}
		if last.State == "running" || last.State == "abandoned" {
			notTakenOver++
		}
	}
	if h.Period <= 0 {
		return missedWhileUp, notTakenOver
	}
	for t := h.From; !t.After(h.To); t = t.Add(h.Period) {
		if len(byOcc[t.UTC().Format(h.TimeFormat)]) > 0 {
			continue
		}
		from, to := t.Add(-h.Period/2), t.Add(h.Period/2)
		for _, u := range h.Up {
			if !u.From.After(from) && !u.To.Before(to) {
				missedWhileUp++
				break
			}
		}
	}
	return missedWhileUp, notTakenOver
}
