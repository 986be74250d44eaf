package ledger

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// State is the state of an attempt.
type State string

// The states of an attempt.
const (
	// StateRunning: claimed, its outcome not recorded yet. An attempt
	// whose runner died stays running until the next claimer of its
	// occurrence marks it abandoned.
	StateRunning State = "running"
	// StateSucceeded: its function returned nil, and the outcome was
	// recorded while its lease was held.
	StateSucceeded State = "succeeded"
	// StateFailed: its function returned an error (recorded as Err).
	StateFailed State = "failed"
	// StateAbandoned: its lease ended before it recorded an outcome (its
	// runner died, stopped or lost the database), and another runner took
	// the occurrence over.
	StateAbandoned State = "abandoned"
	// StateSkipped: the occurrence came due while another occurrence of
	// its job ran, under the overlap policy OverlapSkip: it was not run,
	// and is not missed (see Occurrence.Overlap). It decides the
	// occurrence, as StateSucceeded does.
	StateSkipped State = "skipped"
	// StateReplaced: the attempt was running when a later occurrence of
	// its job replaced it, under the overlap policy OverlapReplace: its
	// lease was broken, and its function's context ended with
	// sqllock.ErrLockLost. It decides the occurrence, as StateSucceeded
	// does.
	StateReplaced State = "replaced"
)

// The reasons a Run of a scheduled occurrence made no attempt, beside the
// states of the attempt that decided it (see Result.State). No attempt
// has them.
const (
	// StatePaused: the job is paused (see Ledger.Pause).
	StatePaused State = "paused"
	// StateNotDue: no occurrence of the job's schedule is due: the last
	// is more than half the way to the next, and the next is more than
	// its early tolerance away (see Occurrence.Early; Result.Next).
	StateNotDue State = "not due"
)

// MaxErrLen is the most bytes of a failed attempt's error text the ledger
// keeps; a longer text is cut at a character boundary.
const MaxErrLen = 4096

// Options configure a Ledger. The zero value is usable.
type Options struct {
	// TTL is the lease of a running attempt (default 30s), renewed in the
	// background every TTL/3 while its function runs: a runner that dies
	// or stops lets another take the occurrence over within one TTL.
	TTL time.Duration
	// Retries is the number of further attempts an occurrence gets after
	// failed ones (default 0: one attempt). Abandoned attempts do not
	// count: a taken-over occurrence always gets a new attempt.
	Retries int
	// RetryBackoff is the least time, on the database clock, between a
	// failed attempt's end and the next attempt of its occurrence. Run
	// waits it out before its own retry; other replicas skip the
	// occurrence until it has passed.
	RetryBackoff time.Duration
	// MaxRuntime, if positive, is the longest an attempt's function may
	// run: then its ctx ends with cause ErrTimedOut, and the attempt is
	// recorded failed, timed out (see ErrTimedOut), whatever the function
	// returns. A retry follows as Retries allow.
	MaxRuntime time.Duration
	// Wait makes Run wait, while another runner's attempt holds the
	// occurrence, until that attempt ends (or ctx does): then Run
	// returns the occurrence's state if it succeeded (or failed for good),
	// and takes it over if its runner died. Without Wait, Run returns at
	// once with Ran false and StateRunning.
	Wait bool
	// Owner names this ledger's runners in the ledger, followed by '/' and
	// a number unique to each attempt (default: the host, the process ID
	// and a random string, as sqllock names owners). At most
	// sqllock.MaxNameLen-21 bytes.
	Owner string
	// Logger receives the ledger's log lines (default: none).
	Logger *slog.Logger
	// Observer is told of the ledger's events through the interfaces it
	// implements among ClaimedObserver, SkippedObserver,
	// AbandonedObserver, FinishedObserver, MissedObserver and
	// HealthObserver; nil for none. It is passed to the lock table too if
	// it implements an interface of package observe (see
	// sqllock.TableOptions.Observer).
	// One that implements none of these is refused, with an error wrapping
	// sqllock.ErrInvalidOptions and observe.ErrNoInterface.
	Observer any
}

