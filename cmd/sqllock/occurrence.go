package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // --tz works on hosts without a zone database

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/ledger"
	"github.com/sqllock/sqllock/observe"
)

// occurrenceOptions are the flags of run that make it a run of the ledger:
// once per occurrence across every replica, rather than once at a time.
type occurrenceOptions struct {
	cron    string
	tz      string
	early   time.Duration
	every   time.Duration
	phase   time.Duration
	key     string
	retries int
	backoff time.Duration
	wait    bool
	overlap string
	catchUp string
	window  time.Duration
	// fillFrom and fillTo are the range of runs backfill (zero for run).
	fillFrom, fillTo time.Time
	// earlySet says --early was given.
	earlySet bool
}

// occurrenceFlags adds run's --every, --phase, --occurrence, --retries,
// --retry-backoff and --wait to fs.
func occurrenceFlags(fs *flag.FlagSet) *occurrenceOptions {
	o := &occurrenceOptions{}
	fs.Var((*durationValue)(&o.every), "every", "run COMMAND once per `PERIOD` (a duration: 1h, 24h) across every replica that runs this line: the occurrence is the multiple of PERIOD nearest to the database's clock, so replicas whose timers differ by up to half a period agree; recorded in the run ledger (sqllock runs)")
	fs.StringVar(&o.cron, "cron", "", "run COMMAND once per occurrence of the cron `EXPRESSION` ('0 2 * * *': five fields, six with seconds first, or @hourly, @daily...) in --tz, across every replica that runs this line; the occurrence is named on the database's clock, as with --every; recorded in the run ledger (sqllock runs)")
	fs.StringVar(&o.tz, "tz", "", "with --cron, the IANA time `ZONE` of the expression (Europe/Berlin; default UTC): a time skipped when clocks go forward runs at the end of the gap, a time repeated when they go back runs once, the first time")
	fs.Var((*durationValue)(&o.early), "early", "with --every or --cron, take an occurrence at most `SECONDS` (or a duration) before its time (default 5s, at most half the time from the one before): a run started earlier runs nothing, and says when the next occurrence is")
	fs.Var((*durationValue)(&o.phase), "phase", "with --every, the `OFFSET` of the occurrences from the multiples of PERIOD since the Unix epoch, UTC (--every 24h --phase 2h: daily at 02:00 UTC)")
	fs.StringVar(&o.key, "occurrence", "", "run COMMAND once for the occurrence `KEY` (a scheduled time, a date, a release) across every replica; recorded in the run ledger (sqllock runs)")
	fs.IntVar(&o.retries, "retries", 0, "with --every or --occurrence, `N` more attempts of an occurrence after failed ones: this run tries again after --retry-backoff, and later runs of the same occurrence may too")
	fs.Var((*durationValue)(&o.backoff), "retry-backoff", "with --retries, the `SECONDS` (or duration) after a failed attempt before the next one (database clock)")
	fs.StringVar(&o.overlap, "overlap", "", "with --every or --cron, what an occurrence does when it comes due while another occurrence of the job still runs: `POLICY` skip (the default: not run, recorded skipped), allow (run beside it) or replace (the running one's lease is broken: its command is stopped as a lost lock, exit 76)")
	fs.StringVar(&o.catchUp, "catch-up", "", "with --every or --cron, what a run does first with the occurrences missed before the due one (downtime): `POLICY` skip (the default: reported missed), latest (the occurrence just before the due one runs once if it was missed) or all (each missed one runs once, oldest first, at most 100 per run)")
	fs.Var((*durationValue)(&o.window), "catch-up-window", "with --catch-up latest or all, look back `SECONDS` (or a duration) before the due occurrence for missed ones (default 24h)")
	fs.BoolVar(&o.wait, "wait", false, "with --every or --occurrence, wait while another replica's attempt of the occurrence runs, instead of exiting at once: when it ends, exit as a replica that did not run it; when its replica died, take the occurrence over once that attempt's lease ends (--ttl)")
	return o
}

// given reports whether run was asked to run an occurrence, or an
// error if only the flags that go with one were given.
func (o *occurrenceOptions) given(fs *flag.FlagSet) (bool, error) {
	if isSet(fs, "every", "occurrence", "cron") {
		return true, nil
	}
	for _, f := range []string{"retries", "retry-backoff", "wait", "tz", "early", "overlap", "catch-up", "catch-up-window"} {
		if isSet(fs, f) {
			return false, usageError{msg: "--" + f + " goes with --every, --cron or --occurrence (a run of the ledger)"}
		}
	}
	return false, nil
}

