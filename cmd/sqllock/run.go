package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

// forwarded are the signals run passes on to its command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

func runFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := dsnFlag(fs), schemaFlag(fs)
	strategy := fs.String("strategy", "table", "locking `strategy`: table, optimistic or pessimistic")
	ttl := durationFlag(fs, "ttl", 30*time.Second, "lease length of table and optimistic locks, in `SECONDS` or as a duration; renewed every ttl/3 while the command runs")
	noWait := boolFlag(fs, "n,no-wait", "do not wait: exit at once (status -E) if another process holds the lock")
	timeout := durationFlag(fs, "w,timeout", 0, "wait at most `SECONDS` (or a duration such as 5m) for the lock, then exit with status -E (0: no limit)")
	conflict := intFlag(fs, "E,conflict-exit-code", exitNotAcquired, "exit status when the lock is not acquired (busy, or the wait timed out); with --every or --occurrence, when this replica does not run the occurrence (done, running elsewhere, no attempt left), which exits 0 unless -E is given")
	shell := stringFlag(fs, "c,command", "", "run `COMMAND` with /bin/sh -c instead of a command after NAME")
	shared := boolFlag(fs, "s,shared", "take the lock in shared mode: shared holders run side by side and exclude exclusive ones (with --strategy table, the read side of the read/write lock; or --strategy pessimistic)")
	exclusive := boolFlag(fs, "exclusive", "with --strategy table, take the write side of the read/write lock: it excludes every holder, and new --shared holders wait while it waits")
	grace := durationFlag(fs, "grace", 10*time.Second, "after a lost lock, --max-time, a signal or sqllock's own death, the `SECONDS` (or duration) the command's process group has between SIGTERM and SIGKILL")
	maxTime := durationFlag(fs, "max-time,max-runtime", 0, "stop the command (SIGTERM, SIGKILL after --grace) once it ran for `SECONDS` (or a duration), and exit 124 (0: no limit); with --every, --cron or --occurrence, the attempt is recorded failed, timed out")
	minHold := durationFlag(fs, "min-hold", 0, "keep the lock taken until `SECONDS` (or a duration) after it was acquired, even if the command ends sooner (database clock; table and optimistic): a short job started by several replicas runs once")
	maxPermits := maxFlag(fs)
	fair := boolFlag(fs, "fair", "serve the runs waiting for NAME in the order they started waiting (FIFO), a release waking the next one alone: with --strategy table or --max; every run of the name must give it")
	verbose := boolFlag(fs, "v,verbose", "say on stderr what is waited for, who holds it, and when the lock is taken and released")
	value := stringFlag(fs, "value", "", "with --strategy table, keep `TEXT` on the lock while the command runs (what runs, where, which version), for sqllock locks and the console to show; the lock's next holder never shows it")
	onRevoke := stringFlag(fs, "on-revoke", "TERM", "with --strategy table, the `SIGNAL` sent to the command's process group when someone asks for the lock (sqllock unlock --ask): TERM, INT, HUP or QUIT, then SIGKILL after --grace; USR1 or USR2, and the command finishes when it likes; none: it is not told")
	occ := occurrenceFlags(fs)
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		name, cmdArgs, err := commandLine(fs, "run", "lock name", args, *shell)
		if err != nil {
			return err
		}
		ledgerRun, err := occ.given(fs)
		if err != nil {
			return err
		}
		if ledgerRun {
			if err := occ.check(fs, *grace, *maxTime); err != nil {
				return err
			}
			code := 0
			if isSet(fs, "E", "conflict-exit-code") {
				code = *conflict
			}
			if code < 0 || code > 255 {
				return usageError{msg: fmt.Sprintf("-E %d: an exit status is 0 to 255", code)}
			}
			r := &runner{name: name, argv: cmdArgs, strategy: "table", ttl: *ttl, grace: *grace, maxTime: *maxTime,
				conflict: code, verbose: *verbose}
			return r.runOccurrence(ctx, *dsn, *schema, occ)
		}
		switch {
		case *noWait && isSet(fs, "w", "timeout"):
			return usageError{msg: "--no-wait and --timeout contradict each other: give one"}
		case *timeout < 0 || *grace < 0 || *maxTime < 0:
			return usageError{msg: "--timeout, --grace and --max-time must not be negative"}
		case *conflict < 0 || *conflict > 255:
			return usageError{msg: fmt.Sprintf("-E %d: an exit status is 0 to 255", *conflict)}
		case *minHold < 0:
			return usageError{msg: "--min-hold must not be negative"}
		case *minHold > 0 && *strategy == "pessimistic":
			return usageError{msg: "--min-hold needs --strategy table or optimistic: a pessimistic lock ends with its transaction"}
		}
		strat, err := checkMax(fs, *maxPermits, *strategy, *shared)
		if err != nil {
			return err
		}
		switch {
		case strat == strategySemaphore && *exclusive:
			return usageError{msg: "--max and --exclusive contradict each other: a semaphore's permits are all alike"}
		case strat != strategySemaphore:
			if strat, err = rwSide(*strategy, *shared, *exclusive); err != nil {
				return err
			}
		}
		if strat == strategyRWLock && *minHold > 0 {
			return usageError{msg: "--min-hold does not go with --shared or --exclusive: the read/write lock has no minimum hold"}
		}
		if *fair && strat != "table" && strat != strategySemaphore {
			return usageError{msg: "--fair needs --strategy table or --max: only locks and semaphores queue their waiters"}
		}
		if isSet(fs, "value") {
			if strat != "table" {
				return usageError{msg: "--value needs --strategy table (without --max, --shared or --exclusive): only the lock table's leases keep a value"}
			}
			if err := sqllock.ValidateValue(*value); err != nil {
				return usageError{msg: "--value: " + message(err)}
			}
		}
		revokeSig, err := revokeSignal(*onRevoke)
		if err != nil {
			return err
		}
		if isSet(fs, "on-revoke") && strat != "table" {
			return usageError{msg: "--on-revoke needs --strategy table (without --max, --shared or --exclusive): only the lock table's holders can be asked to release"}
		}
		r := &runner{name: name, argv: cmdArgs, strategy: strat, ttl: *ttl, wait: !*noWait,
			timeout: *timeout, grace: *grace, maxTime: *maxTime, conflict: *conflict, shared: *shared, verbose: *verbose, minHold: *minHold,
			max: *maxPermits, fair: *fair, value: *value, onRevoke: revokeSig}
		return r.run(ctx, *dsn, *schema)
	}
}

