package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/ledger"
)

// cronFlags is "sqllock cron FILE": the crontab daemon, started alike on
// every replica, each entry of FILE run through the run ledger.
func cronFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := dsnFlag(fs), schemaFlag(fs)
	check := fs.Bool("check", false, "check FILE and print its entries with their next times, touching no database; exit 64 naming the line and field of each mistake")
	ttl := durationFlag(fs, "ttl", 30*time.Second, "the lease of a running occurrence, in `SECONDS` or as a duration, renewed every ttl/3: a replica that dies lets another take the occurrence over within it")
	grace := durationFlag(fs, "grace", 10*time.Second, "the `SECONDS` (or duration) a job's process group has between SIGTERM and SIGKILL when it is stopped: its lease lost, max-runtime= passed, or sqllock cron told to stop")
	removed := fs.String("removed", "pause", "what a reload (SIGHUP) does to the job of an entry no longer in FILE: pause (sqllock runs resume JOB brings it back), forget (its schedule and missed occurrences go; its attempts stay) or keep (`ACTION`)")
	poll := durationFlag(fs, "poll", 2*time.Second, "look for manual occurrences (sqllock runs trigger) and pauses every `SECONDS`: one statement per poll")
	verbose := boolFlag(fs, "v,verbose", "log every decision on stderr: each occurrence claimed, run, skipped (and why) or refused, each reload")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 1 {
			return usageError{msg: "cron needs one FILE: sqllock cron [flags] FILE (sqllock cron --check FILE checks it)"}
		}
		switch {
		case *removed != "pause" && *removed != "forget" && *removed != "keep":
			return usageError{msg: fmt.Sprintf("--removed %q: want pause, forget or keep", *removed)}
		case *ttl <= 0 || *grace < 0 || *poll <= 0:
			return usageError{msg: "--ttl and --poll must be positive, --grace not negative"}
		}
		entries, err := readCrontab(args[0])
		if err != nil {
			return err
		}
		if *check {
			return printCrontab(stdout, args[0], entries)
		}
		d := newCronDaemon(args[0], *removed, *ttl, *grace, *poll, *verbose)
		return d.run(ctx, *dsn, *schema, entries)
	}
}

// readCrontab reads and checks the file at path: a usage error naming each
// mistake's line and field.
func readCrontab(path string) ([]*cronEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageError{msg: fmt.Sprintf("cron: %v", err)}
	}
	defer f.Close()
	entries, err := parseCrontab(path, f)
	var ce cronErrors
	if errors.As(err, &ce) {
		return nil, usageError{msg: ce.Error()}
	}
	return entries, err
}

// printCrontab prints what --check found: each entry's line, job, schedule,
// next time and command.
func printCrontab(w io.Writer, path string, entries []*cronEntry) error {
	fmt.Fprintf(w, "%s: %s, ok\n", path, count(len(entries), "entry", "entries"))
	if len(entries) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LINE\tJOB\tSCHEDULE\tNEXT (UTC)\tSETTINGS\tCOMMAND")
	now := time.Now()
	for _, e := range entries {
		next := "-"
		if t := e.occurrence().Next(now); !t.IsZero() {
			next = t.UTC().Format("2006-01-02 15:04:05")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.line, cell(e.name), cell(e.scheduleText()), next, e.settingsText(), cell(e.command))
	}
	return tw.Flush()
}

// settingsText lists e's settings that differ from the defaults.
func (e *cronEntry) settingsText() string {
	s := ""
	add := func(k, v string) {
		if s != "" {
			s += " "
		}
		s += k + "=" + v
	}
	if e.retries > 0 {
		add("retries", strconv.Itoa(e.retries))
	}
	if e.backoff > 0 {
		add("retry-backoff", e.backoff.String())
	}
	if e.maxTime > 0 {
		add("max-runtime", e.maxTime.String())
	}
	if e.earlySet {
		add("early", e.early.String())
	}
	if e.overlap != "" {
		add("overlap", string(e.overlap))
	}
	if e.catchUp != "" {
		add("catchup", string(e.catchUp))
	}
	if e.window > 0 {
		add("catchup-window", e.window.String())
	}
	if s == "" {
		return "-"
	}
	return s
}