// check refuses the flags that contradict a run of the ledger, or each
// other. grace and maxTime are run's --grace and --max-time.
func (o *occurrenceOptions) check(fs *flag.FlagSet, grace, maxTime time.Duration) error {
	given := 0
	for _, f := range []string{"every", "occurrence", "cron"} {
		if isSet(fs, f) {
			given++
		}
	}
	o.earlySet = isSet(fs, "early")
	if given == 1 && isSet(fs, "tz") && isSet(fs, "cron") {
		if _, err := o.zone(); err != nil {
			return err
		}
	}
	if given == 1 && isSet(fs, "cron") {
		if err := o.occurrence().Validate(); err != nil {
			return usageError{msg: "--cron: " + cronMessage(err)}
		}
	}
	switch {
	case given > 1:
		return usageError{msg: "--every, --cron and --occurrence contradict each other: give one"}
	case isSet(fs, "tz") && !isSet(fs, "cron"):
		return usageError{msg: "--tz needs --cron: --every counts periods since the Unix epoch, in UTC"}
	case isSet(fs, "early") && isSet(fs, "occurrence"):
		return usageError{msg: "--early goes with --every or --cron: an --occurrence KEY has no time"}
	case o.early < 0:
		return usageError{msg: "--early must not be negative"}
	case isSet(fs, "overlap") && isSet(fs, "occurrence"):
		return usageError{msg: "--overlap goes with --every or --cron: an --occurrence KEY is not one of a schedule's"}
	case isSet(fs, "overlap") && !validOverlap(o.overlap):
		return usageError{msg: fmt.Sprintf("--overlap %q: want skip, allow or replace", o.overlap)}
	case isSet(fs, "catch-up", "catch-up-window") && isSet(fs, "occurrence"):
		return usageError{msg: "--catch-up goes with --every or --cron: an --occurrence KEY has no schedule to miss"}
	case isSet(fs, "catch-up") && !validCatchUp(o.catchUp):
		return usageError{msg: fmt.Sprintf("--catch-up %q: want skip, latest or all", o.catchUp)}
	case isSet(fs, "catch-up-window") && (o.catchUp != "latest" && o.catchUp != "all" || o.window <= 0):
		return usageError{msg: "--catch-up-window needs --catch-up latest or all, and must be positive"}
	case isSet(fs, "every") && o.every <= 0:
		return usageError{msg: "--every must be positive"}
	case isSet(fs, "phase") && !isSet(fs, "every"):
		return usageError{msg: "--phase needs --every"}
	case o.phase < 0 || (o.every > 0 && o.phase >= o.every):
		return usageError{msg: fmt.Sprintf("--phase %v: want 0 or more, below --every %v", o.phase, o.every)}
	case isSet(fs, "occurrence") && o.key == "":
		return usageError{msg: "--occurrence needs a KEY"}
	case o.retries < 0 || o.backoff < 0:
		return usageError{msg: "--retries and --retry-backoff must not be negative"}
	case isSet(fs, "retry-backoff") && o.retries == 0:
		return usageError{msg: "--retry-backoff needs --retries"}
	case grace < 0 || maxTime < 0:
		return usageError{msg: "--grace and --max-time must not be negative"}
	}
	for _, f := range [][]string{{"n", "no-wait"}, {"w", "timeout"}, {"strategy"}, {"s", "shared"}, {"exclusive"}, {"max"}, {"fair"}, {"min-hold"}} {
		if isSet(fs, f...) {
			name := "--" + f[len(f)-1]
			return usageError{msg: name + " does not go with --every or --occurrence: an occurrence runs once, on the lock table, whenever its replicas start (--wait waits for another replica's attempt)"}
		}
	}
	return nil
}

// earlyText says how early an occurrence may be taken, for messages.
func (o *occurrenceOptions) earlyText() string {
	if o.earlySet {
		return o.early.String()
	}
	return ledger.DefaultEarly.String() + " (the default)"
}

// cronMessage is the ledger's refusal of a cron expression, without its
// prefixes.
func cronMessage(err error) string {
	m := message(err)
	if _, rest, ok := strings.Cut(m, "ledger: cron "); ok {
		return "expression " + rest
	}
	return m
}

