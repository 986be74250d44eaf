package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sqllock/sqllock"
)

// electFlags is "sqllock elect NAME [--value V] -- COMMAND": campaign in
// the election NAME and run COMMAND while leader.
func electFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := dsnFlag(fs), schemaFlag(fs)
	value := fs.String("value", "", "the leader's `VALUE` that others read with sqllock leader (an address, say; default: host:pid)")
	ttl := durationFlag(fs, "ttl", 30*time.Second, "lease length in `SECONDS` or as a duration; renewed every ttl/3 while leader. A dead leader is replaced within it")
	timeout := durationFlag(fs, "w,timeout", 0, "campaign at most `SECONDS` (or a duration) to become leader, then exit with status -E (0: no limit)")
	conflict := intFlag(fs, "E,conflict-exit-code", exitNotAcquired, "exit status when not elected within --timeout")
	shell := stringFlag(fs, "c,command", "", "run `COMMAND` with /bin/sh -c instead of a command after NAME")
	grace := durationFlag(fs, "grace", 10*time.Second, "after the leadership is lost, a signal or sqllock's own death, the `SECONDS` (or duration) the command's process group has between SIGTERM and SIGKILL")
	verbose := boolFlag(fs, "v,verbose", "say on stderr when the campaign starts, when elected (with the term) and when resigned")
	onRevoke := stringFlag(fs, "on-revoke", "TERM", "the `SIGNAL` sent to the command's process group when someone asks the leader to resign (sqllock unlock --ask NAME): TERM, INT, HUP or QUIT, then SIGKILL after --grace; USR1 or USR2, and the command finishes when it likes; none: it is not told")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		name, cmdArgs, err := commandLine(fs, "elect", "election name", args, *shell)
		if err != nil {
			return err
		}
		switch {
		case *timeout < 0 || *grace < 0:
			return usageError{msg: "--timeout and --grace must not be negative"}
		case *conflict < 0 || *conflict > 255:
			return usageError{msg: fmt.Sprintf("-E %d: an exit status is 0 to 255", *conflict)}
		}
		v := *value
		if !isSet(fs, "value") {
			host, _ := os.Hostname()
			v = fmt.Sprintf("%s:%d", host, os.Getpid())
		}
		if err := sqllock.ValidateValue(v); err != nil {
			return usageError{msg: err.Error()}
		}
		revokeSig, err := revokeSignal(*onRevoke)
		if err != nil {
			return err
		}
		r := &runner{name: name, argv: cmdArgs, strategy: "table", ttl: *ttl, wait: true,
			timeout: *timeout, grace: *grace, conflict: *conflict, verbose: *verbose, onRevoke: revokeSig}
		return r.elect(ctx, *dsn, *schema, v)
	}
}

// elect campaigns, runs the command while leader, and resigns.
func (r *runner) elect(ctx context.Context, dsn, schema, value string) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	t, err := openReady(ctx, dsn, schema)
	if err != nil {
		return err
	}
	defer t.Close()
	r.target = t
	el, err := sqllock.NewElection(t.d, sqllock.LeaseOptions{TTL: r.ttl})
	if errors.Is(err, sqllock.ErrInvalidOptions) || errors.Is(err, sqllock.ErrUnsupported) {
		return usageError{msg: err.Error()}
	}
	if err != nil {
		return err
	}
	start := time.Now()
	lead, err := r.campaign(ctx, el, value, sigs)
	if err != nil {
		return t.fail(err)
	}
	r.logf("elected leader of %q (term %d, value %q) after %v", r.name, lead.Term(), value, time.Since(start).Round(time.Millisecond))
	return r.superviseThen(ctx, lead.Lock(), sigs, lead.Resign, "resigning", "resigned leadership of")
}