// ledgerKey is the options an entry's ledger differs by.
type ledgerKey struct {
	retries int
	backoff time.Duration
}

// cronDaemon is the state of sqllock cron.
type cronDaemon struct {
	path    string
	removed string // --removed
	ttl     time.Duration
	grace   time.Duration
	poll    time.Duration
	verbose bool
	target  *target

	// Owned by run's goroutine.
	entries []*cronState
	ledgers map[ledgerKey]*ledger.Ledger
	skew    time.Duration // the database's clock minus this host's
	paused  map[string]bool

	wg          sync.WaitGroup
	mu          sync.Mutex
	live        map[chan os.Signal]bool // the signal channels of the jobs running
	pendingRuns map[runKey]bool         // the jobs whose pending manual occurrence or backfill runs here
	draining    bool
}

// newCronDaemon returns the daemon of the file at path, with the flags'
// values.
func newCronDaemon(path, removed string, ttl, grace, poll time.Duration, verbose bool) *cronDaemon {
	return &cronDaemon{path: path, removed: removed, ttl: ttl, grace: grace, poll: poll, verbose: verbose,
		ledgers: map[ledgerKey]*ledger.Ledger{}, live: map[chan os.Signal]bool{}, pendingRuns: map[runKey]bool{},
		paused: map[string]bool{}}
}

// cronState is an entry as the daemon schedules it: all but next is set
// once, before any run of it reads it.
type cronState struct {
	*cronEntry
	occ  ledger.Occurrence
	l    *ledger.Ledger
	next time.Time // its next time, on the database's clock
}

// logf writes a --verbose line.
func (d *cronDaemon) logf(format string, args ...any) {
	if d.verbose {
		d.say(format, args...)
	}
}

// say writes a line on stderr, verbose or not.
func (d *cronDaemon) say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "sqllock: cron: "+format+"\n", args...)
}

// run schedules entries until a signal ends it: SIGHUP reloads the file,
// SIGTERM and SIGINT drain (no new claim; the running jobs get the signal,
// and SIGKILL after --grace) and return.
func (d *cronDaemon) run(ctx context.Context, dsn, schema string, entries []*cronEntry) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)

	t, err := openReady(ctx, dsn, schema)
	if err != nil {
		return err
	}
	defer t.Close()
	return d.serve(ctx, t, entries, sigs)
}

// serve is run on the database t, with the signals of sigs.
func (d *cronDaemon) serve(ctx context.Context, t *target, entries []*cronEntry, sigs <-chan os.Signal) error {
	d.target = t
	if err := d.install(entries); err != nil {
		return err
	}
	if err := d.measureSkew(ctx); err != nil {
		return t.fail(err)
	}
	d.logf("%s from %s; polling every %v", count(len(d.entries), "entry", "entries"), d.path, d.poll)

	claims, stop := context.WithCancelCause(ctx) // ended by a drain: no new claim
	defer stop(nil)
	poll := time.NewTicker(d.poll)
	defer poll.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	polls := 0
	for {
		wake := d.fireDue(claims)
		timer.Reset(min(max(time.Until(wake.Add(-d.skew)), 0), d.poll))
		select {
		case <-timer.C:
		case <-poll.C:
			polls++
			if polls%skewEvery == 0 {
				if err := d.measureSkew(claims); err != nil {
					d.say("reading the database's clock: %v", message(err))
				}
			}
			d.pollJobs(claims)
		case s := <-sigs:
			if s == syscall.SIGHUP {
				d.reload(claims)
				continue
			}
			return d.drain(stop, s, sigs)
		case <-ctx.Done():
			return d.drain(stop, syscall.SIGTERM, sigs)
		}
	}
}

// skewEvery is how many polls go between two readings of the database's
// clock.
const skewEvery = 30