// zone loads --tz (UTC if not given).
func (o *occurrenceOptions) zone() (*time.Location, error) {
	if o.tz == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(o.tz)
	if err != nil || o.tz == "Local" {
		return nil, usageError{msg: fmt.Sprintf("--tz %q: not an IANA time zone (Europe/Berlin, America/New_York, UTC)", o.tz)}
	}
	return loc, nil
}

// occurrence is the ledger's occurrence of the flags (check has loaded
// --tz before).
func (o *occurrenceOptions) occurrence() ledger.Occurrence {
	var occ ledger.Occurrence
	switch {
	case o.cron != "":
		loc, err := o.zone()
		if err != nil {
			loc = time.UTC
		}
		occ = ledger.Cron(o.cron, loc)
	case o.every > 0:
		occ = ledger.Every(o.every).Phase(o.phase)
	default:
		return ledger.Key(o.key)
	}
	if o.earlySet {
		occ = occ.Early(o.early)
	}
	if o.overlap != "" {
		occ = occ.Overlap(ledger.Overlap(o.overlap))
	}
	if o.catchUp != "" {
		occ = occ.CatchUp(ledger.CatchUp(o.catchUp)).CatchUpWindow(o.window)
	}
	return occ
}

// validCatchUp reports whether s names a catch-up policy.
func validCatchUp(s string) bool {
	_, err := ledger.ParseCatchUp(s)
	return err == nil
}

// validOverlap reports whether s names an overlap policy.
func validOverlap(s string) bool {
	_, err := ledger.ParseOverlap(s)
	return err == nil
}

// runOccurrence runs the command for the occurrence of the flags, unless
// it is done, runs elsewhere, has no attempt left, is not due or its job is
// paused, and records its outcome in the run ledger; the ledger tries a
// failed occurrence again after --retry-backoff while --retries allow.
// Then, if a manual occurrence of the job is pending (sqllock runs
// trigger), it runs that one too, unless another replica does. A signal is passed on to
// the command while it runs, and ends the run: no attempt follows.
func (r *runner) runOccurrence(ctx context.Context, dsn, schema string, o *occurrenceOptions) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	t, err := openReady(ctx, dsn, schema)
	if err != nil {
		return err
	}
	defer t.Close()
	r.target = t
	opts := ledger.Options{TTL: r.ttl, Retries: o.retries, RetryBackoff: o.backoff, Wait: o.wait}
	if r.verbose {
		opts.Observer = waitLog{r}
	}
	l, err := ledger.New(t.d, opts)
	if errors.Is(err, sqllock.ErrInvalidOptions) || errors.Is(err, sqllock.ErrUnsupported) {
		return usageError{msg: err.Error()}
	}
	if err != nil {
		return err
	}

	// A signal ends the run (the claim, or the wait for a retry) and goes
	// to the command if one runs.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu      sync.Mutex
		running bool
	)
	jobSigs := make(chan os.Signal, len(forwarded))
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case s := <-sigs:
				cancel(interruptedError{s, fmt.Sprintf("interrupted by %s while running %q", signalName(s), r.name)})
				mu.Lock()
				if running {
					select {
					case jobSigs <- s:
					default:
					}
				}
				mu.Unlock()
			case <-done:
				return
			}
		}
	}()

	code := 0 // the status of the last attempt's command
	job := func(held context.Context, run *ledger.Run) error {
		mu.Lock()
		if ctx.Err() != nil { // a signal came during the claim
			mu.Unlock()
			return context.Cause(ctx)
		}
		running = true
		mu.Unlock()
		r.logf("running occurrence %s of %q (attempt %d, token %d)", run.Occurrence, r.name, run.Attempt, run.Token)
		start := time.Now()
		c, err := r.supervise(held, run.TrustedUntil, run.Token, []string{
			"SQLLOCK_OCCURRENCE=" + run.Occurrence,
			"SQLLOCK_ATTEMPT=" + strconv.Itoa(run.Attempt),
		}, jobSigs, nil)
		mu.Lock()
		running = false
		mu.Unlock()
		if err != nil {
			return err
		}
		if code = c; c != 0 {
			r.logf("occurrence %s of %q: attempt %d failed with status %d", run.Occurrence, r.name, run.Attempt, c)
			if err := r.timedOut(c, start); err != nil {
				return err
			}
			return fmt.Errorf("%s exited with status %d", r.argv[0], c)
		}
		return nil
	}
	if !o.fillTo.IsZero() {
		return r.backfill(ctx, t, l, o, job)
	}
	res, err := l.Run(ctx, r.name, o.occurrence(), job)
	for _, c := range res.CaughtUp {
		fmt.Fprintf(os.Stderr, "sqllock: caught up the missed occurrence %s of %q (--catch-up %s): %s\n",
			c.Occurrence, r.name, o.catchUp, caughtUpText(c))
	}
	outcome := r.occurrenceOutcome(ctx, t, o, res, err, code)
	if !res.Backfill.IsZero() && ctx.Err() == nil && (err == nil || res.Ran) {
		// A backfill was asked for (sqllock runs backfill without a
		// command, or the console): this replica runs it, beside others.
		fill, results, ferr := l.RunBackfill(ctx, r.name, o.occurrence(), job)
		switch {
		case ferr != nil:
			fmt.Fprintf(os.Stderr, "sqllock: the backfill %s of %q asked for: %v\n", fill, r.name, message(ferr))
		case !fill.IsZero():
			fmt.Fprintf(os.Stderr, "sqllock: ran the backfill %s of %q asked for (sqllock runs backfill): %d occurrences\n", fill, r.name, len(results))
		}
	}
	if res.Pending == "" || ctx.Err() != nil || (err != nil && !res.Ran) {
		return outcome
	}
	// A manual occurrence was asked for (sqllock runs trigger): this
	// replica runs it, unless another does.
	code = 0
	pres, perr := l.RunPending(ctx, r.name, job)
	if pres.Ran || perr != nil {
		fmt.Fprintf(os.Stderr, "sqllock: ran the manual occurrence %s of %q (sqllock runs trigger)\n", pres.Occurrence, r.name)
	}
	pout := r.occurrenceOutcome(ctx, t, o, pres, perr, code)
	if outcome != nil {
		return outcome
	}
	return pout
}