// Ledger runs the occurrences of periodic jobs at most once each to
// success across the processes that share its database, and records every
// attempt. It is safe for concurrent use.
type Ledger struct {
	d      dialect.Dialect
	runs   sqlrun.RunLedger
	locks  *sqllock.Table
	opts   Options
	log    *slog.Logger
	owner  string
	ttl    time.Duration
	serial atomic.Uint64
}

// defaultTTL is Options.TTL's default.
const defaultTTL = 30 * time.Second

// New returns a ledger on d's run ledger tables (see sqllock.Migrate),
// whose attempts hold leases on d's lock table. It returns an error
// wrapping sqllock.ErrUnsupported when d has no run ledger, and one
// wrapping sqllock.ErrInvalidOptions for invalid options.
func New(d dialect.Dialect, opts Options) (*Ledger, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: ledger: nil dialect", sqllock.ErrInvalidOptions)
	}
	tb, err := sqlrun.Open(d)
	if err != nil {
		return nil, err
	}
	if tb.Runs == nil {
		cat := d.Catalogue()
		return nil, cat.Unsupported(d.Name(), "Runs")
	}
	if opts.Retries < 0 || opts.RetryBackoff < 0 || opts.MaxRuntime < 0 {
		return nil, fmt.Errorf("%w: ledger: Retries, RetryBackoff and MaxRuntime must not be negative", sqllock.ErrInvalidOptions)
	}
	owner := opts.Owner
	if owner == "" {
		owner = defaultOwner()
	} else if err := sqllock.ValidateName(owner); err != nil || len(owner) > sqllock.MaxNameLen-21 {
		return nil, fmt.Errorf("%w: ledger: Owner %q is not 1 to %d bytes of UTF-8 without NUL",
			sqllock.ErrInvalidOptions, owner, sqllock.MaxNameLen-21)
	}
	locksObserver, err := checkObserver(opts.Observer)
	if err != nil {
		return nil, err
	}
	locks, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: opts.TTL, Logger: opts.Logger, Observer: locksObserver}})
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = defaultTTL
	}
	return &Ledger{d: d, runs: tb.Runs, locks: locks, opts: opts, log: log, owner: owner, ttl: ttl}, nil
}

// Run is a claimed attempt of an occurrence, as its function sees it.
type Run struct {
	Job        string
	Occurrence string
	// Attempt counts the occurrence's attempts from 1.
	Attempt int
	// Token is the attempt's fencing token: greater than that of every
	// earlier attempt of the occurrence.
	Token int64
	lock  *sqllock.Lock
	// job is the job's lease under the overlap policies OverlapSkip and
	// OverlapReplace (nil for none).
	job *sqllock.Lock
}

// Guard makes tx safe to commit only while the attempt holds its
// occurrence, as sqllock.Lock.Guard does: it returns an error wrapping
// sqllock.ErrLockLost once the attempt's lease has ended (the occurrence
// may then be another runner's; under OverlapReplace, a later occurrence
// may have replaced it), and the caller must roll tx back.
func (r *Run) Guard(ctx context.Context, tx *sql.Tx) error {
	if err := r.lock.Guard(ctx, tx); err != nil || r.job == nil {
		return err
	}
	return r.job.Guard(ctx, tx)
}

// TrustedUntil returns the instant, on this process's monotonic clock,
// until which the attempt's lease can be trusted from what its renewals
// have heard, as sqllock.Lock.TrustedUntil does; the zero time once the
// lease has ended.
func (r *Run) TrustedUntil() time.Time {
	t := r.lock.TrustedUntil()
	if r.job != nil {
		if u := r.job.TrustedUntil(); u.Before(t) {
			t = u
		}
	}
	return t
}