// measureSkew reads the database's clock against this host's.
func (d *cronDaemon) measureSkew(ctx context.Context) error {
	l, err := d.ledgerFor(ledgerKey{})
	if err != nil {
		return err
	}
	before := time.Now()
	now, err := l.Now(ctx)
	if err != nil {
		return err
	}
	after := time.Now()
	d.skew = now.Sub(before.Add(after.Sub(before) / 2))
	return nil
}

// dbNow is the database's time, as this host reckons it.
func (d *cronDaemon) dbNow() time.Time { return time.Now().Add(d.skew) }

// ledgerFor returns the ledger of an entry's options.
func (d *cronDaemon) ledgerFor(k ledgerKey) (*ledger.Ledger, error) {
	if l := d.ledgers[k]; l != nil {
		return l, nil
	}
	// Wait: the replicas that find an occurrence running elsewhere wait
	// for its end, so that one of them takes it over when its replica
	// died; no later Run of theirs would ask for it again.
	l, err := ledger.New(d.target.d, ledger.Options{TTL: d.ttl, Retries: k.retries, RetryBackoff: k.backoff, Wait: true})
	if errors.Is(err, sqllock.ErrInvalidOptions) || errors.Is(err, sqllock.ErrUnsupported) {
		return nil, usageError{msg: err.Error()}
	}
	if err != nil {
		return nil, err
	}
	d.ledgers[k] = l
	return l, nil
}

// install makes entries the daemon's table, keeping the next time of
// those unchanged.
func (d *cronDaemon) install(entries []*cronEntry) error {
	old := map[string]*cronState{}
	for _, s := range d.entries {
		old[s.name] = s
	}
	states := make([]*cronState, 0, len(entries))
	for _, e := range entries {
		if s := old[e.name]; s != nil && s.same(e) {
			// Unchanged: its next time stays (and its entry, which the
			// runs in progress read).
			states = append(states, s)
			continue
		}
		l, err := d.ledgerFor(ledgerKey{e.retries, e.backoff})
		if err != nil {
			return err
		}
		states = append(states, &cronState{cronEntry: e, occ: e.occurrence(), l: l})
	}
	d.entries = states
	return nil
}

// fireDue starts the entries whose time has come, and returns the
// earliest next time of any (the database's clock).
func (d *cronDaemon) fireDue(ctx context.Context) time.Time {
	now := d.dbNow()
	wake := now.Add(time.Hour)
	for _, s := range d.entries {
		if s.next.IsZero() {
			s.next = s.occ.Next(now)
			d.logf("%s: next occurrence at %s (%s)", s.name, s.next.UTC().Format(time.RFC3339), s.scheduleText())
		}
		if s.next.IsZero() {
			continue
		}
		if !s.next.After(now) {
			d.start(ctx, s, runDue)
			s.next = s.occ.Next(now)
		}
		if s.next.Before(wake) {
			wake = s.next
		}
	}
	return wake
}

// start runs an occurrence of s's job (its pending manual one if pending)
// in a goroutine of its own.
func (d *cronDaemon) start(ctx context.Context, s *cronState, kind runKind) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining {
		return
	}
	key := runKey{s.name, kind}
	if kind != runDue {
		if d.pendingRuns[key] {
			return
		}
		d.pendingRuns[key] = true
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if kind != runDue {
			defer func() {
				d.mu.Lock()
				delete(d.pendingRuns, key)
				d.mu.Unlock()
			}()
		}
		d.runEntry(ctx, s, kind)
	}()
}

// runKind is what a run of an entry runs: its occurrence due, its pending
// manual occurrence, or the backfill asked of its replicas.
type runKind int

const (
	runDue runKind = iota
	runPending
	runBackfill
)

// runKey names a run of an entry's job that runs once at a time here.
type runKey struct {
	job  string
	kind runKind
}

