package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/observe"
)

// recorder keeps the events of interest here: losses, renewals and the
// listening connection's.
type recorder struct {
	mu        sync.Mutex
	listening []observe.ListenerEvent
	renewed   []observe.RenewedEvent
	lost      []observe.LostEvent
}

func (r *recorder) Lost(_ context.Context, e observe.LostEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = append(r.lost, e)
}

func (r *recorder) Renewed(_ context.Context, e observe.RenewedEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renewed = append(r.renewed, e)
}

func (r *recorder) Listening(_ context.Context, e observe.ListenerEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listening = append(r.listening, e)
}

var (
	_ observe.LostObserver     = (*recorder)(nil)
	_ observe.RenewedObserver  = (*recorder)(nil)
	_ observe.ListenerObserver = (*recorder)(nil)
)

// The listening connection's state is reported on changes only: up when a
// subscription finds it up or it becomes ready, down when it is lost (with
// the error) or the room stops listening (without), and a reconnect when it
// comes back after a loss.
func TestListenerEvents(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	r := newTestRoom(&alwaysListening{})
	r.ev = NewEvents(observe.StrategyTable, nil, nil, rec)
	cut := errors.New("cut")

	w := r.join(line{name: "x"}, r.releaseCount(), false) // subscribes: up at once
	r.Ready()                                             // no change
	r.Lost(cut)
	r.Lost(cut) // no change
	r.Ready()
	r.leave(line{name: "x"}, w) // unsubscribes

	want := []observe.ListenerEvent{
		{Strategy: observe.StrategyTable, Up: true},
		{Strategy: observe.StrategyTable, Up: false, Err: cut},
		{Strategy: observe.StrategyTable, Up: true, Reconnect: true},
		{Strategy: observe.StrategyTable, Up: false},
	}
	if got := fmt.Sprint(rec.listening); got != fmt.Sprint(want) {
		t.Fatalf("listener events:\n got %v\nwant %v", got, want)
	}
}

// failStore fails every renewal.
type failStore struct{ okStore }

func (failStore) RenewMany(context.Context, []dialect.Lease, time.Duration) ([]sqlrun.Renewal, error) {
	return nil, errors.New("unreachable")
}

// refuseStore refuses every renewal: the lease is gone.
type refuseStore struct{ okStore }

func (refuseStore) RenewMany(_ context.Context, ls []dialect.Lease, _ time.Duration) ([]sqlrun.Renewal, error) {
	return make([]sqlrun.Renewal, len(ls)), nil
}

// Renewals that fail until the trust window closes are reported as failed,
// and the loss as renew_failed; a refused renewal as refused, and the loss
// as expired; a good one with the margin left in the trust window. The
// stores answer in memory and the timers run on synctest's clock: a
// loaded machine cannot make a renewal late.
func TestRenewalEvents(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		store   sqlrun.LeaseTable
		outcome observe.RenewOutcome
		cause   observe.LostCause
	}{
		{failStore{}, observe.RenewFailed, observe.LostRenewFailed},
		{refuseStore{}, observe.RenewRefused, observe.LostExpired},
	} {
		t.Run(string(c.cause), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				opts, err := withErrors(Config{TTL: 300 * time.Millisecond}).WithDefaults()
				if err != nil {
					t.Fatal(err)
				}
				rec := &recorder{}
				ls := NewLeases(c.store, opts)
				ls.ev = NewEvents(observe.StrategyTable, nil, nil, rec)
				ls.batch.ev = ls.ev
				lock := ls.Grant(t.Context(), "n", "o", 7, time.Now()).Lease
				<-lock.Context().Done()
				// The loss is reported just after the lock's context ends.
				synctest.Wait()
				rec.mu.Lock()
				defer rec.mu.Unlock()
				if len(rec.lost) != 1 || rec.lost[0].Cause != c.cause || rec.lost[0].Token != 7 || rec.lost[0].Held <= 0 {
					t.Fatalf("lost events: %+v, want one, cause %s", rec.lost, c.cause)
				}
				if len(rec.renewed) == 0 {
					t.Fatal("no renewal events")
				}
				for _, e := range rec.renewed {
					if e.Outcome != c.outcome || e.Margin != 0 || (e.Err != nil) != (c.outcome == observe.RenewFailed) {
						t.Errorf("renewal event %+v, want outcome %s", e, c.outcome)
					}
				}
			})
		})
	}
	t.Run("renewed", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			opts, err := withErrors(Config{TTL: 300 * time.Millisecond}).WithDefaults()
			if err != nil {
				t.Fatal(err)
			}
			rec := &recorder{}
			ls := NewLeases(okStore{}, opts)
			ls.ev = NewEvents(observe.StrategyTable, nil, nil, rec)
			ls.batch.ev = ls.ev
			lock := ls.Grant(t.Context(), "n", "o", 7, time.Now()).Lease
			// Several renewal periods: each renews, none loses the lease.
			time.Sleep(3 * opts.TTL)
			synctest.Wait()
			if err := lock.Context().Err(); err != nil {
				t.Fatalf("lost a lease that renews: %v", context.Cause(lock.Context()))
			}
			if err := lock.ReleaseHold(t.Context()); err != nil {
				t.Fatal(err)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.renewed) < 3 {
				t.Fatalf("%d renewal events in 3 TTLs, want at least 3", len(rec.renewed))
			}
			trust := opts.TTL - trustMargin(opts.TTL)
			for _, e := range rec.renewed {
				if e.Outcome != observe.RenewOK || e.Margin <= 0 || e.Margin > trust {
					t.Errorf("renewal event %+v, want renewed with a margin in (0, %v]", e, trust)
				}
			}
		})
	})
}