// Result is what Run did.
type Result struct {
	// Ran says that Run called the function at least once.
	Ran bool
	// Occurrence is the occurrence's key.
	Occurrence string
	// State is the state of the last attempt Run made, or, when it made
	// none, why: StateSucceeded (an attempt succeeded already),
	// StateRunning (another runner's attempt holds the occurrence) or
	// StateFailed (its attempts failed and no retry is due yet, or none is
	// left), StateSkipped (it was skipped for overlap, now or before) or
	// StateReplaced (a later occurrence replaced its attempt). When Run could not record the outcome of its attempt because
	// the attempt's lease ended, State is StateAbandoned.
	State State
	// Attempt and Token are those of the last attempt Run made, or of the
	// attempt that decided State when it made none (0 if none did).
	Attempt int
	Token   int64
	// Early is how long before its time a scheduled occurrence was
	// taken (0 when on time or late).
	Early time.Duration
	// Next is, when State is StateNotDue, the time of the schedule's
	// next occurrence (whose key Occurrence is).
	Next time.Time
	// Manual says the occurrence is a manual one (see Manual,
	// Ledger.Trigger).
	Manual bool
	// Pending is the key of the job's pending manual occurrence, as a
	// Run of a scheduled occurrence read it before its claim ("" for
	// none): Ledger.RunPending runs it.
	Pending string
	// Backfill is the backfill asked of the job's replicas (see
	// Ledger.RequestBackfill), as a Run of a scheduled occurrence read it
	// before its claim (zero for none): Ledger.RunBackfill runs it.
	Backfill Range
	// CaughtUp are the results of the missed occurrences Run ran before
	// this one, oldest first, under the catch-up policies CatchUpLatest
	// and CatchUpAll (see Occurrence.CatchUp).
	CaughtUp []Result
}

// Run runs fn for the occurrence occ of job, unless an attempt of it has
// succeeded, another runner's attempt holds it (see Options.Wait), its
// failed attempts leave no retry due (see Options.Retries), the job is
// paused (see Pause; a Manual occurrence runs all the same) or, for a
// scheduled occurrence (Every, Cron), none is due; skipping is not an
// error: Run returns Ran false and the State that says why.
//
// To run fn, Run claims the occurrence with a new attempt: it takes the
// occurrence's lease on the lock table (a lease whose runner died is taken
// over, with a greater token, and its attempt is marked abandoned), and
// records the attempt in a transaction guarded by the lease (if the lease
// lapsed first, which only a stalled process sees, Run asks again, up to
// three times). fn's ctx
// carries ctx's values and ends with ctx, or, with cause
// sqllock.ErrLockLost, when the lease is lost; its Err checks the lease's
// trust window on the spot, as the lock's context does. When fn returns, Run records its outcome, again
// guarded, and releases the lease. An error of fn is recorded (its text,
// up to MaxErrLen bytes), and retried as Options.Retries and RetryBackoff
// allow; if no retry succeeds, Run returns the last attempt's error,
// wrapped. If the outcome cannot be recorded because the lease has ended,
// Run returns an error wrapping sqllock.ErrLockLost (and State is
// StateAbandoned): another runner may run the occurrence again.
//
// job must be a valid name (see sqllock.ValidateName); an invalid one,
// or an invalid occurrence, is reported with sqllock.ErrInvalidName or
// sqllock.ErrInvalidOptions.
func (l *Ledger) Run(ctx context.Context, job string, occ Occurrence, fn func(ctx context.Context, r *Run) error) (Result, error) {
	if err := validateJob(job); err != nil {
		return Result{}, err
	}
	if fn == nil {
		return Result{}, fmt.Errorf("%w: ledger: nil function", sqllock.ErrInvalidOptions)
	}
	if err := occ.Validate(); err != nil {
		return Result{}, err
	}
	o, err := l.occurrence(ctx, job, occ)
	if err != nil {
		return Result{}, err
	}
	if o.state != "" && o.state != StateNotDue {
		res := Result{Occurrence: o.key, State: o.state, Next: o.next, Pending: o.pending, Backfill: o.backfill}
		l.skipped(ctx, job, res)
		return res, nil
	}
	caught, fnErr, err := l.catchUp(ctx, job, o, fn)
	if o.state != "" || err != nil {
		res := Result{Occurrence: o.key, State: o.state, Next: o.next, Pending: o.pending, Backfill: o.backfill,
			CaughtUp: caught}
		if o.state != "" && err == nil {
			l.skipped(ctx, job, res)
		}
		return res, errors.Join(fnErr, err)
	}
	res, err := l.runResolved(ctx, job, o, fn)
	res.CaughtUp = caught
	return res, errors.Join(fnErr, err)
}