// occurrenceOutcome turns what a Run of the ledger did into run's
// answer: nil, or the error or exit status to exit with. code is the
// status of the last attempt's command.
func (r *runner) occurrenceOutcome(ctx context.Context, t *target, o *occurrenceOptions, res ledger.Result, err error, code int) error {
	var ie interruptedError
	switch {
	case errors.Is(err, sqllock.ErrInvalidName) || errors.Is(err, sqllock.ErrInvalidOptions):
		return usageError{msg: err.Error()}
	case !res.Ran && errors.As(context.Cause(ctx), &ie):
		return exitError{ie.status(), ie}
	case !res.Ran && err != nil:
		return t.fail(err)
	case !res.Ran && res.State == ledger.StatePaused:
		fmt.Fprintf(os.Stderr, "sqllock: job %q is paused: occurrence %s not run (sqllock runs resume %s)\n", r.name, res.Occurrence, r.name)
		if r.conflict != 0 {
			return exitError{code: r.conflict}
		}
		return nil
	case !res.Ran && res.State == ledger.StateNotDue:
		next := "none in the next five years"
		if !res.Next.IsZero() {
			next = fmt.Sprintf("the next, %s, is in %v", res.Occurrence, time.Until(res.Next).Round(time.Second))
		}
		fmt.Fprintf(os.Stderr, "sqllock: no occurrence of %q is due (%s; --early tolerates %v): nothing run; to run it now without using up an occurrence: sqllock runs trigger %s\n",
			r.name, next, o.earlyText(), r.name)
		if r.conflict != 0 {
			return exitError{code: r.conflict}
		}
		return nil
	case !res.Ran && res.State == ledger.StateSkipped:
		fmt.Fprintf(os.Stderr, "sqllock: occurrence %s of %q skipped: another occurrence of the job was running (--overlap skip; recorded in sqllock runs)\n", res.Occurrence, r.name)
		if r.conflict != 0 {
			return exitError{code: r.conflict}
		}
		return nil
	case !res.Ran:
		r.logf("occurrence %s of %q not run here: %s", res.Occurrence, r.name, skipReason(res))
		if r.conflict != 0 {
			return exitError{code: r.conflict}
		}
		return nil
	}
	if res.Early > 0 {
		fmt.Fprintf(os.Stderr, "sqllock: took occurrence %s of %q %v before its time (within --early)\n", res.Occurrence, r.name, res.Early.Round(time.Millisecond))
	}
	switch {
	case res.State == ledger.StateSucceeded:
		r.logf("occurrence %s of %q succeeded (attempt %d)", res.Occurrence, r.name, res.Attempt)
		return nil
	case code == exitLost:
		return exitError{code: exitLost}
	case res.State == ledger.StateAbandoned:
		// The lease ended after the command: its outcome could not be
		// recorded, and another replica may run the occurrence again.
		return exitError{exitLost, fmt.Errorf("occurrence %s of %q: its outcome was not recorded: %v", res.Occurrence, r.name, message(err))}
	case code != 0:
		return exitError{code: code}
	case errors.As(context.Cause(ctx), &ie): // before the command started
		return exitError{ie.status(), ie}
	}
	// The command could not start, or its outcome was not recorded.
	return err
}

