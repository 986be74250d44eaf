package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/golang-migrate/migrate/v4"
	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/ledger"
)

func migrateFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := dsnFlag(fs), schemaFlag(fs)
	timeout := durationFlag(fs, "timeout", 2*time.Minute, "give up after `SECONDS` (or a duration), including the wait for another migrator (0: no limit)")
	force := boolFlag(fs, "force", "migrate down even while locks are held")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) == 0 {
			return usageError{msg: "migrate needs one of up, down, version, force VERSION"}
		}
		op := args[0]
		var forceTo int
		switch {
		case op == "force" && len(args) == 2:
			v, err := strconv.Atoi(args[1])
			if err != nil || v < -1 {
				return usageError{msg: fmt.Sprintf("migrate force %s: want a schema version (0 or more; -1 for none)", args[1])}
			}
			forceTo = v
		case op == "force":
			return usageError{msg: "migrate force needs a VERSION: the version whose migrations are fully applied"}
		case op != "up" && op != "down" && op != "version":
			return usageError{msg: fmt.Sprintf("migrate %s: want up, down, version or force VERSION", op)}
		case len(args) != 1:
			return usageError{msg: fmt.Sprintf("migrate %s takes no further arguments", op)}
		}
		if *timeout < 0 {
			return usageError{msg: "--timeout must not be negative"}
		}
		if *force && op != "down" {
			return usageError{msg: "--force applies to migrate down only"}
		}
		if *timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, *timeout)
			defer cancel()
		}
		t, err := openTarget(ctx, *dsn, *schema)
		if err != nil {
			return err
		}
		defer t.Close()
		switch op {
		case "up":
			err = sqllock.Migrate(ctx, t.d)
		case "down":
			if !*force {
				if err := refuseWhileHeld(ctx, t); err != nil {
					return err
				}
			}
			err = sqllock.MigrateDown(ctx, t.d)
			if err == nil {
				// Nothing of sqllock's is left, not even the record of
				// its version.
				_, err = t.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t.migrationsTable())
				if err == nil {
					fmt.Fprintln(stdout, "schema removed")
					return nil
				}
			}
		case "force":
			if vs := versions(t.d); forceTo > 0 && !slices.Contains(vs, forceTo) {
				return usageError{msg: fmt.Sprintf("migrate force %d: %s has no schema version %d; its versions are %s (0 or -1: none applied)", forceTo, t.d.Name(), forceTo, joinInts(vs))}
			}
			err = sqllock.MigrateForce(ctx, t.d, forceTo)
		}
		// A dirty schema is told apart only under the migration lock, as
		// golang-migrate reports it: read before, the flag is also set
		// while a concurrent migrator runs a migration.
		var de migrate.ErrDirty
		if op == "up" && errors.As(err, &de) {
			fmt.Fprintf(stdout, "schema version %d (dirty)\n", de.Version)
			return dirtyError(t, uint(de.Version))
		}
		if err != nil {
			return t.timeout(ctx, *timeout, fmt.Errorf("migrate %s on %s: %w", op, t.dsn, err))
		}
		v, dirty, err := sqllock.MigrationVersion(ctx, t.d)
		if err != nil {
			return t.timeout(ctx, *timeout, fmt.Errorf("reading the schema version of %s: %w", t.dsn, err))
		}
		if dirty {
			fmt.Fprintf(stdout, "schema version %d (dirty)\n", v)
			return dirtyError(t, v)
		}
		fmt.Fprintf(stdout, "schema version %d\n", v)
		return nil
	}
}

// versions lists the schema versions of d's embedded migrations, in order.
func versions(d dialect.Dialect) []int {
	entries, _ := fs.ReadDir(d.Migrations(), ".")
	var vs []int
	for _, e := range entries {
		head, _, ok := strings.Cut(e.Name(), "_")
		if v, err := strconv.Atoi(head); ok && err == nil && !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs
}

// joinInts is vs as "1, 2, 5".
func joinInts(vs []int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ", ")
}

// count is n with the singular or plural noun: "1 lock", "2 locks".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// dirtyError is the answer for a dirty schema at version v: exit 69, and
// how to repair it.
func dirtyError(t *target, v uint) error {
	return unavailable("schema version %d of %s is dirty: a migration failed half-way. Finish or undo migration %d by hand, then run `sqllock migrate force VERSION` with the version now fully applied, and `sqllock migrate up`", v, t.dsn, v)
}

// refuseWhileHeld fails when some lock is held: dropping the tables would
// free it under its holder, and start tokens again from 1.
func refuseWhileHeld(ctx context.Context, t *target) error {
	if v, _, err := sqllock.MigrationVersion(ctx, t.d); err != nil || v == 0 {
		return err
	}
	rows, _, err := listLocks(ctx, t)
	if err != nil {
		return fmt.Errorf("listing held locks before migrate down: %w", t.fail(err))
	}
	var held []string
	for _, r := range rows {
		if left, ok := r.expiresIn(); r.Holds > 0 && (!ok || left > 0) {
			held = append(held, strconv.Quote(r.Name))
		}
	}
	if len(held) == 0 {
		return nil
	}
	return exitError{exitFailure, fmt.Errorf("migrate down refused: %s held (%s); dropping the tables frees them under their holders and starts fencing tokens again from 1. Stop the holders, or give --force", count(len(held), "lock", "locks"), strings.Join(held, ", "))}
}

func locksFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := dsnFlag(fs), schemaFlag(fs)
	asJSON := fs.Bool("json", false, "print a JSON array: times in RFC 3339, durations in milliseconds")
	watch := durationFlag(fs, "watch", 0, "show the locks again every `SECONDS` until interrupted (0: once)")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 0 {
			return usageError{msg: "locks takes no arguments"}
		}
		if *watch < 0 {
			return usageError{msg: "--watch must not be negative"}
		}
		t, err := openReady(ctx, *dsn, *schema)
		if err != nil {
			return err
		}
		defer t.Close()
		if *watch == 0 {
			return showLocks(ctx, t, stdout, *asJSON, false)
		}
		return watchView(ctx, *watch, stdout, !*asJSON, func(ctx context.Context) error {
			return showLocks(ctx, t, stdout, *asJSON, true)
		})
	}
}

// watchView calls show every interval until interrupted (SIGINT,
// SIGTERM), and returns nil then, or show's error. On a terminal, if
// clear, the screen is cleared before each view.
func watchView(ctx context.Context, interval time.Duration, stdout io.Writer, clear bool, show func(context.Context) error) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	clear = clear && isTerminalWriter(stdout)
	for {
		if clear {
			fmt.Fprint(stdout, "\033[H\033[2J")
		}
		if err := show(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// isTerminalWriter reports whether w is a terminal.
func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}

// writeLocksJSON writes rows as sqllock locks --json and serve's /api/locks
// show them: a JSON array, indented if indent.
func writeLocksJSON(w io.Writer, rows []lockRow, indent bool) error {
	if rows == nil {
		rows = []lockRow{}
	}
	enc := json.NewEncoder(w)
	if indent {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(rows)
}

// showLocks prints the locks of t once: a table, or JSON. stamped adds the
// time of the listing (for --watch).
func showLocks(ctx context.Context, t *target, w io.Writer, asJSON, stamped bool) error {
	rows, skipped, err := listLocks(ctx, t)
	if err != nil {
		return t.fail(err)
	}
	if asJSON {
		return writeLocksJSON(w, rows, !stamped)
	}
	now := time.Now()
	if stamped {
		fmt.Fprintf(w, "%s  %s\n\n", now.Format("2006-01-02 15:04:05 MST"), t.dsn)
	}
	if skipped != nil {
		fmt.Fprintf(w, "(pessimistic locks not listed: %v)\n", skipped)
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "no locks held")
		return nil
	}
	holders := map[[2]string]int{}
	for _, r := range rows {
		if r.Holds > 0 && r.live() {
			holders[[2]string{r.Strategy, r.Name}]++
		}
	}
	zone, _ := now.Zone()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "KIND\tMODE\tNAME\tOWNER\tTOKEN\tHOLDERS\tWAITERS\tACQUIRED (%s)\tHELD FOR\tTIME LEFT\n", zone)
	for _, r := range rows {
		token, waiters := "-", "-"
		if r.Token != 0 {
			token = strconv.FormatInt(r.Token, 10)
		}
		if r.Waiters != nil {
			waiters = strconv.Itoa(*r.Waiters)
		}
		n := strconv.Itoa(holders[[2]string{r.Strategy, r.Name}])
		if r.Limit > 0 {
			n += " of " + strconv.Itoa(r.Limit)
		}
		owner := cell(r.Owner)
		if r.Value != nil {
			owner += " = " + cell(*r.Value)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Strategy, r.Mode, cell(r.Name), owner, token, n, waiters,
			r.AcquiredAt.Local().Format("2006-01-02 15:04:05"), r.heldFor().Round(time.Millisecond), r.timeLeft())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case skipped != nil:
	case t.d.Name() == "postgres" && slices.ContainsFunc(rows, func(r lockRow) bool { return r.Strategy == "pessimistic" }):
		fmt.Fprintln(w, "(pessimistic: one holder per row, its mode read from its session's last statement, the lock's or its keep-alive's, \"unknown\" after one of the holder's own; rows held shared by several sessions are not listed)")
	case t.d.Catalogue().Pessimistic != nil && t.d.Name() == "mysql":
		fmt.Fprintln(w, "(pessimistic, on MariaDB: the server shows a row lock only while someone waits for it; uncontended locks are not listed. MySQL 8 shows them all)")
	}
	return nil
}

func reapFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := dsnFlag(fs), schemaFlag(fs)
	batch := fs.Int("batch", 1000, "rows deleted per statement")
	runsAge := durationFlag(fs, "runs-older-than", 0, "also delete the run ledger's records of attempts (sqllock runs) that ended more than `AGE` ago, a duration (720h: 30 days) longer than any run; 0: keep them")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 0 {
			return usageError{msg: "reap takes no arguments"}
		}
		if *runsAge < 0 {
			return usageError{msg: "--runs-older-than must not be negative"}
		}
		t, err := openReady(ctx, *dsn, *schema)
		if err != nil {
			return err
		}
		defer t.Close()
		r, err := sqllock.NewReaper(t.d, sqllock.ReaperOptions{BatchSize: *batch})
		if err != nil {
			return usageError{msg: err.Error()}
		}
		n, err := r.Reap(ctx)
		if err != nil {
			return t.fail(err)
		}
		fmt.Fprintf(stdout, "reaped %d rows\n", n)
		if *runsAge == 0 {
			return nil
		}
		l, err := ledger.New(t.d, ledger.Options{})
		if errors.Is(err, sqllock.ErrUnsupported) {
			return usageError{msg: err.Error()}
		}
		if err != nil {
			return err
		}
		if n, err = l.Reap(ctx, *runsAge); err != nil {
			return t.fail(err)
		}
		fmt.Fprintf(stdout, "reaped %s\n", count(n, "run record", "run records"))
		return nil
	}
}

// cell is s as one cell of a table: quoted, with escapes, if it holds a
// character that is not printable (a newline or a tab would break the
// table) or is a quote itself, else as it is.
func cell(s string) string {
	for _, c := range s {
		if !unicode.IsPrint(c) || c == '"' {
			return strconv.Quote(s)
		}
	}
	return s
}
