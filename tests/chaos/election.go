package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// electionTurn is one turn of an election worker: campaign to lead one of
// the names (Campaign with the worker's ID as the value, waiting at most
// Wait), hold, check that the leadership is still trusted, do a guarded
// write with the term as the fencing token, and resign. It records the
// events of a lock's turn: a won election is an acquire-ok whose token is
// the term, a resignation a release.
func (w *Worker) electionTurn(ctx context.Context) {
	name := w.Names[w.Rand.IntN(len(w.Names))]
	op := w.Rec.NextOp(w.ID)
	w.Rec.Add(w.event(op, AcquireInvoke, name, 0, nil))
	actx, cancel := context.WithTimeout(withTurn(ctx, w.Rec, w.ID, op), w.Wait)
	lead, err := w.Election.Campaign(actx, name, w.ID)
	cancel()
	if err != nil {
		w.Rec.Add(w.event(op, AcquireFail, name, 0, err))
		w.sleep(ctx, 20*time.Millisecond)
		return
	}
	term := lead.Term()
	w.Rec.Add(w.grant(op, name, term))

	w.sleep(ctx, w.Hold)
	at := time.Now().UnixNano()
	if lead.Context().Err() != nil {
		w.Rec.Add(w.event(op, Lost, name, term, context.Cause(lead.Context())))
	} else {
		e := w.event(op, Trusted, name, term, nil)
		e.At = at
		w.Rec.Add(e)
	}
	w.writeGuarded(lead.Lock())
	w.release(lead.Lock())
}

// CheckElection checks the history of an election run, in which a won
// election is recorded as an acquire-ok whose token is the term, the
// leader's checks of its leadership as trusted and lost, and a
// resignation as a release. It returns every violation of:
//
//   - one leader per term: no term is won by two workers ("two leaders");
//   - terms strictly increase: a campaign that began after a term was won
//     wins a larger one ("term order");
//   - no two leaders at once: no leader trusts its leadership at or after
//     the moment a later term was won ("two leaders trusted");
//   - a leadership that ended stays ended: a worker never trusts a term
//     after it learnt it lost it or resigned it ("trusted after its end");
//
// and, as Check does, of the guarded writes made with the terms as fencing
// tokens and of the data they left.
func CheckElection(events []Event, data Data) []Violation {
	vs := Check(events, data)
	for i := range vs {
		switch vs[i].Kind {
		case "double holder":
			vs[i].Kind = "two leaders"
			if strings.Contains(vs[i].Msg, " trusted token ") {
				vs[i].Kind = "two leaders trusted"
			}
		case "token order":
			vs[i].Kind = "term order"
		}
	}
	return append(vs, checkEnded(events)...)
}

// checkEnded finds a worker trusting a term after it recorded its loss or
// its release.
func checkEnded(events []Event) []Violation {
	type lease struct {
		worker, name string
		token        int64
	}
	ended := map[lease]Event{}
	var vs []Violation
	for _, e := range events {
		k := lease{e.Worker, e.Name, e.Token}
		switch e.Kind {
		case Lost, ReleaseOK:
			if _, ok := ended[k]; !ok {
				ended[k] = e
			}
		case Trusted:
			if end, ok := ended[k]; ok && end.At <= e.At {
				vs = append(vs, Violation{Kind: "trusted after its end",
					Msg:    fmt.Sprintf("%s trusted term %d of %q after it had ended (%s)", e.Worker, e.Token, e.Name, end.Kind),
					Events: []Event{end, e}})
			}
		}
	}
	return vs
}
