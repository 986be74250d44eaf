// Command sqllock runs commands under distributed locks kept in PostgreSQL,
// MySQL/MariaDB or an embedded SQLite file, and manages those locks: a
// distributed flock(1).
//
//	sqllock run [flags] NAME [--] COMMAND [ARGS...]  run COMMAND while holding lock NAME
//	sqllock run [flags] -c 'SHELL COMMAND' NAME      the same, through /bin/sh -c
//	sqllock run --every 1h [flags] NAME -- COMMAND   run COMMAND once per hour across replicas
//	sqllock runs [--json] [--watch SECONDS] [JOB]    recent runs of the run ledger, and missed ones
//	sqllock cron [--check] FILE                      the crontab daemon: FILE's entries once per occurrence
//	sqllock elect [flags] NAME [--] COMMAND [ARGS...] run COMMAND while elected leader of NAME
//	sqllock leader [--json] [--watch] NAME           print the leader of the election NAME
//	sqllock migrate [flags] up|down|version|force V  manage the lock schema
//	sqllock locks [--json] [--watch SECONDS]         list held locks of every strategy
//	sqllock unlock [--force] NAME                    break the lock NAME, fenced
//	sqllock reap [--batch N]                         delete expired lock rows once
//	sqllock demo [--stock N] [--buyers N]            the overselling shop, with and without locks
//	sqllock bench [--ops N] [--handoffs N]           latency and hand-off on your database
//	sqllock serve [--listen 127.0.0.1:7466]           the console: web pages and /metrics
//	sqllock doctor                                   check the database as sqllock uses it
//	sqllock completion bash|zsh|fish                 the shell's completion script
//	sqllock man                                      this manual page, in roff
//
// Run "sqllock help COMMAND" for a command's flags. The database comes from
// --dsn or SQLLOCK_DSN; with neither, commands refuse to run, except demo
// and bench, which use an SQLite file in the user's state directory.
//
// Exit status: the command's own for run and elect (run --every and
// --occurrence: 0, or -E, when another replica ran or runs the
// occurrence); 3 for leader when the
// election has no leader; 2 for doctor when a check found a problem; 64
// for usage errors; 69 when the
// database cannot be reached, has no schema or a dirty one; 75 (run -E)
// when the lock was not acquired (elect: not elected within --timeout); 76
// when it (elect: the leadership) was lost while the command ran;
// 124 after run --max-time; 1 for other errors.
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
	exitUsage       = 64  // EX_USAGE
	exitUnavailable = 69  // EX_UNAVAILABLE: database unreachable or schema missing
	exitNotAcquired = 75  // EX_TEMPFAIL: busy (--no-wait) or timed out
	exitLost        = 76  // the lock was lost while the command ran
	exitTimedOut    = 124 // run --max-time passed, as timeout(1) exits
)

