package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
)

// TestValueChaos has holders, each with a pool and a locker of its own
// (as processes of their own would), take turns holding a lock through a
// proxy that resets some of their connections, each setting value after
// unique value on its hold (Lock.SetValue), while a reader asks again and
// again who holds it and with what value (Table.Value), and an operator
// breaks the lease now and then (Table.Break). One holder is slow to let
// go: it renews seldom, so that it goes on writing for a while after its
// lease was broken and taken over, and those writes must be fenced. It
// runs for 10 s, and on until the history holds enough work (values under
// several tokens, breaks, reads that found values, writes the database
// refused), within a minute. The history must satisfy CheckValue.
func TestValueChaos(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, kind, nil)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			proxy, dsn := s.proxied(t)
			const ttl = 3 * time.Second
			newTable := func(addr string, renew time.Duration) *sqllock.Table {
				d, _ := s.process(t, addr)
				l, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{
					TTL: ttl, RenewInterval: renew, MaxBackoff: 50 * time.Millisecond}})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			var (
				mu     sync.Mutex
				holds  []ValueHold
				sets   []ValueSet
				reads  []ValueRead
				breaks []ValueBreak
				fenced int // writes the database refused, by holders that had not yet learnt their lease was lost
				wg     sync.WaitGroup
			)
			// short says what the history still lacks, "" once it holds
			// enough work to prove something; called with mu held.
			short := func() string {
				written := map[int64]bool{}
				for _, sv := range sets {
					if sv.Outcome == ValueOK {
						written[sv.Token] = true
					}
				}
				withValue := 0
				for _, r := range reads {
					if r.Value != "" {
						withValue++
					}
				}
				switch {
				case len(written) < 4:
					return fmt.Sprintf("values were written under %d tokens, want at least 4", len(written))
				case len(breaks) < 3:
					return fmt.Sprintf("%d leases broken, want at least 3", len(breaks))
				case withValue < 50:
					return fmt.Sprintf("%d reads returned a value, want at least 50", withValue)
				case fenced == 0:
					return "no SetValue was refused by the database for a lease lost"
				}
				return ""
			}
			run, stop := context.WithCancel(ctx)
			defer stop()
			for i := range 3 {
				slow := i == 0
				renew := ttl / 10
				if slow {
					renew = ttl / 3 // the longest RenewInterval allowed
				}
				l := newTable(dsn, renew)
				rng := rand.New(rand.NewPCG(uint64(i), 11))
				wg.Go(func() {
					for n := 0; run.Err() == nil; {
						h := ValueHold{GrantStart: time.Now()}
						k, err := l.Acquire(run, "job")
						if err != nil {
							continue // reset, or the run is over
						}
						h.GrantEnd, h.Token = time.Now(), k.Token()
						hold := time.Duration(300+rng.IntN(900)) * time.Millisecond
						if slow {
							hold = 2 * time.Second
						}
						until := time.Now().Add(hold)
						for time.Now().Before(until) && run.Err() == nil {
							if !slow && k.Context().Err() != nil {
								break // the others let go as soon as they learn their lease is lost
							}
							n++
							sv := ValueSet{Token: h.Token, Value: fmt.Sprintf("h%d-%d", i, n), Start: time.Now()}
							known := k.Context().Err() != nil
							err := k.SetValue(context.WithoutCancel(run), sv.Value)
							sv.End = time.Now()
							switch {
							case err == nil:
								sv.Outcome = ValueOK
							case errors.Is(err, sqllock.ErrLockLost) || errors.Is(err, sqllock.ErrNotHeld):
								sv.Outcome = ValueLost
							default:
								sv.Outcome = ValueErr
							}
							mu.Lock()
							sets = append(sets, sv)
							if sv.Outcome == ValueLost && !known {
								fenced++
							}
							mu.Unlock()
							select {
							case <-run.Done():
							case <-time.After(time.Duration(20+rng.IntN(40)) * time.Millisecond):
							}
						}
						h.ReleaseStart = time.Now()
						h.Lost = k.Context().Err() != nil
						rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
						switch err := k.Release(rctx); {
						case err == nil:
							h.ReleaseEnd = time.Now()
						case errors.Is(err, sqllock.ErrLockLost):
							h.Lost = true
						}
						rcancel()
						mu.Lock()
						holds = append(holds, h)
						mu.Unlock()
					}
				})
			}
			reader := newTable(s.dsn, 0)
			wg.Go(func() {
				for run.Err() == nil {
					r := ValueRead{Start: time.Now()}
					li, ok, err := reader.Value(run, "job")
					r.End = time.Now()
					if err != nil {
						if run.Err() == nil {
							t.Errorf("Value: %v", err)
						}
						return
					}
					if ok {
						r.Found, r.Token, r.Value = true, li.Token, li.Value
					}
					mu.Lock()
					reads = append(reads, r)
					mu.Unlock()
					select {
					case <-run.Done():
					case <-time.After(5 * time.Millisecond):
					}
				}
			})
			operator := newTable(s.dsn, 0)
			wg.Go(func() {
				for run.Err() == nil {
					select {
					case <-run.Done():
						return
					case <-time.After(900 * time.Millisecond):
					}
					b := ValueBreak{Start: time.Now()}
					li, ok, err := operator.Break(run, "job")
					b.End = time.Now()
					if err != nil {
						if run.Err() == nil {
							t.Errorf("Break: %v", err)
						}
						return
					}
					if ok {
						b.Token = li.Token
						mu.Lock()
						breaks = append(breaks, b)
						mu.Unlock()
					}
				}
			})
			// Faults for 10 s, and on until the history holds enough work
			// (within ctx's minute, on a slow machine).
			rng := rand.New(rand.NewPCG(5, 6))
			for began := time.Now(); run.Err() == nil; {
				mu.Lock()
				lacking := short()
				mu.Unlock()
				if lacking == "" && time.Since(began) >= 10*time.Second {
					break
				}
				proxy.ResetRandom(0.2, rng)
				select {
				case <-run.Done():
				case <-time.After(500 * time.Millisecond):
				}
			}
			stop()
			wg.Wait()
			for _, v := range CheckValue(holds, sets, reads, breaks) {
				t.Error(v)
			}
			written := map[int64]bool{}
			ok, lost, failed := 0, 0, 0
			for _, sv := range sets {
				switch sv.Outcome {
				case ValueOK:
					ok++
					written[sv.Token] = true
				case ValueLost:
					lost++
				default:
					failed++
				}
			}
			withValue, found := 0, 0
			for _, r := range reads {
				if r.Found {
					found++
				}
				if r.Value != "" {
					withValue++
				}
			}
			t.Logf("%d holds (%d with a value written), %d breaks; %d SetValue (%d ok, %d lost, %d failed; %d fenced by the database); %d reads (%d found a lease, %d with a value)",
				len(holds), len(written), len(breaks), len(sets), ok, lost, failed, fenced, len(reads), found, withValue)
			if lacking := short(); lacking != "" {
				t.Error(lacking)
			}
		})
	}
}
