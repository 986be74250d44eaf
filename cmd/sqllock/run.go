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
	"syscall"
	"time"

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
	conflict := intFlag(fs, "E,conflict-exit-code", exitNotAcquired, "exit status when the lock is not acquired (busy, or the wait timed out)")
	shell := stringFlag(fs, "c,command", "", "run `COMMAND` with /bin/sh -c instead of a command after NAME")
	shared := boolFlag(fs, "s,shared", "take the lock in shared mode: shared holders run side by side and exclude exclusive ones (needs --strategy pessimistic)")
	grace := durationFlag(fs, "grace", 10*time.Second, "after a lost lock, --max-time, a signal or sqllock's own death, the `SECONDS` (or duration) the command's process group has between SIGTERM and SIGKILL")
	maxTime := durationFlag(fs, "max-time", 0, "stop the command (SIGTERM, SIGKILL after --grace) once it ran for `SECONDS` (or a duration), and exit 124 (0: no limit)")
	minHold := durationFlag(fs, "min-hold", 0, "keep the lock taken until `SECONDS` (or a duration) after it was acquired, even if the command ends sooner (database clock; table and optimistic): a short job started by several replicas runs once")
	verbose := boolFlag(fs, "v,verbose", "say on stderr what is waited for, who holds it, and when the lock is taken and released")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) == 0 {
			return usageError{msg: "run needs a lock name and a command: sqllock run NAME -- COMMAND [ARGS...], or sqllock run NAME -c 'SHELL COMMAND'"}
		}
		name, cmdArgs := args[0], args[1:]
		if len(cmdArgs) > 0 && cmdArgs[0] == "--" {
			cmdArgs = cmdArgs[1:]
		}
		switch {
		case *shell != "" && len(cmdArgs) > 0:
			return usageError{msg: "-c gives the command: no command may follow the lock name as well"}
		case *shell != "":
			cmdArgs = []string{"/bin/sh", "-c", *shell}
		case isSet(fs, "c", "command"):
			return usageError{msg: "-c needs a shell command"}
		case len(cmdArgs) == 0:
			return usageError{msg: "run needs a command after the lock name (or -c 'SHELL COMMAND')"}
		}
		if err := sqllock.ValidateName(name); err != nil {
			return usageError{msg: err.Error()}
		}
		switch {
		case *noWait && isSet(fs, "w", "timeout"):
			return usageError{msg: "--no-wait and --timeout contradict each other: give one"}
		case *timeout < 0 || *grace < 0 || *maxTime < 0:
			return usageError{msg: "--timeout, --grace and --max-time must not be negative"}
		case *conflict < 0 || *conflict > 255:
			return usageError{msg: fmt.Sprintf("-E %d: an exit status is 0 to 255", *conflict)}
		case *shared && *strategy != "pessimistic":
			return usageError{msg: "--shared needs --strategy pessimistic (table and optimistic locks are exclusive)"}
		case *minHold < 0:
			return usageError{msg: "--min-hold must not be negative"}
		case *minHold > 0 && *strategy == "pessimistic":
			return usageError{msg: "--min-hold needs --strategy table or optimistic: a pessimistic lock ends with its transaction"}
		}
		r := &runner{name: name, argv: cmdArgs, strategy: *strategy, ttl: *ttl, wait: !*noWait,
			timeout: *timeout, grace: *grace, maxTime: *maxTime, conflict: *conflict, shared: *shared, verbose: *verbose, minHold: *minHold}
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
	shared   bool // pessimistic share mode
	verbose  bool
	minHold  time.Duration
	target   *target // the database, once open
}

// logf writes a --verbose line.
func (r *runner) logf(format string, args ...any) {
	if r.verbose {
		fmt.Fprintf(os.Stderr, "sqllock: "+format+"\n", args...)
	}
}