// runEntry runs the occurrence due of s's job through the ledger (or its
// pending manual one, or the backfill asked for), and then the manual one
// and the backfill that the claim found pending.
func (d *cronDaemon) runEntry(ctx context.Context, s *cronState, kind runKind) {
	r := &runner{name: s.name, argv: s.argv(), strategy: "table", ttl: d.ttl, grace: d.grace, maxTime: s.maxTime,
		verbose: d.verbose, target: d.target}
	sigs := make(chan os.Signal, 2)
	d.mu.Lock()
	d.live[sigs] = true
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.live, sigs)
		d.mu.Unlock()
	}()
	job := func(held context.Context, run *ledger.Run) error {
		if ctx.Err() != nil { // a drain began during the claim
			return context.Cause(ctx)
		}
		d.logf("%s: running occurrence %s (attempt %d, token %d)", s.name, run.Occurrence, run.Attempt, run.Token)
		env := append(append([]string{}, s.env...), "SQLLOCK_OCCURRENCE="+run.Occurrence, "SQLLOCK_ATTEMPT="+strconv.Itoa(run.Attempt))
		start := time.Now()
		code, err := r.supervise(held, run.TrustedUntil, run.Token, env, sigs, nil)
		switch terr := r.timedOut(code, start); {
		case err != nil:
			return err
		case terr != nil:
			return terr
		case code == exitLost:
			return fmt.Errorf("its lease was lost (status %d)", code)
		case code != 0:
			return fmt.Errorf("exited with status %d", code)
		}
		return nil
	}
	var (
		res ledger.Result
		err error
	)
	switch kind {
	case runBackfill:
		fill, results, err := s.l.RunBackfill(ctx, s.name, s.occ, job)
		switch {
		case fill.IsZero() && err == nil: // run meanwhile
		case err != nil:
			d.say("%s: backfill %s: %v", s.name, fill, message(err))
		default:
			d.logf("%s: backfill %s done: %d occurrences", s.name, fill, len(results))
		}
		return
	case runPending:
		res, err = s.l.RunPending(ctx, s.name, job)
		if res.Occurrence == "" && err == nil {
			return // run meanwhile
		}
	default:
		res, err = s.l.Run(ctx, s.name, s.occ, job)
	}
	d.report(ctx, s, res, err)
	if kind == runDue && res.Pending != "" && ctx.Err() == nil {
		d.start(ctx, s, runPending)
	}
	if kind == runDue && !res.Backfill.IsZero() && ctx.Err() == nil {
		d.start(ctx, s, runBackfill)
	}
}

// report logs what a Run of s's job did.
func (d *cronDaemon) report(ctx context.Context, s *cronState, res ledger.Result, err error) {
	what := "occurrence " + res.Occurrence
	switch {
	case res.Occurrence == "":
		what = "no occurrence"
	case res.Manual:
		what = "manual occurrence " + res.Occurrence
	}
	switch {
	case err != nil && !res.Ran && ctx.Err() != nil:
		d.logf("%s: %s not claimed: draining", s.name, what)
	case err != nil:
		d.say("%s: %s: %v", s.name, what, message(err))
	case !res.Ran && res.State == ledger.StatePaused:
		d.logf("%s: paused: %s not run (sqllock runs resume %s)", s.name, what, s.name)
	case !res.Ran && res.State == ledger.StateNotDue:
		d.logf("%s: no occurrence due (the next, %s, is at %s)", s.name, res.Occurrence, res.Next.UTC().Format(time.RFC3339))
	case !res.Ran:
		d.logf("%s: %s not run here: %s", s.name, what, skipReason(res))
	case res.State == ledger.StateSucceeded:
		d.logf("%s: %s succeeded (attempt %d, token %d)", s.name, what, res.Attempt, res.Token)
	default:
		d.logf("%s: %s ended %s (attempt %d, token %d)", s.name, what, res.State, res.Attempt, res.Token)
	}
}

