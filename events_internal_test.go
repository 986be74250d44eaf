package sqllock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// recorder is a Tracer that keeps the events of interest here.
type recorder struct {
	mu        sync.Mutex
	listening []ListenerEvent
	renewed   []RenewedEvent
	lost      []LostEvent
}

func (r *recorder) Acquired(context.Context, AcquiredEvent) {}
func (r *recorder) Released(context.Context, ReleasedEvent) {}
func (r *recorder) Lost(_ context.Context, e LostEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = append(r.lost, e)
}
func (r *recorder) StartAcquire(ctx context.Context, _ AcquireStart) context.Context { return ctx }
func (r *recorder) EndAcquire(context.Context, AcquireEnd)                           {}
func (r *recorder) Handoff(context.Context, HandoffEvent)                            {}
func (r *recorder) Waiting(context.Context, WaitingEvent)                            {}
func (r *recorder) StartRelease(ctx context.Context, _ LockEvent) context.Context    { return ctx }
func (r *recorder) EndRelease(context.Context, LockEvent, error)                     {}
func (r *recorder) StartGuard(ctx context.Context, _ LockEvent) context.Context      { return ctx }
func (r *recorder) EndGuard(context.Context, LockEvent, error)                       {}
func (r *recorder) Renewed(_ context.Context, e RenewedEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renewed = append(r.renewed, e)
}
func (r *recorder) StartRenewBatch(ctx context.Context, _ RenewBatch) context.Context { return ctx }
func (r *recorder) EndRenewBatch(context.Context, RenewBatch, error)                  {}
func (r *recorder) Listening(_ context.Context, e ListenerEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listening = append(r.listening, e)
}
func (r *recorder) Reaped(context.Context, ReapEvent)                           {}
func (r *recorder) StartAttempt(ctx context.Context, _ Attempt) context.Context { return ctx }
func (r *recorder) EndAttempt(context.Context, AttemptEnd)                      {}

var _ Tracer = (*recorder)(nil)

// The listening connection's state is reported on changes only: up when a
// subscription finds it up or it becomes ready, down when it is lost (with
// the error) or the room stops listening (without), and a reconnect when it
// comes back after a loss.
func TestListenerEvents(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	r := newTestRoom(&alwaysListening{})
	r.ev = newEvents(StrategyTable, nil, nil, rec)
	cut := errors.New("cut")

	w := r.join(line{name: "x"}, r.releaseCount()) // subscribes: up at once
	r.Ready()                                      // no change
	r.Lost(cut)
	r.Lost(cut) // no change
	r.Ready()
	r.leave(line{name: "x"}, w) // unsubscribes

	want := []ListenerEvent{
		{Strategy: StrategyTable, Up: true},
		{Strategy: StrategyTable, Up: false, Err: cut},
		{Strategy: StrategyTable, Up: true, Reconnect: true},
		{Strategy: StrategyTable, Up: false},
	}
	if got := fmt.Sprint(rec.listening); got != fmt.Sprint(want) {
		t.Fatalf("listener events:\n got %v\nwant %v", got, want)
	}
}

// failStore fails every renewal.
type failStore struct{ okStore }

func (failStore) RenewMany(context.Context, []dialect.Lease, time.Duration) ([]bool, error) {
	return nil, errors.New("unreachable")
}

// refuseStore refuses every renewal: the lease is gone.
type refuseStore struct{ okStore }

func (refuseStore) RenewMany(_ context.Context, ls []dialect.Lease, _ time.Duration) ([]bool, error) {
	return make([]bool, len(ls)), nil
}

// Renewals that fail until the trust window closes are reported as failed,
// and the loss as renew_failed; a refused renewal as refused, and the loss
// as expired; a good one with the margin left in the trust window. The
// stores answer in memory and the timers run on synctest's clock: a
// loaded machine cannot make a renewal late.
func TestRenewalEvents(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		store   dialect.LeaseTable
		outcome RenewOutcome
		cause   LostCause
	}{
		{failStore{}, RenewFailed, LostRenewFailed},
		{refuseStore{}, RenewRefused, LostExpired},
	} {
		t.Run(string(c.cause), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				opts, err := config{TTL: 300 * time.Millisecond}.withDefaults()
				if err != nil {
					t.Fatal(err)
				}
				rec := &recorder{}
				ls := newLeases(c.store, opts)
				ls.ev = newEvents(StrategyTable, nil, nil, rec)
				ls.batch.ev = ls.ev
				lock := ls.grant(t.Context(), "n", "o", 7, time.Now())
				<-lock.Done()
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
					if e.Outcome != c.outcome || e.Margin != 0 || (e.Err != nil) != (c.outcome == RenewFailed) {
						t.Errorf("renewal event %+v, want outcome %s", e, c.outcome)
					}
				}
			})
		})
	}
	t.Run("renewed", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			opts, err := config{TTL: 300 * time.Millisecond}.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			rec := &recorder{}
			ls := newLeases(okStore{}, opts)
			ls.ev = newEvents(StrategyTable, nil, nil, rec)
			ls.batch.ev = ls.ev
			lock := ls.grant(t.Context(), "n", "o", 7, time.Now())
			// Several renewal periods: each renews, none loses the lease.
			time.Sleep(3 * opts.TTL)
			synctest.Wait()
			if err := lock.Context().Err(); err != nil {
				t.Fatalf("lost a lease that renews: %v", context.Cause(lock.Context()))
			}
			if err := lock.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.renewed) < 3 {
				t.Fatalf("%d renewal events in 3 TTLs, want at least 3", len(rec.renewed))
			}
			trust := opts.TTL - trustMargin(opts.TTL)
			for _, e := range rec.renewed {
				if e.Outcome != RenewOK || e.Margin <= 0 || e.Margin > trust {
					t.Errorf("renewal event %+v, want renewed with a margin in (0, %v]", e, trust)
				}
			}
		})
	})
}

type sqlStateError string

func (e sqlStateError) Error() string    { return "sqlstate " + string(e) }
func (e sqlStateError) SQLState() string { return string(e) }

func TestRetryReason(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]string{
		fmt.Errorf("x: %w", ErrConflict):                                  RetryConflict,
		fmt.Errorf("%w: %w", ErrTransient, sqlStateError("40P01")):        RetryDeadlock,
		fmt.Errorf("%w: %w", ErrTransient, sqlStateError("40001")):        RetrySerialization,
		fmt.Errorf("%w: %w", ErrTransient, errors.New("Error 1213: ...")): RetryTransient,
	} {
		if got := retryReason(err); got != want {
			t.Errorf("retryReason(%v) = %q, want %q", err, got, want)
		}
	}
}
