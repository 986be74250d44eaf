package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
)

// TestSemaphoreSetLimitChaos has workers, each with a pool and a Semaphore
// of its own (as processes of their own would), take and give back permits
// of one name through a proxy that resets some of their connections, while
// an operator, through the proxy too, resizes the name (Semaphore.SetLimit)
// between 1 and 4 every few hundred milliseconds. The history must satisfy
// CheckSemaphore with its limit changes: every grant fits a limit that
// could have been in force when it was made.
func TestSemaphoreSetLimitChaos(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, kind, nil)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			proxy, dsn := s.proxied(t)
			const (
				name    = "pool"
				initial = 2
				ttl     = 3 * time.Second
			)
			newSem := func() *sqllock.Semaphore {
				d, _ := s.process(t, dsn)
				sem, err := sqllock.NewSemaphore(d, initial, sqllock.SemaphoreOptions{LeaseOptions: sqllock.LeaseOptions{
					TTL: ttl, MaxBackoff: 50 * time.Millisecond, Observer: HistoryTracer{TTL: ttl}}})
				if err != nil {
					t.Fatal(err)
				}
				return sem
			}
			rec := NewRecorder(nil)
			run, stop := context.WithTimeout(ctx, 8*time.Second)
			defer stop()
			var workers, operator sync.WaitGroup
			var ws []*limitWorker
			for i := range 5 {
				w := &limitWorker{id: "w" + string(rune('1'+i)), sem: newSem(), rec: rec, ttl: ttl,
					rng: rand.New(rand.NewPCG(uint64(i), 11))}
				ws = append(ws, w)
				workers.Go(func() { w.run(run, name) })
			}
			op := newSem()
			operator.Go(func() {
				rng := rand.New(rand.NewPCG(5, 6))
				for n := initial; run.Err() == nil; {
					setLimit(run, rec, op, name, n)
					if next := 1 + rng.IntN(3); next >= n {
						n = next + 1 // another limit of 1 to 4
					} else {
						n = next
					}
					select {
					case <-run.Done():
					case <-time.After(time.Duration(150+rng.IntN(250)) * time.Millisecond):
					}
				}
			})
			rng := rand.New(rand.NewPCG(3, 4))
			for run.Err() == nil {
				proxy.ResetRandom(0.2, rng)
				select {
				case <-run.Done():
				case <-time.After(500 * time.Millisecond):
				}
			}
			operator.Wait()
			workers.Wait()

			events := rec.Events()
			for _, v := range CheckSemaphore(events, initial) {
				t.Error(v)
			}
			grants, refused := rec.Count(AcquireOK), 0
			for _, w := range ws {
				refused += w.refused
			}
			failed := rec.Count(AcquireFail) - refused
			lowers, raises, limitFails := limitStats(events, initial)
			peak := peakHolders(events)
			t.Logf("%d grants, %d refused (full), %d acquires failed otherwise; %d lowers and %d raises took effect, %d SetLimits failed; at most %d certainly held at once",
				grants, refused, failed, lowers, raises, limitFails, peak)
			switch {
			case grants < 20:
				t.Errorf("only %d grants: too little work for the check to prove anything", grants)
			case lowers < 3 || raises < 3:
				t.Errorf("only %d lowers and %d raises took effect", lowers, raises)
			case refused == 0:
				t.Error("no acquire was refused: the limits never bound")
			case peak < 3:
				t.Errorf("at most %d held at once: no raise was used", peak)
			}
		})
	}
}

// limitWorker takes turns on a semaphore name: ask (mostly TryAcquire,
// which does not wait, so that the grant's moment is known closely; every
// third turn Acquire, which a raise wakes), hold a little while checking
// the permit is still trusted, release. It records every step.
type limitWorker struct {
	id  string
	sem *sqllock.Semaphore
	rec *Recorder
	ttl time.Duration
	rng *rand.Rand
	// refused counts the acquires refused because the name was full.
	refused int
}

