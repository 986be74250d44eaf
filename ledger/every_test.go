package ledger_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/ledger"
)

// dbNow reads the database's time.
func dbNow(t *testing.T, e *env) time.Time {
	t.Helper()
	now, err := testutil.Tables(t, e.d).Runs.Now(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return now
}

func TestEveryAgreesAcrossSkewedCallers(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		// An hourly job whose occurrence is the database's present
		// moment: callers whose timers fire anywhere within half an hour
		// of it (here: within the test's seconds) derive the same key.
		const period = time.Hour
		now := dbNow(t, e)
		phase := time.Duration(now.UnixMicro()%period.Microseconds()) * time.Microsecond
		occ := ledger.Every(period).Phase(phase)
		const callers = 5
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			keys = map[string]int{}
			ran  int
		)
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := e.ledger(t, ledger.Options{Wait: true}).Run(ctx, "hourly", occ,
					func(context.Context, *ledger.Run) error { return nil })
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				keys[res.Occurrence]++
				if res.Ran {
					ran++
				}
			}()
		}
		wg.Wait()
		want := now.Format(ledger.TimeFormat)
		if len(keys) != 1 || keys[want] != callers || ran != 1 {
			t.Fatalf("keys %v (want %s for all), %d ran", keys, want, ran)
		}
	})
}

func TestMissed(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		const period = 5 * time.Millisecond
		res, err := l.Run(ctx, "tick", ledger.Every(period), func(context.Context, *ledger.Run) error { return nil })
		if err != nil || !res.Ran {
			t.Fatalf("%+v, %v", res, err)
		}
		// A job of the caller's own keys has no period: never missed.
		if _, err := l.Run(ctx, "adhoc", ledger.Key("k"), func(context.Context, *ledger.Run) error { return nil }); err != nil {
			t.Fatal(err)
		}
		first, err := time.Parse(ledger.TimeFormat, res.Occurrence)
		if err != nil {
			t.Fatal(err)
		}
		// Once the database's clock is a few periods (plus the default
		// grace of one) past the job's first claim, the occurrences after
		// it count as missed, one period apart, and the claimed one does
		// not. (The history starts at the claim's time, which on a slow
		// machine may be some of these short periods after the
		// occurrence.)
		var missed []ledger.MissedRun
		testutil.Eventually(ctx, t, "three missed ticks", func() bool {
			missed, err = l.Missed(ctx, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			return len(missed) >= 3
		})
		for i, m := range missed {
			if m.Job != "tick" || m.Period != period || !m.At.After(first) || !m.At.Equal(missed[0].At.Add(time.Duration(i)*period)) ||
				m.Occurrence != m.At.Format(ledger.TimeFormat) {
				t.Fatalf("missed[%d] = %+v after the claimed %v", i, m, first)
			}
		}
		// A grace longer than the time since leaves nothing missed.
		if missed, err := l.Missed(ctx, "tick", time.Hour); err != nil || len(missed) != 0 {
			t.Fatalf("with an hour's grace: %+v, %v", missed, err)
		}
		// A new period starts the job's history again.
		if _, err := l.Run(ctx, "tick", ledger.Every(time.Hour), func(context.Context, *ledger.Run) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if missed, err := l.Missed(ctx, "tick", 0); err != nil || len(missed) != 0 {
			t.Fatalf("after the period changed: %+v, %v", missed, err)
		}
	})
}

func TestReap(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		for _, k := range []string{"a", "b", "c"} {
			if _, err := l.Run(ctx, "job", ledger.Key(k), func(context.Context, *ledger.Run) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := l.Reap(ctx, time.Hour); err != nil || n != 0 {
			t.Fatalf("reaped %d younger than an hour: %v", n, err)
		}
		var reaped int
		testutil.Eventually(ctx, t, "three attempts reaped", func() bool {
			n, err := l.Reap(ctx, time.Microsecond)
			if err != nil {
				t.Fatal(err)
			}
			reaped += n
			return reaped == 3
		})
		if runs, err := l.Runs(ctx, "", 10); err != nil || len(runs) != 0 {
			t.Fatalf("after the reap: %+v, %v", runs, err)
		}
	})
}