type runner struct {
	name     string
	argv     []string
	strategy string
	ttl      time.Duration
	wait     bool
	timeout  time.Duration
	grace    time.Duration
	maxTime  time.Duration
	conflict int  // exit status when not acquired
	shared   bool // pessimistic share mode, or the read side of the read/write lock
	verbose  bool
	minHold  time.Duration
	max      int            // --max: permits of a semaphore; 0 for a lock
	fair     bool           // --fair: FIFO order among waiters
	value    string         // --value: kept on the lock while the command runs
	onRevoke syscall.Signal // --on-revoke: sent when the lock's release is requested; 0: none
	target   *target        // the database, once open
}

// logf writes a --verbose line.
func (r *runner) logf(format string, args ...any) {
	if r.verbose {
		fmt.Fprintf(os.Stderr, "sqllock: "+format+"\n", args...)
	}
}

// newLocker builds the locker of a --strategy, with opts (TTL, MinHold
// and Fair are used where the strategy has them; run refuses --fair for
// the others).
func newLocker(d dialect.Dialect, strategy string, opts sqllock.TableOptions) (sqllock.Locker, error) {
	var (
		l   sqllock.Locker
		err error
	)
	switch strategy {
	case "table":
		l, err = sqllock.NewTable(d, opts)
	case "optimistic":
		l, err = sqllock.NewOptimistic(d, sqllock.OptimisticOptions{LeaseOptions: sqllock.LeaseOptions{TTL: opts.TTL}, MinHold: opts.MinHold})
	case "pessimistic":
		l, err = newPessimistic(d)
	case strategyRWLock:
		l, err = newRWLock(d, sqllock.LeaseOptions{TTL: opts.TTL})
	default:
		return nil, usageError{msg: fmt.Sprintf("unknown strategy %q: want table, optimistic or pessimistic", strategy)}
	}
	if errors.Is(err, sqllock.ErrInvalidOptions) || errors.Is(err, sqllock.ErrUnsupported) {
		return nil, usageError{msg: err.Error()}
	}
	return l, err
}