// usageError is a mistake in the command line (exit status 64). cmd, if
// set, is the command whose help is pointed to.
type usageError struct{ msg, cmd string }

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
		{"run", "[flags] NAME [--] COMMAND [ARGS...] | [flags] -c 'SHELL COMMAND' NAME", "run COMMAND while holding the lock NAME", runFlags},
		{"elect", "[flags] [--value V] NAME [--] COMMAND [ARGS...]", "run COMMAND while elected leader of NAME", electFlags},
		{"barrier", "[flags] -n N NAME [--] COMMAND [ARGS...]", "run COMMAND once N runs of NAME have entered the barrier; exit once all N have left", barrierFlags},
		{"runs", "[--dsn DSN] [--json] [--watch SECONDS] [--limit N] [--missed-after SECONDS] [--attempts] [forget|pause|resume|trigger] [JOB] | backfill JOB --from TIME --to TIME [--] COMMAND", "list the recent runs of sqllock run --every, --cron and --occurrence, and the missed ones; forget, pause, resume, trigger or backfill a job", runsFlags},
		{"cron", "[--dsn DSN] [--check] [--grace SECONDS] [--removed pause|forget|keep] [-v] FILE", "the crontab daemon: run FILE's entries once per occurrence across every replica that runs it", cronFlags},
		{"leader", "[--dsn DSN] [--json] [--watch] NAME", "print the leader of the election NAME", leaderFlags},
		{"migrate", "[flags] up|down|version|force VERSION", "create, drop, show or repair the lock schema", migrateFlags},
		{"locks", "[--dsn DSN] [--json] [--watch SECONDS]", "list the held locks of every strategy", locksFlags},
		{"unlock", "[--dsn DSN] [--force] NAME", "break the lock NAME: end its holder's lease now, fenced", unlockFlags},
		{"latch", "[--dsn DSN] [create NAME COUNT | count-down NAME | wait [-w SECONDS] NAME | delete NAME | NAME]", "create, count down, wait for, delete or show the countdown latch NAME", latchFlags},
		{"semaphore", "[--dsn DSN] [--set-limit N] NAME", "show the limit, holders and free permits of the semaphore NAME (run --max); set its limit live", semaphoreFlags},
		{"reap", "[--dsn DSN] [--runs-older-than AGE]", "delete the rows of expired and released locks once", reapFlags},
		{"demo", "[--dsn DSN] [--stock N] [--buyers N] [--conns N]", "a shop that oversells without a lock, and each strategy fixing it", demoFlags},
		{"bench", "[--dsn DSN] [--ops N] [--handoffs N]", "measure acquire+release and hand-off latency on a database", benchFlags},
		{"serve", "[--dsn DSN] [--listen ADDRESS] [--interval SECONDS] [--allow-writes --token-file FILE]", "the operator's console: web pages of the locks, elections, jobs and doctor, live, and /metrics", serveFlags},
		{"doctor", "[--dsn DSN] [--timeout SECONDS]", "check the database as sqllock uses it: server, pooler, schema, clock, wake-ups", doctorFlags},
		{"completion", "bash|zsh|fish", "print a script that completes sqllock's commands and flags in the shell", completionFlags},
		{"man", "", "print the manual page sqllock(1), in roff", manFlags},
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == superviseCommand {
		os.Exit(superviseMain(os.Args[2:]))
	}
	os.Exit(mainCode(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// mainCode runs the command line args and returns the exit status. Every
// error is one line on stderr with one "sqllock: " prefix; a usage error is
// followed by where to find help.
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
			fmt.Fprintln(stderr, "sqllock:", message(ee.err))
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "sqllock:", message(err))
	var (
		ue usageError
		ae unavailableError
	)
	switch {
	case errors.As(err, &ue):
		help := "sqllock help"
		if ue.cmd != "" {
			help += " " + ue.cmd
		}
		fmt.Fprintf(stderr, "Run %q for usage.\n", help)
		return exitUsage
	case errors.As(err, &ae):
		return exitUnavailable
	}
	return exitFailure
}

// message is err's text on one line, without the "sqllock: " prefixes the
// library's errors carry: mainCode prints one of its own.
func message(err error) string {
	msg := oneLine(err.Error())
	msg = strings.ReplaceAll(msg, ": sqllock: ", ": ")
	for {
		m, ok := strings.CutPrefix(msg, "sqllock: ")
		if !ok {
			return msg
		}
		msg = m
	}
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
		return usageError{msg: "no command given"}
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
			return commandHint(args[0])
		}
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.flags(fs)
		c.help(stdout, fs)
		return nil
	case "version", "-V", "--version", "-version":
		fmt.Fprintln(stdout, "sqllock", version())
		return nil
	}
	c, ok := lookup(name)
	if !ok {
		return commandHint(name)
	}
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	run := c.flags(fs)
	// run's command line ends sqllock's own after the lock name.
	maxPositional := -1
	if c.name == "run" || c.name == "elect" || c.name == "barrier" {
		maxPositional = 1
	}
	pos, err := parseFlags(fs, c.name, args, maxPositional)
	if errors.Is(err, flag.ErrHelp) {
		c.help(stdout, fs)
		return nil
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			ue.cmd = c.name
			return ue
		}
		return err
	}
	err = run(ctx, pos, stdout)
	var ue usageError
	if errors.As(err, &ue) && ue.cmd == "" {
		ue.cmd = c.name
		return ue
	}
	return err
}

