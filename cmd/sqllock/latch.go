package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/latch"
)

// latchFlags is "sqllock latch": the countdown latches of package latch
// from a shell. "create NAME COUNT" creates one, "count-down NAME" counts
// it down by one and prints what is left, "wait NAME" waits until it is 0,
// "delete NAME" deletes it, and "NAME" alone prints its count.
func latchFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := dsnFlag(fs), schemaFlag(fs)
	timeout := durationFlag(fs, "w,timeout", 0, "wait: wait at most `SECONDS` (or a duration) for the count to reach 0, then exit with status -E (0: no limit)")
	conflict := intFlag(fs, "E,conflict-exit-code", exitNotAcquired, "wait: exit status when the count did not reach 0 within --timeout")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		verb, name, count, err := latchArgs(args)
		if err != nil {
			return err
		}
		switch {
		case *timeout < 0:
			return usageError{msg: "--timeout must not be negative"}
		case *conflict < 0 || *conflict > 255:
			return usageError{msg: fmt.Sprintf("-E %d: an exit status is 0 to 255", *conflict)}
		case verb != "wait" && isSet(fs, "w", "timeout", "E", "conflict-exit-code"):
			return usageError{msg: "--timeout and -E are for latch wait"}
		}
		t, err := openReady(ctx, *dsn, *schema)
		if err != nil {
			return err
		}
		defer t.Close()
		l, err := latch.New(t.d, latch.Options{})
		if errors.Is(err, sqllock.ErrUnsupported) {
			return usageError{msg: err.Error()}
		}
		if err != nil {
			return err
		}
		if err := runLatch(ctx, l, verb, name, count, *timeout, *conflict, stdout); err != nil {
			return t.fail(latchError(name, err))
		}
		return nil
	}
}

// latchArgs parses latch's positional arguments: the verb ("" to show the
// count), the latch's name and, for create, its count.
func latchArgs(args []string) (verb, name string, count int, err error) {
	switch {
	case len(args) == 1:
		name = args[0]
	case len(args) == 2 && (args[0] == "count-down" || args[0] == "wait" || args[0] == "delete"):
		verb, name = args[0], args[1]
	case len(args) == 3 && args[0] == "create":
		verb, name = args[0], args[1]
		if count, err = strconv.Atoi(args[2]); err != nil || count < 1 || count > latch.MaxCount {
			return "", "", 0, usageError{msg: fmt.Sprintf("latch create %s %s: want a count from 1 to %d", name, args[2], latch.MaxCount)}
		}
	case len(args) > 0 && args[0] == "create":
		return "", "", 0, usageError{msg: "latch create takes a latch name and its count"}
	default:
		return "", "", 0, usageError{msg: "latch takes [create|count-down|wait|delete] and a latch name (create: and its count)"}
	}
	if err := sqllock.ValidateName(name); err != nil {
		return "", "", 0, usageError{msg: err.Error()}
	}
	return verb, name, count, nil
}

// runLatch does verb to the latch name.
func runLatch(ctx context.Context, l *latch.Latch, verb, name string, count int, timeout time.Duration, conflict int, stdout io.Writer) error {
	switch verb {
	case "create":
		return l.Create(ctx, name, count)
	case "count-down":
		left, err := l.CountDown(ctx, name)
		if err == nil {
			fmt.Fprintln(stdout, left)
		}
		return err
	case "delete":
		deleted, err := l.Delete(ctx, name)
		if err == nil && !deleted {
			err = latch.ErrNotFound
		}
		return err
	case "wait":
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if timeout > 0 {
			wctx, cancel = context.WithTimeoutCause(ctx, timeout, errWaitTimedOut)
		}
		defer cancel()
		err := l.Wait(wctx, name)
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(wctx), errWaitTimedOut) {
			left, cerr := l.Count(ctx, name)
			if cerr != nil {
				return exitError{conflict, fmt.Errorf("latch %q did not reach 0 within %v", name, timeout)}
			}
			return exitError{conflict, fmt.Errorf("latch %q did not reach 0 within %v: %d left", name, timeout, left)}
		}
		return err
	}
	left, err := l.Count(ctx, name)
	if err == nil {
		fmt.Fprintln(stdout, left)
	}
	return err
}

// latchError describes err of a command on the latch name for the
// operator.
func latchError(name string, err error) error {
	switch {
	case errors.Is(err, latch.ErrNotFound):
		return exitError{exitFailure, fmt.Errorf("no latch %q (sqllock latch create %s COUNT makes one)", name, name)}
	case errors.Is(err, latch.ErrCountMismatch):
		return exitError{exitFailure, err}
	}
	return err
}