// newLocker builds the locker of a --strategy.
func newLocker(d dialect.Dialect, strategy string, ttl, minHold time.Duration) (sqllock.Locker, error) {
	var (
		l   sqllock.Locker
		err error
	)
	switch strategy {
	case "table":
		l, err = sqllock.NewTable(d, sqllock.Options{TTL: ttl, MinHold: minHold})
	case "optimistic":
		l, err = sqllock.NewOptimistic(d, sqllock.Options{TTL: ttl, MinHold: minHold})
	case "pessimistic":
		l, err = newPessimistic(d)
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

	t, err := openTarget(ctx, dsn, schema)
	if err != nil {
		return err
	}
	defer t.Close()
	if err := t.ready(ctx); err != nil {
		return err
	}
	r.target = t
	locker, err := newLocker(t.d, r.strategy, r.ttl, r.minHold)
	if err != nil {
		return err
	}
	start := time.Now()
	lock, err := r.acquire(ctx, t, locker, sigs)
	if err != nil {
		return t.fail(err)
	}
	r.logf("acquired lock %q (%s, token %d) after %v", r.name, r.strategy, lock.Token(), time.Since(start).Round(time.Millisecond))
	code, err := r.supervise(lock, sigs)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if rerr := lock.Release(rctx); rerr != nil && !errors.Is(rerr, sqllock.ErrLockLost) {
		fmt.Fprintf(os.Stderr, "sqllock: releasing %q: %v (the lease expires after %v)\n", r.name, message(rerr), r.ttl)
	} else {
		r.logf("released lock %q", r.name)
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
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case s := <-sigs:
			cancel(fmt.Errorf("interrupted by %v while waiting for lock %q", s, r.name))
		case <-sctx.Done():
		}
	}()
	wctx := sctx
	if r.timeout > 0 {
		var tcancel context.CancelFunc
		wctx, tcancel = context.WithTimeoutCause(wctx, r.timeout, errWaitTimedOut)
		defer tcancel()
	}
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

// try makes one acquisition: at once, or waiting.
func (r *runner) try(ctx context.Context, locker sqllock.Locker, wait bool) (*sqllock.Lock, error) {
	if p, ok := locker.(*sqllock.Pessimistic); ok && r.shared {
		if wait {
			return p.AcquireShared(ctx, r.name)
		}
		return p.TryAcquireShared(ctx, r.name)
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
		return exitError{r.conflict, context.Cause(wctx)}
	}
	return err
}

// holder describes who holds the name under strategy (all strategies if
// ""), for messages.
func (r *runner) holder(ctx context.Context, strategy string) string {
	t := r.target
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, _, err := listLocks(ctx, t.d)
	if err != nil {
		return "held by another process"
	}
	for _, row := range rows {
		if row.Name == r.name && (strategy == "" || row.Strategy == strategy) {
			if left, ok := row.expiresIn(); ok && (left <= 0 || row.Holds == 0) {
				continue
			}
			return row.describe()
		}
	}
	return "held by another process"
}

// heldElsewhere returns who holds the name under a strategy other than
// run's, or "" when no one does.
func (r *runner) heldElsewhere(ctx context.Context, t *target) (string, error) {
	if r.strategy != "table" {
		left, ok, err := t.d.Locks().Remaining(ctx, r.name)
		if err != nil {
			return "", err
		}
		if ok && left > 0 {
			return r.holder(ctx, "table"), nil
		}
	}
	if od, ok := t.d.(dialect.Optimistic); ok && r.strategy != "optimistic" {
		row, ok, err := od.Versions().Read(ctx, r.name)
		if err != nil {
			return "", err
		}
		if ok && row.Live && row.Holds > 0 {
			return r.holder(ctx, "optimistic"), nil
		}
	}
	if _, ok := t.d.(dialect.Pessimistic); ok && r.strategy != "pessimistic" {
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
	return "", nil
}

// supervise runs the command, under a supervisor that keeps its process
// group from outliving sqllock, while the lock is held, and returns its exit
// status.
func (r *runner) supervise(lock *sqllock.Lock, sigs <-chan os.Signal) (int, error) {
	j, err := startJob(r.argv, []string{
		"SQLLOCK_NAME=" + r.name,
		"SQLLOCK_TOKEN=" + strconv.FormatInt(lock.Token(), 10),
	}, r.grace)
	if err != nil {
		return 0, err
	}
	lost := lock.Done()
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
	// stop sends s to the job's group and SIGKILL after --grace.
	stop := func(s syscall.Signal) {
		j.signal(s)
		if killC == nil {
			killC = time.After(r.grace)
		}
	}
	for {
		select {
		case s := <-sigs:
			stop(s.(syscall.Signal))
		case <-lost:
			lost = nil
			if errors.Is(context.Cause(lock.Context()), sqllock.ErrLockLost) {
				wasLost = true
				fmt.Fprintf(os.Stderr, "sqllock: lock %q lost while %s ran; stopping it (SIGTERM to its process group, SIGKILL after %v)\n", r.name, r.argv[0], r.grace)
				stop(syscall.SIGTERM)
			}
		case <-maxC:
			tooLong = true
			fmt.Fprintf(os.Stderr, "sqllock: %s ran for --max-time %v; stopping it (SIGTERM to its process group, SIGKILL after %v)\n", r.argv[0], r.maxTime, r.grace)
			stop(syscall.SIGTERM)
		case <-killC:
			j.signal(syscall.SIGKILL)
		case err := <-j.exited:
			code := j.finish(err)
			switch {
			case wasLost:
				return exitLost, nil
			case tooLong:
				return exitTimedOut, nil
			}
			return code, nil
		}
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