// campaign waits to be elected, ending the wait on a signal or after
// --timeout.
func (r *runner) campaign(ctx context.Context, el *sqllock.Election, value string, sigs <-chan os.Signal) (*sqllock.Leadership, error) {
	wctx, cancel := r.waitContext(ctx, sigs, "campaigning in")
	defer cancel()
	if info, err := el.Leader(wctx, r.name); err == nil {
		r.logf("campaigning in %q: %s leads (term %d)", r.name, info.Value, info.Term)
	}
	lead, err := el.Campaign(wctx, r.name, value)
	switch {
	case err == nil:
		return lead, nil
	case ctx.Err() != nil:
		return nil, err
	case errors.Is(context.Cause(wctx), errWaitTimedOut):
		msg := fmt.Sprintf("not elected leader of %q within %v", r.name, r.timeout)
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if info, err := el.Leader(lctx, r.name); err == nil && info.Term != 0 {
			msg += fmt.Sprintf(": %q leads (term %d, lease %v left)", info.Value, info.Term, info.ExpiresIn.Round(100*time.Millisecond))
		}
		return nil, exitError{r.conflict, errors.New(msg)}
	case wctx.Err() != nil:
		var ie interruptedError
		if errors.As(context.Cause(wctx), &ie) {
			return nil, exitError{ie.status(), ie}
		}
		return nil, exitError{r.conflict, context.Cause(wctx)}
	}
	return nil, err
}

// leaderFlags is "sqllock leader NAME": print the current leader.
func leaderFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := dsnFlag(fs), schemaFlag(fs)
	asJSON := fs.Bool("json", false, "print a JSON object per state: expiry in RFC 3339, expires_in in milliseconds")
	watch := fs.Bool("watch", false, "print every change of leader until interrupted")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 1 {
			return usageError{msg: "leader takes one election name"}
		}
		name := args[0]
		if err := sqllock.ValidateName(name); err != nil {
			return usageError{msg: err.Error()}
		}
		t, err := openReady(ctx, *dsn, *schema)
		if err != nil {
			return err
		}
		defer t.Close()
		el, err := sqllock.NewElection(t.d, sqllock.LeaseOptions{})
		if errors.Is(err, sqllock.ErrUnsupported) {
			return usageError{msg: err.Error()}
		}
		if err != nil {
			return err
		}
		if !*watch {
			info, err := el.Leader(ctx, name)
			if errors.Is(err, sqllock.ErrNoLeader) {
				printLeader(stdout, sqllock.LeaderInfo{Name: name}, *asJSON)
				return exitError{code: exitNoLeader}
			}
			if err != nil {
				return t.fail(err)
			}
			printLeader(stdout, info, *asJSON)
			return nil
		}
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		for info := range el.Observe(ctx, name) {
			printLeader(stdout, info, *asJSON)
		}
		return nil
	}
}

// exitNoLeader is sqllock leader's exit status when the election has no
// leader.
const exitNoLeader = 3

// leaderJSON is a leader as sqllock leader --json prints it.
type leaderJSON struct {
	Name        string `json:"name"`
	Leader      bool   `json:"leader"`
	Value       string `json:"value,omitempty"`
	Term        int64  `json:"term,omitempty"`
	Owner       string `json:"owner,omitempty"`
	ExpiresAt   string `json:"expires_at,omitempty"`
	ExpiresInMS int64  `json:"expires_in_ms,omitempty"`
}

// printLeader prints one state of an election: a line for people, or a
// JSON object.
func printLeader(w io.Writer, info sqllock.LeaderInfo, asJSON bool) {
	if asJSON {
		j := leaderJSON{Name: info.Name, Leader: info.Term != 0}
		if j.Leader {
			j.Value, j.Term, j.Owner = info.Value, info.Term, info.Owner
			j.ExpiresAt = info.ExpiresAt.Format(time.RFC3339Nano)
			j.ExpiresInMS = info.ExpiresIn.Milliseconds()
		}
		b, _ := json.Marshal(j)
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	if info.Term == 0 {
		fmt.Fprintf(w, "%s: no leader\n", info.Name)
		return
	}
	fmt.Fprintf(w, "%s: %s (term %d, expires in %v)\n", info.Name, info.Value, info.Term, info.ExpiresIn.Round(time.Millisecond))
}
