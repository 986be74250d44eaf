package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sqllock/sqllock"
)

// unlockFlags is the unlock command: it breaks the lock table's lease on
// NAME (sqllock.Table.BreakToken), after asking on a terminal: only the
// lease confirmed (or named by --token) is broken, never the next holder's.
// With --ask it breaks nothing: it asks the holder to release the lock
// (sqllock.Table.RequestRelease).
func unlockFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := dsnFlag(fs), schemaFlag(fs)
	force := boolFlag(fs, "f,force", "break the lock without asking; needed when standard input is not a terminal")
	var token int64
	fs.Int64Var(&token, "token", 0, "break the lease of this fencing token only (as locks and run print it); another holder's is left alone")
	polite := boolFlag(fs, "ask", "break nothing: ask the holder to release the lock (a sqllock run holder sends its command its --on-revoke signal, SIGTERM by default), at its next renewal")
	reason := stringFlag(fs, "reason", "", "with --ask, the `TEXT` the holder is told (default: who asked, from which host)")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 1 {
			return usageError{msg: "unlock takes one lock name"}
		}
		name := args[0]
		if err := sqllock.ValidateName(name); err != nil {
			return usageError{msg: err.Error()}
		}
		if *polite || isSet(fs, "reason") {
			return askRelease(ctx, fs, stdout, *dsn, *schema, name, *reason, *polite)
		}
		ask := !*force
		if ask && !isTerminal(os.Stdin) {
			return usageError{msg: "standard input is not a terminal: give --force to break the lock without asking"}
		}
		t, err := openReady(ctx, *dsn, *schema)
		if err != nil {
			return err
		}
		defer t.Close()
		locks, err := sqllock.NewTable(t.d, sqllock.TableOptions{})
		if err != nil {
			return err
		}
		if ask {
			li, ok, err := heldLock(ctx, locks, name)
			switch {
			case err != nil:
				return t.breakFailed(err)
			case !ok:
				return notHeld(name)
			case token != 0 && li.Token != token:
				return changedHands(name, li, token)
			}
			fmt.Fprintf(os.Stderr, "Lock %q is %s.\nBreak it? [y/N] ", name, describeHolder(li))
			if !confirmed(os.Stdin) {
				return exitError{code: exitFailure, err: fmt.Errorf("lock %q left alone", name)}
			}
			token = li.Token // the lease confirmed, not whoever holds the lock by now
		}
		var (
			li sqllock.LockInfo
			ok bool
		)
		if token != 0 {
			li, ok, err = locks.BreakToken(ctx, name, token)
		} else {
			li, ok, err = locks.Break(ctx, name)
		}
		switch {
		case err != nil:
			return t.breakFailed(err)
		case !ok && li.Token != 0:
			return changedHands(name, li, token)
		case !ok:
			return notHeld(name)
		}
		fmt.Fprintf(stdout, "broke lock %q, %s; the next holder gets a larger token\n", name, describeHolder(li))
		if li.Holds > 0 {
			fmt.Fprintf(os.Stderr, "sqllock: the old holder learns it at its next renewal (every third of its TTL; at the latest in %v, when its lease would have ended) and may run until then; a sqllock run or elect holder then stops its command: SIGTERM, and SIGKILL after its --grace (10s by default)\n",
				li.ExpiresIn.Round(time.Second))
		}
		return nil
	}
}

// askRelease is unlock --ask: it asks the holder of name to release it,
// for reason (a default that says who asked, if empty).
func askRelease(ctx context.Context, fs *flag.FlagSet, stdout io.Writer, dsn, schema, name, reason string, polite bool) error {
	switch {
	case !polite:
		return usageError{msg: "--reason goes with --ask: a break tells the holder nothing"}
	case isSet(fs, "f", "force") || isSet(fs, "token"):
		return usageError{msg: "--ask breaks nothing: it does not go with --force or --token"}
	}
	if reason == "" {
		reason = "asked by sqllock unlock --ask"
		if host, err := os.Hostname(); err == nil {
			reason += " on " + host
		}
	}
	if err := sqllock.ValidateValue(reason); err != nil {
		return usageError{msg: "--reason: " + message(err)}
	}
	t, err := openReady(ctx, dsn, schema)
	if err != nil {
		return err
	}
	defer t.Close()
	locks, err := sqllock.NewTable(t.d, sqllock.TableOptions{})
	if err != nil {
		return err
	}
	asked, err := locks.RequestRelease(ctx, name, reason)
	switch {
	case errors.Is(err, sqllock.ErrUnsupported):
		return usageError{msg: message(err) + ": use unlock without --ask to break the lock"}
	case err != nil:
		return t.breakFailed(err)
	case !asked:
		return notHeld(name)
	}
	holder := "its holder"
	if li, ok, err := locks.Value(ctx, name); err == nil && ok {
		holder = describeHolder(li)
	}
	fmt.Fprintf(stdout, "asked lock %q, %s, to release it (%q)\n", name, holder, reason)
	fmt.Fprintf(os.Stderr, "sqllock: the holder learns it at its next renewal (every third of its TTL); a sqllock run holder then sends its command the --on-revoke signal (SIGTERM by default, then SIGKILL after --grace). Nothing is broken: sqllock unlock without --ask breaks the lock\n")
	return nil
}

// changedHands is unlock's refusal when another lease than token's holds
// name: nothing was broken.
func changedHands(name string, li sqllock.LockInfo, token int64) error {
	return exitError{code: exitFailure, err: fmt.Errorf("lock %q is %s, not token %d: nothing was broken", name, describeHolder(li), token)}
}

// heldLock returns name's lease as the lock table lists it, if it is live.
func heldLock(ctx context.Context, locks *sqllock.Table, name string) (sqllock.LockInfo, bool, error) {
	infos, err := locks.List(ctx)
	if err != nil {
		return sqllock.LockInfo{}, false, err
	}
	for _, li := range infos {
		if li.Name == name && li.ExpiresIn > 0 {
			return li, true, nil
		}
	}
	return sqllock.LockInfo{}, false, nil
}

// describeHolder says who holds the lease li, or kept it past its release
// by a minimum hold, and until when (database clock, local time zone).
func describeHolder(li sqllock.LockInfo) string {
	left := li.ExpiresIn.Round(time.Second)
	until := li.ExpiresAt.Local().Format(time.DateTime)
	if li.Holds == 0 {
		return fmt.Sprintf("released by %q (token %d) but kept by its --min-hold until %s (%v left)", li.Owner, li.Token, until, left)
	}
	return fmt.Sprintf("held by %q (token %d) since %s, its lease renewed until %s (%v left)",
		li.Owner, li.Token, li.AcquiredAt.Local().Format(time.DateTime), until, left)
}

// confirmed reads one line from r and reports whether it says yes.
func confirmed(r io.Reader) bool {
	line, _ := bufio.NewReader(r).ReadString('\n')
	answer := strings.ToLower(strings.TrimSpace(line))
	return answer == "y" || answer == "yes"
}

// notHeld is unlock's outcome when nothing holds name (exit status 1).
func notHeld(name string) error {
	return exitError{code: exitFailure, err: fmt.Errorf("lock %q is not held", name)}
}

// breakFailed describes an error of the break for the operator: a database
// that cannot be reached makes it unavailable (exit status 69).
func (t *target) breakFailed(err error) error {
	if errors.Is(err, sqllock.ErrUnavailable) {
		return unavailable("%s: %s", t.dsn, message(err))
	}
	return t.fail(err)
}
