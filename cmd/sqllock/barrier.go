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
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/barrier"
)

// barrierFlags is "sqllock barrier -n N NAME -- COMMAND": enter the double
// barrier NAME of N members, run COMMAND once all N have entered, and
// leave once it is done, exiting once all N have left.
func barrierFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := dsnFlag(fs), schemaFlag(fs)
	n := intFlag(fs, "n,members", 0, "the `N` members of the barrier: COMMAND starts once N runs of NAME have entered, and sqllock exits once all N have left")
	ttl := durationFlag(fs, "ttl", 30*time.Second, "a member's lease in `SECONDS` or as a duration, renewed every ttl/3: a dead member is noticed within it")
	timeout := durationFlag(fs, "w,timeout", 0, "wait at most `SECONDS` (or a duration) for the members to enter, and as long for them to leave, then exit with status -E (0: no limit)")
	conflict := intFlag(fs, "E,conflict-exit-code", exitNotAcquired, "exit status when the members did not enter or leave within --timeout")
	shell := stringFlag(fs, "c,command", "", "run `COMMAND` with /bin/sh -c instead of a command after NAME")
	grace := durationFlag(fs, "grace", 10*time.Second, "after a signal or sqllock's own death, the `SECONDS` (or duration) the command's process group has between SIGTERM and SIGKILL")
	verbose := boolFlag(fs, "v,verbose", "say on stderr when the members have entered and when they have left")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		name, cmdArgs, err := commandLine(fs, "barrier", "barrier name", args, *shell)
		if err != nil {
			return err
		}
		switch {
		case *n < 1 || *n > barrier.MaxSize:
			return usageError{msg: fmt.Sprintf("barrier needs -n N, the number of members, from 1 to %d", barrier.MaxSize)}
		case *timeout < 0 || *grace < 0:
			return usageError{msg: "--timeout and --grace must not be negative"}
		case *conflict < 0 || *conflict > 255:
			return usageError{msg: fmt.Sprintf("-E %d: an exit status is 0 to 255", *conflict)}
		}
		r := &runner{name: name, argv: cmdArgs, ttl: *ttl, wait: true,
			timeout: *timeout, grace: *grace, conflict: *conflict, verbose: *verbose}
		return r.barrier(ctx, *dsn, *schema, *n)
	}
}

// barrier enters the barrier, runs the command, and leaves.
func (r *runner) barrier(ctx context.Context, dsn, schema string, n int) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	t, err := openReady(ctx, dsn, schema)
	if err != nil {
		return err
	}
	defer t.Close()
	r.target = t
	b, err := barrier.New(t.d, r.name, n, barrier.Options{TTL: r.ttl})
	if errors.Is(err, sqllock.ErrInvalidOptions) || errors.Is(err, sqllock.ErrUnsupported) {
		return usageError{msg: err.Error()}
	}
	if err != nil {
		return err
	}
	start := time.Now()
	r.logf("entering barrier %q of %d members", r.name, n)
	wctx, cancel := r.waitContext(ctx, sigs, "entering barrier")
	m, err := b.Enter(wctx)
	if err != nil {
		err = r.barrierError(ctx, wctx, err, fmt.Sprintf("fewer than %d members entered barrier %q within %v", n, r.name, r.timeout))
	}
	cancel()
	if err != nil {
		return t.fail(err)
	}
	r.logf("all %d members entered barrier %q after %v", n, r.name, time.Since(start).Round(time.Millisecond))
	// A member's command is not stopped when a member is lost: the
	// command is not exclusive. Leave reports the loss.
	code, err := r.supervise(context.WithoutCancel(ctx), func() time.Time { return time.Time{} }, 0,
		[]string{"SQLLOCK_MEMBERS=" + strconv.Itoa(n)}, sigs, nil)
	start = time.Now()
	lctx, cancel := r.waitContext(ctx, sigs, "leaving barrier")
	lerr := m.Leave(lctx)
	if lerr != nil {
		lerr = r.barrierError(ctx, lctx, lerr, fmt.Sprintf("not every member left barrier %q within %v", r.name, r.timeout))
	}
	cancel()
	switch {
	case err != nil:
		return err
	case lerr != nil:
		return lerr
	case code != 0:
		return exitError{code: code}
	}
	r.logf("all %d members left barrier %q after %v", n, r.name, time.Since(start).Round(time.Millisecond))
	return nil
}

// barrierError is the error of a wait in the barrier (Enter or Leave) on
// wctx, a wait context of ctx: timedOut when --timeout passed.
func (r *runner) barrierError(ctx, wctx context.Context, err error, timedOut string) error {
	var ie interruptedError
	switch {
	case ctx.Err() != nil:
		return err
	case errors.Is(context.Cause(wctx), errWaitTimedOut):
		return exitError{r.conflict, errors.New(timedOut)}
	case wctx.Err() != nil && errors.As(context.Cause(wctx), &ie):
		return exitError{ie.status(), ie}
	case errors.Is(err, barrier.ErrMemberLost):
		return exitError{exitLost, fmt.Errorf("barrier %q: a member's lease ended before it left (--ttl %v): %w", r.name, r.ttl, err)}
	case errors.Is(err, sqllock.ErrLockLost):
		return exitError{exitLost, fmt.Errorf("barrier %q: this member's lease ended (--ttl %v): %w", r.name, r.ttl, err)}
	case errors.Is(err, barrier.ErrSizeMismatch):
		return exitError{r.conflict, err}
	}
	return err
}