// parseInterspersed parses flags before, between and after positional
// arguments, as in "migrate up --dsn X". After max positional arguments
// (unless max < 0), or after "--", the rest is returned as it is.
func parseInterspersed(fs *flag.FlagSet, args []string, max int) ([]string, error) {
	if max == 1 {
		// run and elect, as flock: options, then NAME, then the
		// command, verbatim; "--" ends the options wherever it stands.
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		return fs.Args(), nil
	}
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

// help writes c's help, with the flags of fs, to w.
func (c command) help(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s\n\n%s.\n", strings.TrimSpace("sqllock "+c.name+" "+c.args), upperFirst(c.summary))
	if help := commandHelp[c.name]; help != "" {
		fmt.Fprintln(w)
		fmt.Fprint(w, help)
	}
	if len(flagEntries(fs)) > 0 {
		fmt.Fprintln(w, "\nFlags:")
		printFlags(w, fs)
	}
}

func upperFirst(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

// overview opens the general help and the manual page.
const overview = `sqllock runs commands under distributed locks kept in PostgreSQL, MySQL/MariaDB
or an embedded SQLite file, and manages those locks.`

// databaseHelp says where the database comes from, with the DSN forms; %s
// is the SQLite file of demo and bench.
const databaseHelp = `The database is --dsn, else $SQLLOCK_DSN; with neither, commands refuse to
run (exit 64), so that a job meant to run once across machines never falls
back to a file only one machine sees. Only demo and bench, local by nature,
then use the SQLite file %s. DSNs:
  postgres://user:pass@host:5432/db?sslmode=disable&schema=ops   PostgreSQL URL
  host=db user=app dbname=app schema=ops                        pgx keywords
  mysql://user:pass@host:3306/db?param=value                    MySQL 8, MariaDB 10.6+
  user:pass@tcp(host:3306)/db?param=value                       go-sql-driver/mysql (also after mysql://)
  tidb://user:pass@host:4000/db?param=value                     TiDB (either MySQL form after tidb://)
  sqlite:/path/to/file.db                                       one machine, many processes
schema= (or --schema) names the PostgreSQL schema of the sqllock tables; it is
read by sqllock, not sent to the server (PgBouncer refuses search_path). On
MySQL the database is the schema.
`

// exitHelp lists the exit statuses of every command.
const exitHelp = `Exit status: run exits with its command's status (run --every and
--occurrence: 0, or -E, when another replica ran or runs the occurrence);
64 usage error; 69 database unreachable, schema missing or dirty; 75 lock
not acquired (run -E); 130
(128+N) interrupted by a signal while waiting; 76 lock lost while the
command ran; 124 run --max-time passed; 127 command not found; 3 leader: no
leader; 2 doctor: a check found a problem; 1 other errors.
`

func usage(w io.Writer) {
	fmt.Fprintf(w, "%s\n\nUsage: sqllock COMMAND [flags] [args]\n\nCommands:\n", overview)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, databaseHelp, strings.TrimPrefix(defaultDSN(), "sqlite:"))
	fmt.Fprintln(w)
	fmt.Fprint(w, exitHelp)
	fmt.Fprintln(w, "\nRun \"sqllock help COMMAND\" for a command's flags; \"sqllock --version\".")
}

// dsnFlag adds --dsn, defaulting to $SQLLOCK_DSN. With neither, a command
// refuses to run (see openTarget): a lock meant to coordinate machines never
// falls back to a file only this one sees.
func dsnFlag(fs *flag.FlagSet) *string {
	return fs.String("dsn", os.Getenv("SQLLOCK_DSN"), "`DSN` of the database: postgres://..., host=..., mysql://..., user@tcp(host:port)/db, tidb://... or sqlite:PATH; default $SQLLOCK_DSN; required")
}

// localDSNFlag is dsnFlag for the commands that are local by nature (demo,
// bench): with neither --dsn nor $SQLLOCK_DSN they use an SQLite file in
// the user's state directory.
func localDSNFlag(fs *flag.FlagSet) *string {
	def := os.Getenv("SQLLOCK_DSN")
	if def == "" {
		def = defaultDSN()
	}
	return fs.String("dsn", def, "`DSN` of the database: postgres://..., host=..., mysql://..., user@tcp(host:port)/db, tidb://... or sqlite:PATH; default $SQLLOCK_DSN, else an SQLite file of this host")
}

var commandHelp = map[string]string{
	"run": `Holds the lock NAME, renewing it, while COMMAND runs (or the shell
command of -c). Options go before NAME; everything after NAME is the
command. COMMAND gets SQLLOCK_NAME and SQLLOCK_TOKEN (the fencing token:
larger for every later holder) in its environment, and sqllock's standard
input and outputs.

COMMAND never runs unlocked. It runs in a process group of its own, under a
small supervisor (sqllock itself). SIGINT, SIGTERM, SIGHUP and SIGQUIT sent
to sqllock are passed on to the whole group; if the lock is lost, --max-time
passes or such a signal arrives, the group gets SIGKILL after --grace. If
sqllock itself dies, even of SIGKILL, the supervisor sends the group SIGTERM,
then SIGKILL after --grace. Processes COMMAND leaves running in the background
are stopped the same way before the lock is released. A process that leaves
the group (setsid, daemons) escapes this: keep jobs in the foreground, and
--grace well below --ttl.

A name is one lock across strategies: a name held under another strategy is
busy, as if held under this one.

Exit status: COMMAND's own (128+N if it died of signal N; 127 if it does not
exist, 126 if it cannot be run); -E (default 75) if the lock was not
acquired (-n and busy, or -w passed); with --every or --occurrence, 0
(or -E) if this replica did not run the occurrence (done, running
elsewhere, no attempt left); 128+N if signal N (SIGINT: 130) interrupted
the wait; 76 if it was lost; 124 after --max-time; 64 usage; 69 database
unreachable, schema missing or dirty.

With --every PERIOD (or --occurrence KEY) NAME is a job, and COMMAND runs
once per occurrence across every replica that runs the line: the occurrence
is the multiple of PERIOD (plus --phase) nearest to the database's clock,
so replicas whose clocks or timers differ by up to half a period agree on
it. The first replica claims it and runs COMMAND under a lease (--ttl); the
others exit 0 at once (-v says why; -E gives another status), and so does
any later run of an occurrence done already. The outcome is recorded in
the run ledger (sqllock runs): succeeded, or failed with COMMAND's status.
A runner that dies mid-run leaves an attempt the next run of the occurrence
takes over once its lease ended (recorded abandoned, with a larger token).
--retries N allows N more attempts of a failed occurrence, after
--retry-backoff: this run waits and tries again, as may later ones. COMMAND
also gets SQLLOCK_OCCURRENCE and SQLLOCK_ATTEMPT. From crontab, every
replica the same line, the job once an hour:
  0 * * * * SQLLOCK_DSN=postgres://cron@db/ops sqllock run --every 1h report -- /usr/local/bin/report

With --min-hold the lock stays taken until that long after it was acquired
(database clock), even if COMMAND ends sooner, and then frees itself: a
lock, not a record, for a job that must not run twice within a while:
  */5 * * * * SQLLOCK_DSN=postgres://cron@db/ops sqllock run -n --min-hold 4m report -- /usr/local/bin/report
As flock(1) would say it, waiting up to 10 seconds:
  sqllock run -w 10 -c 'pg_dump app > /backup/app.sql' backup
`,
	"runs": `Lists the latest attempts of the run ledger (sqllock run --every and
--occurrence), newest first, of the job JOB or of every job: JOB,
OCCURRENCE, ATTEMPT, STATE (running, succeeded, failed, abandoned: its
runner died and the next one took over), OWNER (the runner), TOKEN,
STARTED (wall clock, local time zone), DURATION ("so far" while it runs)
and ERROR (a failed attempt's; STATE says "failed (timed out)" for one
stopped by run --max-runtime). Then the jobs not up (paused; failing:
--fail-after failed attempts in a row, default 3, not followed by
--recover-after successes, default 1; missed; late: their due occurrence
unclaimed inside its grace; new) or with a manual occurrence pending,
with their failing streak, and under MISSED, per job, how many occurrences of
jobs run with --every or --cron no replica claimed within --missed-after of
their time (by default, before the next one's), the first and the last:
the dead man's switch of a periodic job (the metric sqllock.runs.missed
says the same to an alerting system). --json prints {"runs": [...],
"missed": [the latest --limit], "missed_jobs": [{job, count, first,
last}], "jobs": [{job, schedule, paused, paused_at, pending, health,
failing_streak, success_streak, late: {job, occurrence, due}}]} (each run
with timed_out), times in
RFC 3339, durations in milliseconds; --watch refreshes the view until
interrupted.

  sqllock runs pause JOB     its replicas run nothing (one line on stderr
                             each), nothing counts as missed, until
  sqllock runs resume JOB
  sqllock runs forget JOB    its schedule, pause and missed occurrences go
                             (its attempts too with --attempts); a later
                             run of JOB starts its history anew
  sqllock runs trigger JOB   a manual occurrence "manual/TIME", run once
                             across replicas by the next sqllock run of JOB:
                             no scheduled occurrence is used up
  sqllock runs backfill JOB --from TIME --to TIME -- COMMAND
                             COMMAND once per past occurrence of JOB's
                             schedule in the range (RFC 3339), once across
                             replicas; exit 1 if one failed

Exit status of the actions: 0 done (or nothing to change); 1 no such job
in the ledger; 64 usage; 69 database unreachable.
`,
	"cron": `The crontab daemon: started alike on every replica (a systemd unit, say),
it reads FILE, a crontab(5) file, and runs each entry's command through the
run ledger at the entry's times: once per occurrence across every replica,
with all that run --every does (a process group under a supervisor, the
lease, SQLLOCK_TOKEN, SQLLOCK_OCCURRENCE and SQLLOCK_ATTEMPT, a takeover
after a replica dies). It also runs the manual occurrences sqllock runs
trigger asks for, within --poll. The file:

  CRON_TZ=Europe/Berlin             the time zone of the entries below
  PATH=/usr/local/bin:/usr/bin:/bin the commands' environment (SHELL runs them)
  # sqllock: name=report retries=2 retry-backoff=5m max-runtime=1h
  30 2 * * *  /usr/local/bin/report --all
  @hourly     /usr/local/bin/cleanup      (job "cleanup": its program)
  # sqllock: name=poke tz=UTC early=1s    (tz: of the next entry alone)
  @every 10s  /usr/local/bin/poke         (a period since the Unix epoch)

A "# sqllock:" comment line (a plain cron ignores it) gives the next
entry's settings: name (the job; default the command's program), tz,
retries, retry-backoff, max-runtime (SIGTERM, SIGKILL after --grace;
recorded failed), early. The file is checked before anything runs: an
invalid field, unknown time zone, contradictory or repeated setting,
@reboot or a duplicate job name exits 64 naming each line and field,
without opening the database; --check checks it and prints each entry's
next time. SIGHUP reloads it: a bad file is refused (one line on stderr)
and the last good table stays; the job of an entry removed is paused,
forgotten or kept, as --removed says (a paused job stays paused when its
entry comes back: sqllock runs resume JOB). SIGTERM or SIGINT drains: no
new claim, each running job gets the signal (SIGKILL after --grace), and
sqllock cron exits 0 once their outcomes are recorded. -v logs every
decision: each occurrence claimed, run, skipped (done already, running
elsewhere, paused) and each job's next time.

Exit status: 0 after a drain; 64 a mistake in FILE or the flags; 69
database unreachable, schema missing or dirty.
`,
	"unlock": `Breaks the lock NAME of the lock table (run's default strategy): its
holder's lease ends now, and a lock kept taken by --min-hold is freed too.
The name keeps its fencing token, so the next holder's SQLLOCK_TOKEN is
larger than the broken holder's, and that holder's guarded writes are
refused from now on. The broken holder learns of it at its next renewal
(within a third of its --ttl): a sqllock run holding NAME stops its command
as for any lost lock (SIGTERM to its process group, SIGKILL after --grace)
and exits 76.

On a terminal, unlock shows the holder (owner, token, time left, end of
the minimum hold) and asks before breaking; otherwise it needs --force. It
prints the lease it broke.

Exit status: 0 when the lock was broken; 1 when nothing held NAME (or the
answer was no); 64 usage; 69 database unreachable, schema missing or
dirty.
`,
	"doctor": `Looks at the database as sqllock uses it and prints a line per check:
the server's kind and version; whether a pooler stands between (PostgreSQL:
a direct connection's server process is the one it was given at startup, a
pooler makes that up; transaction or session pooling is told by where a
connection's statements run; PgBouncer by its admin console; MySQL: whether
CONNECTION_ID() stays); the schema's version and dirty flag; the skew
between this host's clock and the server's; and what the wake-ups need
(PostgreSQL: a notification sent through the pool reaches a LISTEN;
MySQL/MariaDB: GET_LOCK and IS_USED_LOCK, KILL QUERY of a connection
waiting for a user lock, and CONNECTION_ADMIN or SUPER to wake other users'
waiters). Each is ok, missing (with what that costs) or problem.

Exit status: 0 when every check is ok; 2 when one is missing or a problem;
64 usage; 69 database unreachable.
`,
	"elect": `Campaigns in the election NAME and, once elected, runs COMMAND (or the
shell command of -c) as its leader, renewing the leadership, then resigns.
Options go before NAME; everything after NAME is the command. One campaigner
of NAME leads at a time; a dead leader is replaced within --ttl. COMMAND
gets SQLLOCK_NAME and SQLLOCK_TOKEN (the term: larger for every later
leader) in its environment, and runs in a process group of its own, stopped
as in run when the leadership is lost, on a signal or if sqllock dies. Others
read the leader's --value with sqllock leader.

Exit status: COMMAND's own (128+N if it died of signal N; 127 if it does not
exist, 126 if it cannot be run); -E (default 75) if not elected within -w;
128+N if signal N (SIGINT: 130) interrupted the campaign; 76 if the
leadership was lost while COMMAND ran; 64 usage; 69 database unreachable,
schema missing or dirty.
`,
	"barrier": `Enters the double barrier NAME as one of its -n members, waits until all N
runs of NAME (on any hosts) have entered, runs COMMAND (or the shell command
of -c), then leaves and waits until all N have left: N jobs start together
and finish together. Options go before NAME; everything after NAME is the
command. Each member is a lease renewed every --ttl/3: a run that dies
before the N have entered is dropped and the others wait on; one that dies
after is reported to the others as they leave (exit status 76). COMMAND
gets SQLLOCK_NAME and SQLLOCK_MEMBERS (N) in its environment and runs in a
process group of its own, stopped on a signal or if sqllock dies; it is not
stopped when a member is lost.

Exit status: COMMAND's own (128+N if it died of signal N; 127 if it does not
exist, 126 if it cannot be run), once all members have left; -E (default 75)
if the members did not enter (or leave) within -w, or the barrier's current
members have another -n; 76 if a member's lease ended before it left; 128+N
if signal N (SIGINT: 130) interrupted a wait; 64 usage; 69 database
unreachable, schema missing or dirty.
`,
	"latch": `Countdown latches, as package latch has them: create NAME COUNT makes the
latch NAME with COUNT (1 or more; again with the same COUNT it does
nothing); count-down NAME takes one from it (never below 0) and prints
what is left; wait NAME returns once it is 0, woken by the count-down that
makes it so (at most -w, then it exits -E); NAME alone prints the count;
delete NAME deletes it. So a job waits for N others: each of them runs
sqllock latch count-down NAME when done, on any host.

Exit status: 0; -E (default 75) if wait's -w passed first; 1 if NAME has
no latch, or exists with another COUNT; 64 usage; 69 database
unreachable, schema missing or dirty.
`,
	"leader": `Prints the leader of the election NAME: its value (sqllock elect --value),
term and how long its lease has left, or "no leader". --watch prints every
change until interrupted.

Exit status: 0 with a leader (and after --watch); 3 when the election has no
leader; 64 usage; 69 database unreachable, schema missing or dirty; 1 other
errors.
`,
	"migrate": `up applies the embedded migrations (idempotent, safe to run from many
processes at once, and over objects the same files created through another
migration tool); down drops every sqllock table, refusing while locks are
held unless --force (tokens start again from 1 afterwards); version prints
the applied schema version and exits 69 if it is dirty (a migration failed
half-way); force VERSION records VERSION as applied and clears the dirty
flag, once the schema was repaired by hand. Every wait, for the server and
for another migrator, ends after --timeout.
`,
	"locks": `Lists the held locks of every kind, one row per holder: KIND (table,
election, optimistic, semaphore, rwlock, pessimistic), MODE (exclusive or
shared), NAME, OWNER (an election's leader with " = " and its value),
TOKEN, HOLDERS (of the name; "N of LIMIT" for a semaphore), WAITERS (where
the server shows them), ACQUIRED (wall clock, local time zone), HELD FOR,
and TIME LEFT of the lease (database clock): "expired", or "min-hold" and
its time left for a lock a finished run keeps by --min-hold. Names and
owners with control characters are quoted. Pessimistic locks are row locks
of open transactions: PostgreSQL shows their holding session (one holder;
several shared holders are not resolved; the mode is read from the
session's last statement, which the lock's keep-alive names it in too);
MariaDB shows only those some transaction waits
for; MySQL 8 shows all (performance_schema.data_locks). A footnote says
what is not shown. --json prints
times in RFC 3339 and durations in milliseconds (held_for_ms,
expires_in_ms; min_hold_until, limit, value where they apply); --watch
refreshes the view until interrupted.
`,
	"completion": `Prints the completion script of the shell: commands, their flags, migrate's
operations and --strategy's values. Load it in the shell's startup file:
  bash: source <(sqllock completion bash)
  zsh:  source <(sqllock completion zsh)   (after compinit)
  fish: sqllock completion fish | source
`,
	"man": `Prints this manual in roff, made from the same text as help:
  sqllock man | man -l -
  sqllock man > /usr/local/share/man/man1/sqllock.1
`,
	"reap": `Runs one pass of the reaper: deletes the rows of expired and released
table and optimistic locks and of idle pessimistic locks, in batches, and
prints how many. With --runs-older-than AGE it also deletes the run
ledger's records of attempts that ended (or, still marked running,
started) more than AGE ago, and prints how many; the occurrences before
then no longer count as missed. Give an AGE longer than any run: the
record of a run still going would go, and its outcome with it.
`,
	"bench": `Measures, for each strategy the database supports, uncontended
TryAcquire+Release on distinct names (1 and 8 clients: operations per
second, p50 and p99) and the hand-off latency from a release to the waiting
Acquire, on the database of --dsn. It leaves rows named sqllock-bench-*.
The ratios against raw SQL are measured by the Go benchmarks (BENCHMARKS.md).
Progress goes to stderr.
`,
	"demo": `A shop has --stock hairdryers and --buyers buyers order at once. The demo
runs the sale without a lock (which can oversell), then with each strategy
the database supports, and prints what each sold, refused and left in stock.
It uses tables named sqllock_demo_* and drops them afterwards, and at most
--conns connections of the server, however many buyers.
`,
}