func (w *limitWorker) run(ctx context.Context, name string) {
	for turn := 1; ctx.Err() == nil; turn++ {
		op := w.rec.NextOp(w.id)
		inv := Event{Worker: w.id, Op: op, Kind: AcquireInvoke, Name: name, Try: turn%3 != 0}
		w.rec.Add(inv)
		actx, cancel := context.WithTimeout(withTurn(ctx, w.rec, w.id, op), time.Second)
		var lock *sqllock.Lock
		var err error
		if inv.Try {
			lock, err = w.sem.TryAcquire(actx, name)
		} else {
			lock, err = w.sem.Acquire(actx, name)
		}
		cancel()
		if err != nil {
			if errors.Is(err, sqllock.ErrLocked) || (!inv.Try && errors.Is(err, context.DeadlineExceeded)) {
				w.refused++
			}
			w.rec.Add(Event{Worker: w.id, Op: op, Kind: AcquireFail, Name: name, Err: err.Error()})
			w.pause(ctx, 30*time.Millisecond)
			continue
		}
		tok := lock.Token()
		at := time.Now().UnixNano()
		w.rec.Add(Event{Worker: w.id, Op: op, Kind: AcquireOK, Name: name, Token: tok, At: at, TrustUntil: trustUntil(at, w.ttl)})
		for range 1 + w.rng.IntN(3) {
			w.pause(ctx, 100*time.Millisecond)
			at := time.Now().UnixNano()
			if err := lock.Context().Err(); err != nil {
				w.rec.Add(Event{Worker: w.id, Op: op, Kind: Lost, Name: name, Token: tok, Err: context.Cause(lock.Context()).Error()})
				break
			}
			w.rec.Add(Event{Worker: w.id, Op: op, Kind: Trusted, Name: name, Token: tok, At: at})
		}
		rop := w.rec.NextOp(w.id)
		w.rec.Add(Event{Worker: w.id, Op: rop, Kind: ReleaseInvoke, Name: name, Token: tok})
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := lock.Release(rctx); err != nil {
			w.rec.Add(Event{Worker: w.id, Op: rop, Kind: ReleaseFail, Name: name, Token: tok, Err: err.Error()})
		} else {
			w.rec.Add(Event{Worker: w.id, Op: rop, Kind: ReleaseOK, Name: name, Token: tok})
		}
		rcancel()
	}
}

// pause waits up to max, less if ctx ends first: it paces the turns.
func (w *limitWorker) pause(ctx context.Context, max time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(w.rng.Int64N(int64(max)))):
	}
}

// setLimit records an operator's SetLimit of name to n.
func setLimit(ctx context.Context, rec *Recorder, sem *sqllock.Semaphore, name string, n int) {
	op := rec.NextOp("op")
	rec.Add(Event{Worker: "op", Op: op, Kind: LimitInvoke, Name: name, Value: int64(n)})
	if err := sem.SetLimit(ctx, name, n); err != nil {
		rec.Add(Event{Worker: "op", Op: op, Kind: LimitFail, Name: name, Err: err.Error()})
		return
	}
	rec.Add(Event{Worker: "op", Op: op, Kind: LimitOK, Name: name})
}

// limitStats counts the SetLimits of a history that certainly lowered and
// raised the limit in force (initial before the first), and those that
// failed.
func limitStats(events []Event, initial int) (lowers, raises, fails int) {
	asked := map[opKey]int64{}
	prev := int64(initial) // 0 once a failed SetLimit leaves it unknown
	for _, e := range events {
		switch e.Kind {
		case LimitInvoke:
			asked[opKey{e.Worker, e.Op}] = e.Value
		case LimitFail:
			fails++
			prev = 0
		case LimitOK:
			n := asked[opKey{e.Worker, e.Op}]
			switch {
			case prev == 0:
			case n < prev:
				lowers++
			case n > prev:
				raises++
			}
			prev = n
		}
	}
	return lowers, raises, fails
}

// peakHolders returns the largest number of acquisitions of one name
// certainly held at once (see CheckSemaphore).
func peakHolders(events []Event) int {
	invokes := map[opKey]Event{}
	byName, _ := acquisitions(events, invokes, "permit")
	peak := 0
	for _, m := range byName {
		for _, a := range m {
			n := 0
			for _, b := range m {
				if b.ok.At <= a.ok.At && a.ok.At <= b.lastTrst {
					n++
				}
			}
			peak = max(peak, n)
		}
	}
	return peak
}
