// Command sqllock runs commands under distributed locks kept in PostgreSQL,
// MySQL/MariaDB or an embedded SQLite file, and manages those locks.
//
//	sqllock run [flags] NAME -- COMMAND [ARGS...]   run COMMAND while holding lock NAME
//	sqllock migrate [--dsn DSN] up|down|version     manage the lock schema
//	sqllock locks [--dsn DSN] [--json]              list held locks
//	sqllock reap [--dsn DSN]                        delete expired lock rows once
//	sqllock demo [--dsn DSN] [--stock N] [--buyers N]  the overselling shop, with and without locks
//
// Run "sqllock help COMMAND" for a command's flags. The database comes from
// --dsn or SQLLOCK_DSN; by default it is an SQLite file in the user's state
// directory, which locks between processes of one machine.
//
// Exit status: the command's own for run; 64 for usage errors; 69 when the
// database cannot be reached or has no schema; 75 when the lock was not
// acquired; 76 when it was lost while the command ran; 1 for other errors.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit statuses, from BSD's sysexits.h where one fits.
const (
	exitFailure     = 1
	exitUsage       = 64 // EX_USAGE
	exitUnavailable = 69 // EX_UNAVAILABLE: database unreachable or schema missing
	exitNotAcquired = 75 // EX_TEMPFAIL: busy (--no-wait) or timed out
	exitLost        = 76 // the lock was lost while the command ran
)

// usageError is a mistake in the command line (exit status 64).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// exitError carries an exit status chosen by a command.
type exitError struct {
	code int
	err  error // nil when there is nothing to print
}

func (e exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e exitError) Unwrap() error { return e.err }

type command struct {
	name, args, summary string
	flags               func(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error
}

var commands []command

func init() {
	commands = []command{
		{"run", "[flags] NAME -- COMMAND [ARGS...]", "run COMMAND while holding the lock NAME", runFlags},
		{"migrate", "[--dsn DSN] up|down|version", "create, drop or show the lock schema", migrateFlags},
		{"locks", "[--dsn DSN] [--json]", "list the held locks", locksFlags},
		{"reap", "[--dsn DSN]", "delete the rows of expired and released locks once", reapFlags},
		{"demo", "[--dsn DSN] [--stock N] [--buyers N]", "a shop that oversells without a lock, and each strategy fixing it", demoFlags},
		{"bench", "[--dsn DSN] [--ops N] [--handoffs N]", "measure acquire+release and hand-off latency on a database", benchFlags},
	}
}

func main() {
	os.Exit(mainCode(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// mainCode runs the command line args and returns the exit status.
func mainCode(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdout, stderr)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ee):
		if ee.err != nil {
			fmt.Fprintln(stderr, "sqllock:", oneLine(ee.err.Error()))
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "sqllock:", oneLine(err.Error()))
	var (
		ue usageError
		ae unavailableError
	)
	switch {
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, `Run "sqllock help" for usage.`)
		return exitUsage
	case errors.As(err, &ae):
		return exitUnavailable
	}
	return exitFailure
}

// oneLine folds the lines of msg into one, so that every error is one line
// of output: the indented lines that go on from a line ending in ':' join it
// after a space, other indented lines are separated by "; ", and other line
// breaks become spaces. (pgx, for one, reports each address it tried on a
// line of its own.)
func oneLine(msg string) string {
	msg = strings.TrimRight(strings.ReplaceAll(msg, "\r\n", "\n"), "\n")
	return strings.NewReplacer(":\n\t", ": ", "\n\t", "; ", "\n", " ", "\r", " ").Replace(msg)
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return usageError{"no command given"}
	}
	name, args := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) == 0 {
			usage(stdout)
			return nil
		}
		c, ok := lookup(args[0])
		if !ok {
			return usageError{fmt.Sprintf("unknown command %q", args[0])}
		}
		fs := c.flagSet(stdout)
		fs.Usage()
		return nil
	}
	c, ok := lookup(name)
	if !ok {
		return usageError{fmt.Sprintf("unknown command %q", name)}
	}
	fs := c.flagSet(stderr)
	run := c.flags(fs)
	// run's command line ends sqllock's own after the lock name.
	maxPositional := -1
	if c.name == "run" {
		maxPositional = 1
	}
	pos, err := parseInterspersed(fs, args, maxPositional)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	return run(ctx, pos, stdout)
}

