package rowlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/observe"
)

// RetryOptions bound RetryOnConflict. The zero value of each field selects
// its default.
type RetryOptions struct {
	// Attempts is how many times fn may run in all. Default: for
	// RetryOnConflict, no bound — it retries until ctx ends (every
	// conflict means another writer's update went through, so contention
	// drains: 200 buyers of one hot row all get their turn); for InTx, 10.
	Attempts int
	// MinBackoff is the cap of the first wait between attempts. Default
	// 1ms.
	MinBackoff time.Duration
	// MaxBackoff caps the doubling wait between attempts. Default 100ms.
	MaxBackoff time.Duration
	// Observer, if it implements observe.AttemptTracer, is told of every
	// attempt and retry. Default: none.
	Observer observe.Observer
}

const (
	defaultTxAttempts      = 10
	defaultRetryMinBackoff = time.Millisecond
	defaultRetryMaxBackoff = 100 * time.Millisecond
)

// withDefaults fills in the defaults; attempts is the default of Attempts
// (0: no bound).
func (o RetryOptions) withDefaults(attempts int) (RetryOptions, error) {
	if o.Attempts < 0 || o.MinBackoff < 0 || o.MaxBackoff < 0 {
		return o, fmt.Errorf("%w: retry attempts and backoffs must not be negative", sqllock.ErrInvalidOptions)
	}
	if o.Attempts == 0 {
		o.Attempts = attempts
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = defaultRetryMinBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = max(defaultRetryMaxBackoff, o.MinBackoff)
	}
	if o.MaxBackoff < o.MinBackoff {
		return o, fmt.Errorf("%w: MaxBackoff %v is below MinBackoff %v", sqllock.ErrInvalidOptions, o.MaxBackoff, o.MinBackoff)
	}
	if err := observe.Check(o.Observer); err != nil {
		return o, fmt.Errorf("%w: RetryOptions.Observer: %w", sqllock.ErrInvalidOptions, err)
	}
	return o, nil
}

// RetryOnConflict runs fn, the read and the version-checked write of an
// optimistic update, until it returns an error that does not wrap
// ErrConflict (nil included), which RetryOnConflict returns. Only conflicts
// are retried: any other error ends it at once.
//
// Between attempts it waits a random time up to a cap that starts at
// opts.MinBackoff and doubles up to opts.MaxBackoff ("full jitter"), so that
// writers that collided do not collide again in step. By default it retries
// until ctx ends, and then returns an error wrapping ctx.Err() and the last
// conflict: give ctx the deadline your caller can wait. With
// opts.Attempts set, it returns an error wrapping ErrConflict after that
// many conflicts.
//
// fn must do all its reads inside each call: a retry that reused the old
// version would conflict again.
func RetryOnConflict(ctx context.Context, opts RetryOptions, fn func(ctx context.Context) error) error {
	return retry(ctx, opts, observe.OpRetryOnConflict, 0, ErrConflict, fn)
}

// retry runs fn until it returns an error that does not wrap retryable,
// waiting a fully jittered, doubling backoff between attempts. op names the
// operation for events; attempts is the default of opts.Attempts (0: until
// ctx ends).
func retry(ctx context.Context, opts RetryOptions, op string, attempts int, retryable error, fn func(ctx context.Context) error) error {
	opts, err := opts.withDefaults(attempts)
	if err != nil {
		return err
	}
	ev := newAttempts(opts.Observer, op)
	backoff := opts.MinBackoff
	var timer *time.Timer
	for attempt := 1; ; attempt++ {
		actx := ev.start(ctx, attempt)
		err := fn(actx)
		again := errors.Is(err, retryable) && attempt != opts.Attempts
		ev.end(actx, attempt, err, again)
		if !errors.Is(err, retryable) {
			return err
		}
		if attempt == opts.Attempts {
			return fmt.Errorf("sqllock: gave up after %d attempts: %w", attempt, err)
		}
		wait := rand.N(backoff + 1)
		backoff = min(2*backoff, opts.MaxBackoff)
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		if ctx.Err() != nil { // also when the timer fired as ctx ended: no run after that
			return fmt.Errorf("sqllock: retry after %d attempts: %w", attempt, errors.Join(ctx.Err(), err))
		}
	}
}

// attempts reports the runs of InTx's or RetryOnConflict's function.
type attempts struct {
	tr observe.AttemptTracer // nil: none
	op string
}

func newAttempts(obs observe.Observer, op string) attempts {
	tr, _ := obs.(observe.AttemptTracer)
	return attempts{tr: tr, op: op}
}

func (a attempts) start(ctx context.Context, n int) context.Context {
	if a.tr == nil {
		return ctx
	}
	return a.tr.StartAttempt(ctx, observe.Attempt{Op: a.op, Attempt: n})
}

// end ends run n, which failed with err (or not); retried says another run
// follows.
func (a attempts) end(ctx context.Context, n int, err error, retried bool) {
	if a.tr == nil {
		return
	}
	e := observe.AttemptEnd{Attempt: observe.Attempt{Op: a.op, Attempt: n}, Err: err}
	if retried {
		e.Retry = retryReason(err)
	}
	a.tr.EndAttempt(ctx, e)
}

// retryReason names the cause of a retried run's error.
func retryReason(err error) string {
	if errors.Is(err, ErrConflict) {
		return observe.RetryConflict
	}
	var se interface{ SQLState() string }
	if errors.As(err, &se) {
		switch se.SQLState() {
		case "40P01":
			return observe.RetryDeadlock
		case "40001":
			return observe.RetrySerialization
		}
	}
	return observe.RetryTransient
}