func TestBadInput(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		ok := func(context.Context, *ledger.Run) error { return nil }
		for _, c := range []struct {
			job  string
			occ  ledger.Occurrence
			fn   func(context.Context, *ledger.Run) error
			want error
		}{
			{"", ledger.Key("k"), ok, sqllock.ErrInvalidName},
			{"a\x00b", ledger.Key("k"), ok, sqllock.ErrInvalidName},
			{strings.Repeat("j", 256), ledger.Key("k"), ok, sqllock.ErrInvalidName},
			{"\xff", ledger.Key("k"), ok, sqllock.ErrInvalidName},
			{"j", ledger.Key(""), ok, sqllock.ErrInvalidName},
			{"j", ledger.Occurrence{}, ok, sqllock.ErrInvalidName},
			{"j", ledger.Key(strings.Repeat("k", 256)), ok, sqllock.ErrInvalidName},
			{"j", ledger.Every(0), ok, sqllock.ErrInvalidOptions},
			{"j", ledger.Every(-time.Second), ok, sqllock.ErrInvalidOptions},
			{"j", ledger.Every(time.Nanosecond), ok, sqllock.ErrInvalidOptions},
			{"j", ledger.Every(time.Second).Phase(time.Second), ok, sqllock.ErrInvalidOptions},
			{"j", ledger.Every(time.Second).Phase(-1), ok, sqllock.ErrInvalidOptions},
			{"j", ledger.Every(time.Second).Grace(-1), ok, sqllock.ErrInvalidOptions},
			{"j", ledger.Key("k").Phase(time.Second), ok, sqllock.ErrInvalidOptions},
			{"j", ledger.Key("k"), nil, sqllock.ErrInvalidOptions},
		} {
			if _, err := l.Run(ctx, c.job, c.occ, c.fn); !errors.Is(err, c.want) {
				t.Errorf("Run(%q, %v): %v, not %v", c.job, c.occ, err, c.want)
			}
		}
		if _, err := l.Runs(ctx, "", 0); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Errorf("Runs with limit 0: %v", err)
		}
		if _, err := l.Runs(ctx, "\x00", 1); !errors.Is(err, sqllock.ErrInvalidName) {
			t.Errorf("Runs of an invalid job: %v", err)
		}
		if _, err := l.Missed(ctx, "", -time.Second); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Errorf("Missed with a negative grace: %v", err)
		}
		if _, err := l.Reap(ctx, 0); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Errorf("Reap of age 0: %v", err)
		}
		for _, o := range []ledger.Options{
			{Retries: -1}, {RetryBackoff: -time.Second}, {Owner: strings.Repeat("o", 240)}, {TTL: time.Millisecond},
		} {
			if _, err := ledger.New(e.d, o); !errors.Is(err, sqllock.ErrInvalidOptions) {
				t.Errorf("New(%+v): %v", o, err)
			}
		}
		if _, err := ledger.New(nil, ledger.Options{}); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Errorf("New(nil): %v", err)
		}
	})
}

// observer counts the ledger's events.
type observer struct {
	mu                                  sync.Mutex
	claimed, skipped, abandoned, finish []ledger.Event
}

func (o *observer) RunClaimed(_ context.Context, e ledger.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.claimed = append(o.claimed, e)
}

func (o *observer) RunSkipped(_ context.Context, e ledger.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.skipped = append(o.skipped, e)
}

func (o *observer) RunAbandoned(_ context.Context, e, by ledger.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.abandoned = append(o.abandoned, e, by)
}

func (o *observer) RunFinished(_ context.Context, e ledger.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finish = append(o.finish, e)
}

func TestObserver(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		ghost := crashed(t, e, "obs", "k")
		o := &observer{}
		l := e.ledger(t, ledger.Options{Wait: true, Owner: "me", Observer: o})
		if _, err := l.Run(ctx, "obs", ledger.Key("k"), func(context.Context, *ledger.Run) error { return errBoom }); !errors.Is(err, errBoom) {
			t.Fatal(err)
		}
		if _, err := l.Run(ctx, "obs", ledger.Key("k"), func(context.Context, *ledger.Run) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if len(o.claimed) != 1 || o.claimed[0].Attempt != 2 || !strings.HasPrefix(o.claimed[0].Owner, "me/") {
			t.Errorf("claimed: %+v", o.claimed)
		}
		if len(o.abandoned) != 2 || o.abandoned[0].Token != ghost || o.abandoned[0].Owner != "ghost" || o.abandoned[1].Attempt != 2 {
			t.Errorf("abandoned: %+v", o.abandoned)
		}
		if len(o.finish) != 1 || o.finish[0].State != ledger.StateFailed || !errors.Is(o.finish[0].Err, errBoom) {
			t.Errorf("finished: %+v", o.finish)
		}
		if len(o.skipped) != 1 || o.skipped[0].State != ledger.StateFailed || o.skipped[0].Attempt != 2 {
			t.Errorf("skipped: %+v", o.skipped)
		}
	})
}