func (r *runner) run(ctx context.Context, dsn, schema string) error {
	// Signals arriving before the command starts end the wait.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	t, err := openReady(ctx, dsn, schema)
	if err != nil {
		return err
	}
	defer t.Close()
	r.target = t
	var locker sqllock.Locker
	opts := sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: r.ttl}, MinHold: r.minHold, Fair: r.fair}
	if r.max > 0 {
		locker, err = newSemaphore(t.d, r.max, opts)
	} else {
		locker, err = newLocker(t.d, r.strategy, opts)
	}
	if err != nil {
		return err
	}
	start := time.Now()
	lock, err := r.acquire(ctx, t, locker, sigs)
	if err != nil {
		return t.fail(err)
	}
	r.logf("acquired lock %q (%s, token %d) after %v", r.name, r.strategy, lock.Token(), time.Since(start).Round(time.Millisecond))
	if r.value != "" {
		if err := lock.SetValue(ctx, r.value); err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			return t.fail(errors.Join(fmt.Errorf("setting the value of lock %q: %w", r.name, err), lock.Release(rctx)))
		}
	}
	return r.superviseThen(ctx, lock, sigs, lock.Release, "releasing", "released lock")
}

// revokeSignals are the signals --on-revoke takes, by name; none is 0.
var revokeSignals = map[string]syscall.Signal{"NONE": 0, "TERM": syscall.SIGTERM, "INT": syscall.SIGINT,
	"HUP": syscall.SIGHUP, "QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2}

// revokeSignal parses --on-revoke: a signal's name, with or without SIG,
// in any case, or none (0).
func revokeSignal(name string) (syscall.Signal, error) {
	if s, ok := revokeSignals[strings.TrimPrefix(strings.ToUpper(name), "SIG")]; ok {
		return s, nil
	}
	return 0, usageError{msg: fmt.Sprintf("--on-revoke %q: want TERM, INT, HUP, QUIT, USR1, USR2 or none", name)}
}

// superviseThen runs the command while lock is held (supervise), then gives
// the lock back with release, reporting a failure to give it back (doing,
// such as "releasing") on stderr and success (done) in verbose mode, and
// returns the command's outcome.
func (r *runner) superviseThen(ctx context.Context, lock *sqllock.Lock, sigs <-chan os.Signal, release func(context.Context) error, doing, done string) error {
	code, err := r.supervise(lock.Context(), lock.TrustedUntil, lock.Token(), nil, sigs, lock)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if rerr := release(rctx); rerr != nil && !errors.Is(rerr, sqllock.ErrLockLost) {
		fmt.Fprintf(os.Stderr, "sqllock: %s %q: %v (the lease expires after %v)\n", doing, r.name, message(rerr), r.ttl)
	} else {
		r.logf("%s %q", done, r.name)
	}
	if err != nil {
		return err
	}
	if code != 0 {
		return exitError{code: code}
	}
	return nil
}

// errWaitTimedOut ends a wait that ran into --timeout.
var errWaitTimedOut = errors.New("timed out")

// acquire takes the lock as the flags say, ending the wait on a signal or
// after --timeout. A name is one lock across strategies: a lock taken while
// the name is held under another strategy is given back, and the name is
// busy.
func (r *runner) acquire(ctx context.Context, t *target, locker sqllock.Locker, sigs <-chan os.Signal) (*sqllock.Lock, error) {
	wctx, cancel := r.waitContext(ctx, sigs, "waiting for lock")
	defer cancel()
	pause := 100 * time.Millisecond
	for said := ""; ; {
		lock, err := r.try(wctx, locker, false)
		if errors.Is(err, sqllock.ErrLocked) {
			holder := r.holder(wctx, r.strategy)
			if !r.wait {
				return nil, exitError{r.conflict, fmt.Errorf("lock %q is busy: %s", r.name, holder)}
			}
			if said != holder {
				r.logf("waiting for lock %q: %s", r.name, holder)
				said = holder
			}
			lock, err = r.try(wctx, locker, true)
		}
		if err != nil {
			return nil, r.waitError(ctx, wctx, err)
		}
		other, err := r.heldElsewhere(wctx, t)
		if err == nil && other == "" {
			return lock, nil
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = lock.Release(rctx)
		rcancel()
		if err != nil {
			return nil, r.waitError(ctx, wctx, err)
		}
		if !r.wait {
			return nil, exitError{r.conflict, fmt.Errorf("lock %q is busy: %s", r.name, other)}
		}
		if said != other {
			r.logf("waiting for lock %q: %s", r.name, other)
			said = other
		}
		select {
		case <-time.After(pause):
			pause = min(2*pause, 2*time.Second)
		case <-wctx.Done():
			return nil, r.waitError(ctx, wctx, wctx.Err())
		}
	}
}

// waitContext returns the context of a wait: ctx, ended with a cause
// naming the signal when one arrives on sigs (doing is what was
// interrupted, e.g. "waiting for lock"), and with cause errWaitTimedOut
// after --timeout. cancel releases its resources.
func (r *runner) waitContext(ctx context.Context, sigs <-chan os.Signal, doing string) (wctx context.Context, cancel func()) {
	sctx, scancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case s := <-sigs:
			scancel(interruptedError{s, fmt.Sprintf("interrupted by %s while %s %q", signalName(s), doing, r.name)})
		case <-sctx.Done():
		}
	}()
	if r.timeout <= 0 {
		return sctx, func() { scancel(nil) }
	}
	wctx, tcancel := context.WithTimeoutCause(sctx, r.timeout, errWaitTimedOut)
	return wctx, func() { tcancel(); scancel(nil) }
}