// backfill runs the command for each occurrence of o's range (runs
// backfill), says what each did, and exits 1 if an attempt failed.
func (r *runner) backfill(ctx context.Context, t *target, l *ledger.Ledger, o *occurrenceOptions, job func(context.Context, *ledger.Run) error) error {
	results, err := l.Backfill(ctx, r.name, o.occurrence(), o.fillFrom, o.fillTo, job)
	failed := 0
	for _, res := range results {
		fmt.Fprintf(os.Stderr, "sqllock: backfill of %q: occurrence %s: %s\n", r.name, res.Occurrence, caughtUpText(res))
		if res.Ran && res.State != ledger.StateSucceeded {
			failed++
		}
	}
	var ie interruptedError
	switch {
	case errors.Is(err, sqllock.ErrInvalidOptions):
		return usageError{msg: err.Error()}
	case errors.As(context.Cause(ctx), &ie):
		return exitError{ie.status(), ie}
	case failed > 0:
		return exitError{exitFailure, fmt.Errorf("backfill of %q: %d of %d occurrences failed", r.name, failed, len(results))}
	case err != nil:
		return t.fail(err)
	}
	fmt.Fprintf(os.Stderr, "sqllock: backfill of %q: %d occurrences from %s to %s done\n", r.name, len(results),
		o.fillFrom.UTC().Format(time.RFC3339), o.fillTo.UTC().Format(time.RFC3339))
	return nil
}

// caughtUpText says what a caught-up occurrence's run did.
func caughtUpText(res ledger.Result) string {
	if res.Ran {
		return string(res.State) + attemptText(res)
	}
	return "not run here: " + skipReason(res)
}

// skipReason says why res ran nothing, for -v.
func skipReason(res ledger.Result) string {
	switch res.State {
	case ledger.StateSucceeded:
		return "done already" + attemptText(res)
	case ledger.StateRunning:
		return "running elsewhere" + attemptText(res)
	case ledger.StateSkipped:
		return "skipped for overlap" + attemptText(res)
	case ledger.StateReplaced:
		return "replaced by a later occurrence" + attemptText(res)
	case ledger.StateFailed:
		if res.Attempt == 0 {
			return "its attempts failed, and no attempt is left for now"
		}
		return fmt.Sprintf("attempt %d failed, and no attempt is left for now", res.Attempt)
	}
	return string(res.State)
}

// attemptText names the attempt that decided res, as far as it is known:
// " (attempt 2, token 7)", or "" when the ledger did not say (another
// replica's attempt holds the occurrence's lease, unseen).
func attemptText(res ledger.Result) string {
	switch {
	case res.Attempt > 0 && res.Token > 0:
		return fmt.Sprintf(" (attempt %d, token %d)", res.Attempt, res.Token)
	case res.Attempt > 0:
		return fmt.Sprintf(" (attempt %d)", res.Attempt)
	case res.Token > 0:
		return fmt.Sprintf(" (token %d)", res.Token)
	}
	return ""
}

// waitLog says, for --verbose, when a --wait run starts to wait for
// another replica's attempt of the occurrence (its lease is the name).
type waitLog struct{ r *runner }

var _ observe.WaitingObserver = waitLog{}

// Waiting implements observe.WaitingObserver.
func (w waitLog) Waiting(_ context.Context, e observe.WaitingEvent) {
	if e.Delta > 0 {
		w.r.logf("waiting for %q: another replica's attempt of the occurrence holds it", e.Name)
	}
}

// timedOut returns, when the command that the runner started at start
// ended with status code because its --max-time passed (the supervisor's
// exitTimedOut, once the time is up), an error wrapping
// ledger.ErrTimedOut, which the ledger records as the attempt's timeout;
// nil otherwise (a command that exits 124 on its own before then).
func (r *runner) timedOut(code int, start time.Time) error {
	if code != exitTimedOut || r.maxTime <= 0 || time.Since(start) < r.maxTime {
		return nil
	}
	return fmt.Errorf("%w (%v): %s stopped (status %d)", ledger.ErrTimedOut, r.maxTime, r.argv[0], code)
}