// parseInterspersed parses flags before, between and after positional
// arguments, as in "migrate up --dsn X". After max positional arguments
// (unless max < 0), or after "--", the rest is returned as it is.
func parseInterspersed(fs *flag.FlagSet, args []string, max int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(append(pos, "--"), rest...), nil
		}
		if max >= 0 && len(pos) == max {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func (c command) flagSet(out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: sqllock %s %s\n\n%s.\n", c.name, c.args, upperFirst(c.summary))
		if help := commandHelp[c.name]; help != "" {
			fmt.Fprintln(out)
			fmt.Fprint(out, help)
		}
		fmt.Fprintln(out, "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

func upperFirst(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

func usage(w io.Writer) {
	fmt.Fprint(w, `sqllock runs commands under distributed locks kept in PostgreSQL, MySQL/MariaDB
or an embedded SQLite file, and manages those locks.

Usage: sqllock COMMAND [flags] [args]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `
The database is --dsn, else $SQLLOCK_DSN, else the SQLite file
%s:
  postgres://user:pass@host:5432/db?sslmode=disable   (search_path picks the schema)
  mysql://user:pass@host:3306/db?param=value          (MySQL 8, MariaDB 10.6+)
  tidb://user:pass@host:4000/db?param=value           (TiDB)
  sqlite:/path/to/file.db                             (one machine, many processes)

Exit status: run exits with its command's status; 64 usage error; 69 database
unreachable or schema missing; 75 lock not acquired; 76 lock lost while the
command ran; 1 other errors.

Run "sqllock help COMMAND" for a command's flags.
`, strings.TrimPrefix(defaultDSN(), "sqlite:"))
}

// dsnFlag adds --dsn, defaulting to $SQLLOCK_DSN or the embedded file.
func dsnFlag(fs *flag.FlagSet) *string {
	def := os.Getenv("SQLLOCK_DSN")
	if def == "" {
		def = defaultDSN()
	}
	return fs.String("dsn", def, "database: postgres://..., mysql://..., tidb://..., or sqlite:PATH (default from $SQLLOCK_DSN, else the embedded file)")
}

var commandHelp = map[string]string{
	"run": `Holds the lock NAME, renewing it, while COMMAND runs. COMMAND gets
SQLLOCK_NAME and SQLLOCK_TOKEN (the fencing token: larger for every later
holder) in its environment, and sqllock's standard input and outputs.
SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to sqllock are passed on to COMMAND
(SIGINT only when sqllock is not on a terminal: there, Ctrl-C already reaches
COMMAND), and the lock is released when COMMAND exits.

If the lock is lost while COMMAND runs, COMMAND gets SIGTERM, then SIGKILL
after --grace, and sqllock exits 76.

Exit status: COMMAND's own (128+N if it died of signal N); 75 if the lock was
not acquired (--no-wait and busy, or --timeout passed); 76 if it was lost;
64 usage; 69 database unreachable or schema missing.

Only one of five machines runs the job, from crontab:
  */5 * * * * SQLLOCK_DSN=postgres://cron@db/ops sqllock run --no-wait report -- /usr/local/bin/report
`,
	"migrate": `up applies the embedded migrations (idempotent, safe to run from many
processes at once); down drops every sqllock table; version prints the
applied schema version.
`,
	"locks": `Lists held locks of the table and optimistic strategies: name, strategy,
owner, token, how long held, and time left on the lease (database clock).
Pessimistic locks are row locks of open transactions and are not listed.
`,
	"reap": `Runs one pass of the reaper: deletes the rows of expired and released
table and optimistic locks and of idle pessimistic locks, in batches, and
prints how many.
`,
	"bench": `Measures, for each strategy the database supports, uncontended
TryAcquire+Release on distinct names (1 and 8 clients: operations per
second, p50 and p99) and the hand-off latency from a release to the waiting
Acquire, on the database of --dsn. It leaves rows named sqllock-bench-*.
The ratios against raw SQL are measured by the Go benchmarks (BENCHMARKS.md).
`,
	"demo": `A shop has --stock hairdryers and --buyers buyers order at once. The demo
runs the sale without a lock (which can oversell), then with each strategy
the database supports, and prints what each sold, refused and left in stock.
It uses tables named sqllock_demo_* and drops them afterwards.
`,
}
