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

// TestRevokeChaos has holders, each with a pool and a locker of its own
// (as processes of their own would), take turns holding a lock through a
// proxy that resets some of their connections, while an operator asks,
// again and again, whoever holds it to let go (Table.RequestRelease, each
// time with a reason of its own). Polite holders release soon after they
// are told; a stubborn one holds on for longer than a TTL. The history
// must satisfy CheckRevoke: no request reaches a later lease, and a
// holder that kept its lease is told.
func TestRevokeChaos(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, kind, nil)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			proxy, dsn := s.proxied(t)
			const ttl = 3 * time.Second
			newTable := func(addr string) *sqllock.Table {
				d, _ := s.process(t, addr)
				l, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl, MaxBackoff: 50 * time.Millisecond}})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			var (
				mu    sync.Mutex
				holds []RevokeHold
				asks  []RevokeAsk
				wg    sync.WaitGroup
			)
			run, stop := context.WithTimeout(ctx, 12*time.Second)
			defer stop()
			for i := range 3 {
				l := newTable(dsn)
				stubborn := i == 0
				rng := rand.New(rand.NewPCG(uint64(i), 7))
				wg.Go(func() {
					for run.Err() == nil {
						h := RevokeHold{GrantStart: time.Now()}
						k, err := l.Acquire(run, "job")
						if err != nil {
							continue // reset, or the run is over
						}
						h.GrantEnd, h.Token = time.Now(), k.Token()
						hold := time.Duration(500+rng.IntN(2000)) * time.Millisecond
						if stubborn {
							hold = ttl + time.Second
						}
						timer := time.NewTimer(hold)
						select {
						case <-k.Revoked():
							h.Told, h.Reason = time.Now(), k.RevokeReason()
							if stubborn {
								<-timer.C
							}
						case <-timer.C:
						case <-k.Context().Done():
						}
						timer.Stop()
						if h.Told.IsZero() {
							select {
							case <-k.Revoked():
								h.Told, h.Reason = time.Now(), k.RevokeReason()
							default:
							}
						}
						h.ReleaseStart = time.Now()
						h.Lost = k.Context().Err() != nil
						rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
						if err := k.Release(rctx); errors.Is(err, sqllock.ErrLockLost) {
							h.Lost = true
						}
						rcancel()
						mu.Lock()
						holds = append(holds, h)
						mu.Unlock()
					}
				})
			}
			operator := newTable(s.dsn)
			wg.Go(func() {
				for n := 0; run.Err() == nil; n++ {
					a := RevokeAsk{Reason: fmt.Sprintf("ask-%d", n), Start: time.Now()}
					asked, err := operator.RequestRelease(run, "job", a.Reason)
					a.End, a.Asked = time.Now(), asked
					if err != nil {
						if run.Err() != nil {
							return
						}
						a.Err = err.Error()
					}
					mu.Lock()
					asks = append(asks, a)
					mu.Unlock()
					select {
					case <-run.Done():
					case <-time.After(400 * time.Millisecond):
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
			wg.Wait()
			for _, v := range CheckRevoke(ttl, holds, asks) {
				t.Error(v)
			}
			told, lost, asked := 0, 0, 0
			for _, h := range holds {
				if !h.Told.IsZero() {
					told++
				}
				if h.Lost {
					lost++
				}
			}
			for _, a := range asks {
				if a.Asked {
					asked++
				}
			}
			for _, h := range holds {
				t.Logf("token %d: grant %v..%v told %v release %v", h.Token, h.GrantStart.Format(time.StampMilli), h.GrantEnd.Format(time.StampMilli), h.Told.Format(time.StampMilli), h.ReleaseStart.Format(time.StampMilli))
			}
			t.Logf("%d holds (%d told, %d lost), %d asks (%d asked a holder)", len(holds), told, lost, len(asks), asked)
			if told == 0 {
				t.Error("no holder was told of any request")
			}
		})
	}
}
