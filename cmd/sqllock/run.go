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
	dsn := dsnFlag(fs)
	strategy := fs.String("strategy", "table", "locking strategy: table, optimistic or pessimistic")
	ttl := fs.Duration("ttl", 30*time.Second, "lease length for table and optimistic locks; renewed every ttl/3 while the command runs")
	wait := fs.Bool("wait", true, "wait for the lock while another process holds it")
	noWait := fs.Bool("no-wait", false, "exit 75 at once if another process holds the lock")
	timeout := fs.Duration("timeout", 0, "wait at most this long for the lock, then exit 75 (0: no limit)")
	grace := fs.Duration("grace", 10*time.Second, "after a lost lock, how long the command has between SIGTERM and SIGKILL")
	minHold := fs.Duration("min-hold", 0, "keep the lock taken until this long after it was acquired, even if the command ends sooner (database clock; table and optimistic): a short job run by several replicas runs once")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) < 2 {
			return usageError{"run needs a lock name and a command: sqllock run NAME -- COMMAND [ARGS...]"}
		}
		name, cmdArgs := args[0], args[1:]
		if cmdArgs[0] == "--" {
			cmdArgs = cmdArgs[1:]
		}
		if len(cmdArgs) == 0 {
			return usageError{"run needs a command after the lock name"}
		}
		if err := sqllock.ValidateName(name); err != nil {
			return usageError{err.Error()}
		}
		if *noWait {
			*wait = false
		}
		if *timeout < 0 || *grace < 0 || *minHold < 0 {
			return usageError{"--timeout, --grace and --min-hold must not be negative"}
		}
		if *minHold > 0 && *strategy == "pessimistic" {
			return usageError{"--min-hold needs --strategy table or optimistic: a pessimistic lock ends with its transaction"}
		}
		r := &runner{name: name, argv: cmdArgs, strategy: *strategy, ttl: *ttl, wait: *wait, timeout: *timeout, grace: *grace, minHold: *minHold}
		return r.run(ctx, *dsn)
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
	minHold  time.Duration
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
		return nil, usageError{fmt.Sprintf("unknown strategy %q: want table, optimistic or pessimistic", strategy)}
	}
	if errors.Is(err, sqllock.ErrInvalidOptions) || errors.Is(err, sqllock.ErrUnsupported) {
		return nil, usageError{err.Error()}
	}
	return l, err
}

func (r *runner) run(ctx context.Context, dsn string) error {
	// Signals arriving before the command starts end the wait.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	t, err := openTarget(ctx, dsn)
	if err != nil {
		return err
	}
	defer t.Close()
	if err := t.ready(ctx); err != nil {
		return err
	}
	locker, err := newLocker(t.d, r.strategy, r.ttl, r.minHold)
	if err != nil {
		return err
	}
	lock, err := r.acquire(ctx, locker, sigs)
	if err != nil {
		return t.fail(err)
	}
	code, err := r.supervise(lock, sigs)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if rerr := lock.Release(rctx); rerr != nil && !errors.Is(rerr, sqllock.ErrLockLost) {
		fmt.Fprintf(os.Stderr, "sqllock: releasing %q: %v (the lease expires after %v)\n", r.name, rerr, r.ttl)
	}
	if err != nil {
		return err
	}
	if code != 0 {
		return exitError{code: code}
	}
	return nil
}

// acquire takes the lock as the flags say, ending the wait on a signal.
func (r *runner) acquire(ctx context.Context, locker sqllock.Locker, sigs <-chan os.Signal) (*sqllock.Lock, error) {
	if !r.wait {
		lock, err := locker.TryAcquire(ctx, r.name)
		if errors.Is(err, sqllock.ErrLocked) {
			return nil, exitError{exitNotAcquired, fmt.Errorf("lock %q is held by another process", r.name)}
		}
		return lock, err
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case s := <-sigs:
			cancel(fmt.Errorf("interrupted by %v while waiting for lock %q", s, r.name))
		case <-wctx.Done():
		}
	}()
	var lock *sqllock.Lock
	var err error
	if r.timeout > 0 {
		tctx, tcancel := context.WithTimeout(wctx, r.timeout)
		lock, err = locker.Acquire(tctx, r.name)
		tcancel()
	} else {
		lock, err = locker.Acquire(wctx, r.name)
	}
	switch {
	case err == nil:
		return lock, nil
	case ctx.Err() != nil:
		return nil, err
	case wctx.Err() != nil:
		return nil, exitError{exitNotAcquired, context.Cause(wctx)}
	case errors.Is(err, context.DeadlineExceeded):
		return nil, exitError{exitNotAcquired, fmt.Errorf("lock %q still held by another process after %v", r.name, r.timeout)}
	}
	return nil, err
}

// supervise runs the command while the lock is held and returns its exit
// status.
func (r *runner) supervise(lock *sqllock.Lock, sigs <-chan os.Signal) (int, error) {
	cmd := exec.Command(r.argv[0], r.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		"SQLLOCK_NAME="+r.name,
		"SQLLOCK_TOKEN="+strconv.FormatInt(lock.Token(), 10))
	if err := cmd.Start(); err != nil {
		return 0, exitError{126, fmt.Errorf("starting %s: %v", r.argv[0], err)}
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	onTerminal := isTerminal(os.Stdin)
	lost := lock.Done()
	var (
		killTimer *time.Timer
		killC     <-chan time.Time
		wasLost   bool
	)
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGINT && onTerminal {
				continue // the terminal sent it to the command as well
			}
			_ = cmd.Process.Signal(s)
		case <-lost:
			lost = nil
			if errors.Is(context.Cause(lock.Context()), sqllock.ErrLockLost) {
				wasLost = true
				fmt.Fprintf(os.Stderr, "sqllock: lock %q lost while %s ran; stopping it (SIGTERM, SIGKILL after %v)\n", r.name, r.argv[0], r.grace)
				_ = cmd.Process.Signal(syscall.SIGTERM)
				killTimer = time.NewTimer(r.grace)
				killC = killTimer.C
			}
		case <-killC:
			_ = cmd.Process.Kill()
		case err := <-exited:
			if killTimer != nil {
				killTimer.Stop()
			}
			if wasLost {
				return exitLost, nil
			}
			return exitStatus(err), nil
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