// try makes one acquisition: at once, or waiting.
func (r *runner) try(ctx context.Context, locker sqllock.Locker, wait bool) (*sqllock.Lock, error) {
	if p, ok := locker.(*sqllock.Pessimistic); ok && r.shared {
		if wait {
			return p.AcquireShared(ctx, r.name)
		}
		return p.TryAcquireShared(ctx, r.name)
	}
	if rw, ok := locker.(*sqllock.RWLock); ok && r.shared {
		if wait {
			return rw.AcquireShared(ctx, r.name)
		}
		return rw.TryAcquireShared(ctx, r.name)
	}
	if wait {
		return locker.Acquire(ctx, r.name)
	}
	return locker.TryAcquire(ctx, r.name)
}

// waitError turns an error that ended a wait into run's answer.
func (r *runner) waitError(ctx, wctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return err
	case errors.Is(context.Cause(wctx), errWaitTimedOut):
		return exitError{r.conflict, fmt.Errorf("lock %q still busy after %v: %s", r.name, r.timeout, r.holder(context.WithoutCancel(ctx), ""))}
	case wctx.Err() != nil:
		var ie interruptedError
		if errors.As(context.Cause(wctx), &ie) {
			return exitError{ie.status(), ie}
		}
		return exitError{r.conflict, context.Cause(wctx)}
	}
	return err
}

// interruptedError is a wait ended by a signal: exit status 128 + its
// number, as a shell reports a command the signal killed (flock too).
type interruptedError struct {
	sig os.Signal
	msg string
}

func (e interruptedError) Error() string { return e.msg }

// signalName names s as kill(1) and the shells do: SIGINT, SIGTERM.
func signalName(s os.Signal) string {
	if n, ok := s.(syscall.Signal); ok {
		if name := unix.SignalName(n); name != "" {
			return name
		}
	}
	return s.String()
}

func (e interruptedError) status() int {
	if s, ok := e.sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitFailure
}