// pollJobs reads every job's row: runs the pending manual occurrences of
// the table's jobs, and says when a job is paused or resumed.
func (d *cronDaemon) pollJobs(ctx context.Context) {
	l, err := d.ledgerFor(ledgerKey{})
	if err != nil {
		d.say("%v", message(err))
		return
	}
	jobs, err := l.Jobs(ctx, "")
	if err != nil {
		if ctx.Err() == nil {
			d.say("reading the jobs: %v", message(err))
		}
		return
	}
	byName := make(map[string]ledger.JobInfo, len(jobs))
	for _, j := range jobs {
		byName[j.Job] = j
	}
	for _, s := range d.entries {
		j, ok := byName[s.name]
		if !ok {
			continue
		}
		if j.Paused != d.paused[s.name] {
			if j.Paused {
				d.say("%s: paused: its occurrences are not run until sqllock runs resume %s", s.name, s.name)
			} else {
				d.say("%s: resumed", s.name)
			}
			d.paused[s.name] = j.Paused
		}
		if j.Pending != "" {
			d.logf("%s: manual occurrence %s pending", s.name, j.Pending)
			d.start(ctx, s, runPending)
		}
		if !j.Backfill.IsZero() {
			d.logf("%s: backfill %s asked for", s.name, j.Backfill)
			d.start(ctx, s, runBackfill)
		}
	}
}

// reload reads the file again: a good one replaces the table (the jobs
// of entries removed are paused, forgotten or kept, as --removed says), a
// bad one is refused and the last good table stays.
func (d *cronDaemon) reload(ctx context.Context) {
	entries, err := readCrontab(d.path)
	if err != nil {
		d.say("reload of %s refused, the last good table stays: %v", d.path, message(err))
		return
	}
	keep := map[string]bool{}
	for _, e := range entries {
		keep[e.name] = true
	}
	var gone []string
	for _, s := range d.entries {
		if !keep[s.name] {
			gone = append(gone, s.name)
		}
	}
	if err := d.install(entries); err != nil {
		d.say("reload of %s refused, the last good table stays: %v", d.path, message(err))
		return
	}
	d.say("reloaded %s: %s", d.path, count(len(entries), "entry", "entries"))
	l, err := d.ledgerFor(ledgerKey{})
	if err != nil {
		d.say("%v", message(err))
		return
	}
	for _, job := range gone {
		var err error
		switch d.removed {
		case "pause":
			_, err = l.Pause(ctx, job)
		case "forget":
			_, err = l.Forget(ctx, job, false)
		}
		switch {
		case errors.Is(err, ledger.ErrUnknownJob), d.removed == "keep":
			d.say("%s: removed from %s (no longer run here)", job, d.path)
		case err != nil:
			d.say("%s: removed from %s; --removed %s failed: %v", job, d.path, d.removed, message(err))
		case d.removed == "pause":
			d.say("%s: removed from %s: paused (sqllock runs resume %s)", job, d.path, job)
		default:
			d.say("%s: removed from %s: forgotten", job, d.path)
		}
		delete(d.paused, job)
	}
}

// drain ends the daemon: no new claim, s passed on to every running job
// (SIGKILL after --grace), and returns once every run has recorded its
// outcome. A further signal is passed on too.
func (d *cronDaemon) drain(stop context.CancelCauseFunc, s os.Signal, sigs <-chan os.Signal) error {
	d.mu.Lock()
	d.draining = true
	n := len(d.live)
	d.mu.Unlock()
	d.say("%s: draining: no new claim; %s in progress get %s (SIGKILL after --grace %v)", signalName(s), count(n, "run", "runs"), signalName(s), d.grace)
	stop(fmt.Errorf("sqllock cron got %s", signalName(s)))
	d.signalJobs(s)
	done := make(chan struct{})
	go func() {
		d.wg.Wait()
		close(done)
	}()
	for {
		select {
		case <-done:
			d.logf("drained")
			return nil
		case s := <-sigs:
			if s != syscall.SIGHUP {
				d.signalJobs(s)
			}
		}
	}
}

// signalJobs passes s on to every running job.
func (d *cronDaemon) signalJobs(s os.Signal) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c := range d.live {
		select {
		case c <- s:
		default:
		}
	}
}