// runResolved runs fn for the resolved occurrence o of job, as Run
// describes.
func (l *Ledger) runResolved(ctx context.Context, job string, o resolved, fn func(ctx context.Context, r *Run) error) (Result, error) {
	key, sched, overlap := o.key, o.sched, o.overlap
	done := func(r Result) Result {
		r.Early, r.Manual, r.Pending, r.Backfill = o.early, o.manual, o.pending, o.backfill
		return r
	}
	var (
		ran    bool
		last   attempt // our last attempt that ran fn
		lapsed int     // claims refused because the lease lapsed first
	)
	for {
		a, err := l.attempt(ctx, job, key, sched, overlap, fn)
		if err != nil && !a.Ran && errors.Is(err, sqllock.ErrLockLost) && lapsed < maxLapsed && ctx.Err() == nil {
			// The lease lapsed between its grant and the claim (a stalled
			// process): the claim wrote nothing, so ask again.
			lapsed++
			continue
		}
		switch {
		case err != nil && ran && !a.Ran:
			// A retry's claim failed: our last attempt stands.
			return done(last.Result), errors.Join(last.fnErr, err)
		case err != nil:
			return done(a.Result), err
		case a.Ran:
			ran, last = true, a
		case !ran:
			return done(a.Result), nil
		}
		if a.wait <= 0 {
			// Our last attempt succeeded or has no retry left, or another
			// runner's attempt decided the occurrence after it.
			return done(last.Result), last.fnErr
		}
		// A retry is due after the backoff (or what the database says is
		// left of it).
		t := time.NewTimer(a.wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return done(last.Result), errors.Join(last.fnErr, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// maxLapsed is how many times Run asks again for an occurrence whose
// lease lapsed before its claim was recorded.
const maxLapsed = 3

// attempt is the outcome of one claim of an occurrence, and of its run.
type attempt struct {
	Result
	fnErr error
	// wait is how long until a retry is due, when the attempt failed (or
	// none was made because a failed one's backoff has not passed) and
	// the occurrence has retries left; 0 for none.
	wait time.Duration
	// abandoned counts the occurrence's abandoned attempts before this
	// one.
	abandoned int
}

// resolved is the occurrence a Run is for.
type resolved struct {
	key   string
	sched dialect.JobSchedule // the job's schedule, recorded by the claim
	// state, if not "", is why Run makes no attempt: StatePaused or
	// StateNotDue (and next, the next occurrence's time).
	state    State
	next     time.Time
	early    time.Duration
	manual   bool
	pending  string // the job's pending manual occurrence
	backfill Range  // the backfill asked of the job's replicas
	// overlap is the overlap policy of a scheduled occurrence ("" for
	// none: OverlapAllow, and the occurrences of At and Key).
	overlap Overlap
	// catchUp is a scheduled occurrence's (see catchUp), with what it
	// reads: the schedule, the database's time and the catch-up window.
	catchUp CatchUp
	window  time.Duration
	s       schedule
	now     time.Time
}

// occurrence resolves occ for job on the database's clock, reading the
// job's state (paused, pending) in the same statement.
func (l *Ledger) occurrence(ctx context.Context, job string, occ Occurrence) (resolved, error) {
	r := resolved{key: occ.key, sched: dialect.JobSchedule{Job: job}, manual: occ.manual}
	if occ.manual {
		r.sched = dialect.JobSchedule{} // the job's schedule stays as it is
		if r.key == "" {
			now, err := l.runs.Now(ctx)
			if err != nil {
				return r, fmt.Errorf("ledger: read the database's time: %w", err)
			}
			r.key = ManualPrefix + now.Format(TimeFormat)
		}
		return r, nil
	}
	st, err := l.runs.Job(ctx, job)
	if err != nil {
		return r, fmt.Errorf("ledger: %s: read the job and the database's time: %w", job, err)
	}
	r.pending = st.Pending
	if r.backfill, err = parseRange(st.BackfillFrom, st.BackfillTo); err != nil {
		return r, fmt.Errorf("ledger: %s: the backfill asked for: %w", job, err)
	}
	if !occ.every {
		if st.Paused {
			r.state = StatePaused
		}
		return r, nil
	}
	r.sched.Period, r.sched.Phase, r.sched.Grace, r.sched.Spec = occ.period, occ.phase, occ.grace, occ.spec()
	if r.overlap = occ.overlap; r.overlap == "" {
		r.overlap = OverlapSkip
	}
	r.catchUp, r.window, r.s, r.now = occ.catchUp, occ.window, occ.schedule(), st.Now
	early := DefaultEarly
	if occ.earlySet {
		early = occ.early
	}
	at, next := due(occ.schedule(), st.Now, early)
	switch {
	case !at.IsZero():
		r.key, r.early = at.Format(TimeFormat), max(at.Sub(st.Now), 0)
	default:
		r.state, r.next = StateNotDue, next
		if !next.IsZero() {
			r.key = next.Format(TimeFormat)
		}
	}
	if st.Paused {
		r.state = StatePaused
	}
	if r.state != "" && (!st.Known || st.Period != r.sched.Period || st.Phase != r.sched.Phase || st.Spec != r.sched.Spec) {
		// No claim records the (new) schedule now: record it, so that the
		// old one's occurrences are not reported missed, and so that a
		// job first run when nothing is due is known (paused, triggered)
		// all the same.
		if err := l.runs.Schedule(ctx, r.sched); err != nil {
			return r, fmt.Errorf("ledger: %s: record its new schedule: %w", job, err)
		}
	}
	return r, nil
}

// attempt claims the occurrence key of job and, if it got it, runs fn and
// records its outcome.
func (l *Ledger) attempt(ctx context.Context, job, key string, sched dialect.JobSchedule, overlap Overlap, fn func(context.Context, *Run) error) (attempt, error) {
	res := attempt{Result: Result{Occurrence: key}}
	name := leaseName(job, key)
	owner := l.owner + "/" + strconv.FormatUint(l.serial.Add(1), 10)
	octx := sqllock.WithOwner(ctx, owner)
	var (
		lock *sqllock.Lock
		err  error
	)
	if l.opts.Wait {
		lock, err = l.locks.Acquire(octx, name)
	} else {
		lock, err = l.locks.TryAcquire(octx, name)
	}
	if errors.Is(err, sqllock.ErrLocked) {
		res.State = StateRunning
		l.skipped(ctx, job, res.Result)
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("ledger: %s %s: take the lease: %w", job, key, err)
	}
	defer func() {
		if err := lock.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, sqllock.ErrLockLost) {
			l.log.Warn("ledger: release of an attempt's lease failed; it ends by its TTL",
				"job", job, "occurrence", key, "err", err)
		}
	}()

	r := &Run{Job: job, Occurrence: key, Token: lock.Token(), lock: lock}
	over, err := l.overlap(octx, r, overlap)
	if err != nil {
		return res, err
	}
	if r.job != nil {
		defer func() {
			if err := r.job.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, sqllock.ErrLockLost) {
				l.log.Warn("ledger: release of a job's lease failed; it ends by its TTL", "job", job, "err", err)
			}
		}()
	}
	claimed, err := l.claim(ctx, r, owner, sched, over, &res)
	if err != nil || !claimed {
		return res, err
	}
	res.Ran, res.Attempt, res.Token, res.State = true, r.Attempt, r.Token, StateRunning
	l.claimed(ctx, r, owner)

	leases := []context.Context{lock.Context()}
	if r.job != nil {
		leases = append(leases, r.job.Context())
	}
	fctx, stop := runContext(ctx, l.opts.MaxRuntime, leases...)
	res.fnErr = timedOut(fn(fctx, r), fctx, l.opts.MaxRuntime)
	stop()
	state := StateSucceeded
	if res.fnErr != nil {
		state = StateFailed
		res.fnErr = fmt.Errorf("ledger: %s %s attempt %d: %w", job, key, r.Attempt, res.fnErr)
	}
	if err := l.finish(ctx, r, state, res.fnErr); err != nil {
		if errors.Is(err, sqllock.ErrLockLost) {
			res.State = StateAbandoned
		}
		return res, errors.Join(res.fnErr, err)
	}
	res.State = state
	l.finished(ctx, r, owner, state, res.fnErr)
	if state == StateFailed && r.Attempt-res.abandoned <= l.opts.Retries {
		res.wait = max(l.opts.RetryBackoff, time.Microsecond)
	}
	return res, nil
}

// claim records r's attempt in a transaction guarded by r's leases,
// after reading the occurrence's attempts: it marks those still running
// abandoned (their leases have ended: r holds the occurrence), and claims
// nothing if one succeeded (or was skipped or replaced) or the failed ones
// leave no retry due, setting res's State, Attempt and Token (and wait) to
// say why. Under over it records the attempt skipped instead, or first
// marks replaced the running attempts whose job leases it broke.
func (l *Ledger) claim(ctx context.Context, r *Run, owner string, sched dialect.JobSchedule, over overlapped, res *attempt) (claimed bool, err error) {
	var (
		gone     []dialect.RunRecord // the attempts marked abandoned
		replaced int
	)
	err = l.inTx(ctx, r, func(tx *sql.Tx) error {
		prev, now, err := l.runs.Attempts(ctx, tx, r.Job, r.Occurrence)
		if err != nil {
			return err
		}
		var (
			failed, abandoned int
			running           []dialect.RunRecord
			lastFail          dialect.RunRecord
		)
		for _, p := range prev {
			switch State(p.State) {
			case StateSucceeded, StateSkipped, StateReplaced:
				res.State, res.Attempt, res.Token = State(p.State), p.Attempt, p.Token
				return nil
			case StateFailed:
				failed++
				lastFail = p
			case StateRunning:
				running = append(running, p)
			case StateAbandoned:
				abandoned++
			}
			r.Attempt = p.Attempt
		}
		if failed > l.opts.Retries {
			res.State, res.Attempt, res.Token = StateFailed, lastFail.Attempt, lastFail.Token
			return nil
		}
		if failed > 0 {
			if left := lastFail.FinishedAt.Add(l.opts.RetryBackoff).Sub(now); left > 0 {
				res.State, res.Attempt, res.Token, res.wait = StateFailed, lastFail.Attempt, lastFail.Token, left
				return nil
			}
		}
		if len(running) > 0 {
			if _, err := l.runs.Abandon(ctx, tx, r.Job, r.Occurrence); err != nil {
				return err
			}
		}
		r.Attempt++
		rec := dialect.RunRecord{Job: r.Job, Occurrence: r.Occurrence, Attempt: r.Attempt, Owner: owner, Token: r.Token}
		if err := l.runs.Start(ctx, tx, rec, sched); err != nil {
			return err
		}
		if over.skip {
			return l.skip(ctx, tx, rec, res)
		}
		for _, o := range over.replaced {
			n, err := l.runs.Replace(ctx, tx, r.Job, o)
			if err != nil {
				return err
			}
			replaced += n
		}
		res.abandoned = abandoned + len(running)
		claimed, gone = true, running
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("ledger: %s %s: claim: %w", r.Job, r.Occurrence, err)
	}
	if !claimed {
		l.skipped(ctx, r.Job, res.Result)
		return false, nil
	}
	if replaced > 0 {
		l.log.Info("ledger: replaced the running occurrences of the job (overlap replace)",
			"job", r.Job, "occurrence", r.Occurrence, "replaced", replaced)
	}
	l.abandoned(ctx, gone, r, owner)
	return true, nil
}

// finish records r's outcome in a transaction guarded by r's leases.
func (l *Ledger) finish(ctx context.Context, r *Run, state State, fnErr error) error {
	rec := dialect.RunRecord{Job: r.Job, Occurrence: r.Occurrence, Attempt: r.Attempt, Token: r.Token, State: string(state)}
	if fnErr != nil {
		rec.Err = truncate(fnErr.Error(), MaxErrLen)
	}
	// The outcome is recorded even if ctx has ended meanwhile (the
	// function's own ctx has ended with it), within one TTL.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.ttl)
	defer cancel()
	err := l.inTx(ctx, r, func(tx *sql.Tx) error {
		ok, err := l.runs.Finish(ctx, tx, rec)
		if err == nil && !ok {
			// The row is not ours to finish any more: a takeover marked
			// it abandoned after our lease ended.
			return sqllock.ErrLockLost
		}
		if err == nil && strings.HasPrefix(r.Occurrence, ManualPrefix) {
			// A manual occurrence asked for is pending no more.
			err = l.runs.Clear(ctx, tx, r.Job, r.Occurrence)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("ledger: %s %s attempt %d: record %s: %w", r.Job, r.Occurrence, r.Attempt, state, err)
	}
	return nil
}

// inTx runs fn in a transaction guarded by r's leases, and commits it.
func (l *Ledger) inTx(ctx context.Context, r *Run, fn func(tx *sql.Tx) error) error {
	tx, err := l.d.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := r.Guard(ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// runContext returns the context of an attempt's function: the first
// lease's (a lock's context), also cancelled, with its cause, when ctx or
// another lease ends, and, with cause ErrTimedOut, after maxRuntime if
// positive. Its Err asks the leases first, which check their trust windows
// on the spot. stop releases what ties it to ctx, the other leases and the
// timer.
func runContext(ctx context.Context, maxRuntime time.Duration, leases ...context.Context) (context.Context, func()) {
	inner, cancel := context.WithCancelCause(leases[0])
	unhooks := make([]func() bool, 0, len(leases)+1)
	for _, c := range append([]context.Context{ctx}, leases[1:]...) {
		unhooks = append(unhooks, context.AfterFunc(c, func() { cancel(context.Cause(c)) }))
	}
	if maxRuntime > 0 {
		unhooks = append(unhooks, time.AfterFunc(maxRuntime, func() { cancel(ErrTimedOut) }).Stop)
	}
	return runCtx{inner, leases}, func() {
		for _, unhook := range unhooks {
			unhook()
		}
		cancel(nil)
	}
}

// runCtx is the context of an attempt's function (see runContext).
type runCtx struct {
	context.Context
	leases []context.Context
}

// Err reports a lease's end, checked on the spot, before anything else.
func (c runCtx) Err() error {
	for _, l := range c.leases {
		if err := l.Err(); err != nil {
			return err
		}
	}
	return c.Context.Err()
}

// defaultOwner names a process's runners: its host, its process ID and a
// random string.
func defaultOwner() string {
	host, _ := os.Hostname()
	if len(host) > 64 {
		host = host[:64]
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return host + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b[:])
}

// leaseName is the lock name of job's occurrence key: "run/job/key", or,
// if that is too long, "run/#" and the hex SHA-256 of job and key.
func leaseName(job, key string) string {
	if name := "run/" + job + "/" + key; len(name) <= sqllock.MaxNameLen {
		return name
	}
	sum := sha256.Sum256([]byte(job + "\x00" + key))
	return "run/#" + hex.EncodeToString(sum[:])
}

// jobLeaseName is the lock name of job's lease under the overlap
// policies OverlapSkip and OverlapReplace: "run-job/job", or, if that is
// too long, "run-job/#" and the hex SHA-256 of job.
func jobLeaseName(job string) string {
	if name := "run-job/" + job; len(name) <= sqllock.MaxNameLen {
		return name
	}
	sum := sha256.Sum256([]byte(job))
	return "run-job/#" + hex.EncodeToString(sum[:])
}

// validateJob reports whether job is a valid job name.
func validateJob(job string) error {
	if err := sqllock.ValidateName(job); err != nil {
		return fmt.Errorf("ledger: job %q: %w", job, err)
	}
	return nil
}

// truncate cuts s to at most n bytes, at a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