// holder describes who holds the name under strategy (all strategies if
// ""), for messages.
func (r *runner) holder(ctx context.Context, strategy string) string {
	t := r.target
	if r.max > 0 {
		return semaphoreHolders(ctx, t, r.name, r.max)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, _, err := listLocks(ctx, t)
	if err != nil {
		return "held by another process"
	}
	for _, row := range rows {
		if row.Name == r.name && ((strategy == "" && row.Strategy != strategySemaphore) || row.Strategy == strategy || (strategy == "table" && row.isTable())) {
			if row.live() {
				return row.describe()
			}
		}
	}
	return "held by another process"
}

// heldElsewhere returns who holds the name under a strategy other than
// run's, or "" when no one does.
func (r *runner) heldElsewhere(ctx context.Context, t *target) (string, error) {
	if r.max > 0 { // semaphore names are apart from lock names
		return "", nil
	}
	rows, _, err := listLocks(ctx, t)
	if err != nil {
		return "", err
	}
	for _, row := range rows {
		switch {
		case row.Name != r.name || !row.live():
		case row.isTable() && r.strategy != "table":
			return row.describe(), nil
		case row.Strategy == "optimistic" && row.Holds > 0 && r.strategy != "optimistic":
			return row.describe(), nil
		}
	}
	if t.d.Catalogue().Pessimistic != nil && r.strategy != "pessimistic" {
		p, err := newPessimistic(t.d)
		if err != nil {
			return "", err
		}
		probe, err := p.TryAcquire(ctx, r.name)
		switch {
		case errors.Is(err, sqllock.ErrLocked):
			return r.holder(ctx, "pessimistic"), nil
		case err != nil:
			return "", err
		}
		if err := probe.Release(ctx); err != nil {
			return "", err
		}
	}
	if r.strategy != strategyRWLock {
		held, err := r.heldAsRWLock(ctx, t)
		if err != nil || held {
			return "held as a read/write lock by another process", err
		}
	}
	return "", nil
}

// supervise runs the command, under a supervisor that keeps its process
// group from outliving sqllock, while the lease of held (a lock's context,
// ended with cause sqllock.ErrLockLost when it is lost) lasts, and returns
// its exit status. trusted tells the lease's trust deadline (the zero time
// for a lock without a lease): the supervisor hears of every move, and
// stops the job by that deadline on its own if none comes, so that a
// stopped or starved sqllock cannot leave it running unlocked. The
// command's environment gets SQLLOCK_NAME, SQLLOCK_TOKEN (token) and env.
// When someone asks for lock (Lock.Revoked; nil: nobody can), the job is
// sent the --on-revoke signal.
func (r *runner) supervise(held context.Context, trusted func() time.Time, token int64, env []string, sigs <-chan os.Signal, lock *sqllock.Lock) (int, error) {
	lead := leadFor(r.grace, r.ttl)
	j, err := startJob(r.argv, append([]string{
		"SQLLOCK_NAME=" + r.name,
		"SQLLOCK_TOKEN=" + strconv.FormatInt(token, 10),
	}, env...), r.grace, lead, trusted())
	if err != nil {
		return 0, err
	}
	lost := held.Done()
	var revoked <-chan struct{}
	if lock != nil {
		revoked = lock.Revoked()
	}
	var (
		killC   <-chan time.Time
		maxC    <-chan time.Time
		wasLost bool
		tooLong bool
	)
	if r.maxTime > 0 {
		t := time.NewTimer(r.maxTime)
		defer t.Stop()
		maxC = t.C
	}
	// Renewals move the trust deadline every TTL/3: look for a move ten
	// times as often.
	beat := time.NewTicker(min(max(r.ttl/30, 10*time.Millisecond), time.Second))
	defer beat.Stop()
	// stop sends s to the job's group and SIGKILL after --grace.
	stop := func(s syscall.Signal) {
		j.signal(s)
		if killC == nil {
			killC = time.After(r.grace)
		}
	}
	isLost := func() bool {
		return held.Err() != nil && errors.Is(context.Cause(held), sqllock.ErrLockLost)
	}
	for {
		select {
		case s := <-sigs:
			stop(s.(syscall.Signal))
		case <-beat.C:
			j.trust(trusted())
		case <-lost:
			lost = nil
			if isLost() {
				wasLost = true
				kill := r.grace
				if left := time.Until(j.until); !j.until.IsZero() && left < kill {
					kill = max(left, 0).Round(time.Millisecond)
				}
				if kill > 0 {
					fmt.Fprintf(os.Stderr, "sqllock: lock %q lost while %s ran; stopping it (SIGTERM to its process group, SIGKILL after %v)\n", r.name, r.argv[0], kill)
				} else {
					fmt.Fprintf(os.Stderr, "sqllock: lock %q lost while %s ran; its supervisor stopped it when the lease's trust window ended\n", r.name, r.argv[0])
				}
				stop(syscall.SIGTERM)
			}
		case <-revoked:
			revoked = nil
			r.revoke(j, lock.RevokeReason(), stop)
		case <-maxC:
			tooLong = true
			fmt.Fprintf(os.Stderr, "sqllock: %s ran for --max-time %v; stopping it (SIGTERM to its process group, SIGKILL after %v)\n", r.argv[0], r.maxTime, r.grace)
			stop(syscall.SIGTERM)
		case <-killC:
			j.signal(syscall.SIGKILL)
		case err := <-j.exited:
			code := j.finish(err)
			switch {
			case wasLost || code == exitLost:
				return exitLost, nil
			case isLost():
				// Lost while sqllock could not tell (stopped, say): the
				// supervisor stopped the job by the trust deadline, or
				// it ended before; either way the lock did not last.
				fmt.Fprintf(os.Stderr, "sqllock: lock %q lost while %s ran\n", r.name, r.argv[0])
				return exitLost, nil
			case tooLong:
				return exitTimedOut, nil
			}
			return code, nil
		}
	}
}

// revoke tells the job j that its lock's release was requested, for
// reason: the --on-revoke signal, through stop (SIGKILL after --grace)
// for a signal that ends a process, directly for one that asks it to
// finish (USR1, USR2).
func (r *runner) revoke(j *job, reason string, stop func(syscall.Signal)) {
	var sig string
	for name, s := range revokeSignals {
		if s == r.onRevoke {
			sig = "SIG" + name
		}
	}
	switch r.onRevoke {
	case 0:
		fmt.Fprintf(os.Stderr, "sqllock: release of lock %q requested (%s); --on-revoke none: %s is not told\n", r.name, reason, r.argv[0])
	case syscall.SIGUSR1, syscall.SIGUSR2:
		fmt.Fprintf(os.Stderr, "sqllock: release of lock %q requested (%s); sending %s to %s's process group\n", r.name, reason, sig, r.argv[0])
		j.signal(r.onRevoke)
	default:
		fmt.Fprintf(os.Stderr, "sqllock: release of lock %q requested (%s); stopping %s (%s to its process group, SIGKILL after %v)\n", r.name, reason, r.argv[0], sig, r.grace)
		stop(r.onRevoke)
	}
}

// exitStatus is the shell's view of how a command ended.
func exitStatus(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return exitFailure
		}
		return 0
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// article is the indefinite article of noun: "an" before a vowel.
func article(noun string) string {
	if noun != "" && strings.ContainsRune("aeiou", rune(noun[0])) {
		return "an"
	}
	return "a"
}

// isFlag reports whether arg names one of fs's flags (-n, --ttl=5).
func isFlag(fs *flag.FlagSet, arg string) bool {
	name, ok := strings.CutPrefix(arg, "-")
	if !ok {
		return false
	}
	name = strings.TrimPrefix(name, "-")
	name, _, _ = strings.Cut(name, "=")
	return name != "" && fs.Lookup(name) != nil
}

// commandLine reads the arguments of run and elect, NAME [--] [COMMAND
// [ARGS...]], or NAME and -c 'SHELL COMMAND', and validates NAME. verb is
// the subcommand, what names NAME in messages.
func commandLine(fs *flag.FlagSet, verb, what string, args []string, shell string) (string, []string, error) {
	if len(args) == 0 {
		return "", nil, usageError{msg: fmt.Sprintf("%s needs %s %s and a command: sqllock %s NAME -- COMMAND [ARGS...], or sqllock %s NAME -c 'SHELL COMMAND'", verb, article(what), what, verb, verb)}
	}
	name, argv := args[0], args[1:]
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	} else if len(argv) > 0 && isFlag(fs, argv[0]) {
		return "", nil, usageError{msg: fmt.Sprintf("%s after the %s: options go before it (sqllock %s [OPTIONS] NAME COMMAND); a command that starts with - goes after --", argv[0], what, verb)}
	}
	switch {
	case shell != "" && len(argv) > 0:
		return "", nil, usageError{msg: "-c gives the command: no command may follow the " + what + " as well"}
	case shell != "":
		argv = []string{"/bin/sh", "-c", shell}
	case isSet(fs, "c", "command"):
		return "", nil, usageError{msg: "-c needs a shell command"}
	case len(argv) == 0:
		return "", nil, usageError{msg: fmt.Sprintf("%s needs a command after the %s (or -c 'SHELL COMMAND')", verb, what)}
	}
	if err := sqllock.ValidateName(name); err != nil {
		return "", nil, usageError{msg: err.Error()}
	}
	return name, argv, nil
}
