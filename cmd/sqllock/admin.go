package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

func migrateFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn := dsnFlag(fs)
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 1 {
			return usageError{"migrate needs one of up, down, version"}
		}
		op := args[0]
		if op != "up" && op != "down" && op != "version" {
			return usageError{fmt.Sprintf("migrate %s: want up, down or version", op)}
		}
		t, err := openTarget(ctx, *dsn)
		if err != nil {
			return err
		}
		defer t.Close()
		switch op {
		case "up":
			err = sqllock.Migrate(ctx, t.d)
		case "down":
			err = sqllock.MigrateDown(ctx, t.d)
		}
		if err != nil {
			return fmt.Errorf("migrate %s on %s: %w", op, t.dsn, err)
		}
		v, dirty, err := sqllock.MigrationVersion(ctx, t.d)
		if err != nil {
			return fmt.Errorf("reading the schema version of %s: %w", t.dsn, err)
		}
		state := ""
		if dirty {
			state = " (dirty: a migration failed half-way; fix it by hand, then run migrate up)"
		}
		fmt.Fprintf(stdout, "schema version %d%s\n", v, state)
		return nil
	}
}

// lockRow is one line of sqllock locks.
type lockRow struct {
	Name      string    `json:"name"`
	Strategy  string    `json:"strategy"`
	Owner     string    `json:"owner"`
	Token     int64     `json:"token"`
	Holds     int       `json:"holds"`
	Acquired  time.Time `json:"acquired_at"`
	Expires   time.Time `json:"expires_at"`
	HeldFor   string    `json:"held_for"`
	ExpiresIn string    `json:"expires_in"`
}

func locksFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn := dsnFlag(fs)
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 0 {
			return usageError{"locks takes no arguments"}
		}
		t, err := openTarget(ctx, *dsn)
		if err != nil {
			return err
		}
		defer t.Close()
		if err := t.ready(ctx); err != nil {
			return err
		}
		rows, err := listLocks(ctx, t.d)
		if err != nil {
			return t.fail(err)
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if rows == nil {
				rows = []lockRow{}
			}
			return enc.Encode(rows)
		}
		if len(rows) == 0 {
			fmt.Fprintln(stdout, "no locks held")
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSTRATEGY\tOWNER\tTOKEN\tHOLDS\tHELD FOR\tEXPIRES IN")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.Name, r.Strategy, r.Owner, r.Token, r.Holds, r.HeldFor, r.ExpiresIn)
		}
		return tw.Flush()
	}
}

func listLocks(ctx context.Context, d dialect.Dialect) ([]lockRow, error) {
	var rows []lockRow
	add := func(strategy string, infos []dialect.LockInfo) {
		for _, li := range infos {
			expires := li.ExpiresIn.Round(time.Millisecond).String()
			if li.ExpiresIn <= 0 {
				expires = "expired"
			}
			rows = append(rows, lockRow{
				Name: li.Name, Strategy: strategy, Owner: li.Owner, Token: li.Token, Holds: li.Holds,
				Acquired: li.AcquiredAt, Expires: li.ExpiresAt,
				// The database's now is ExpiresAt - ExpiresIn.
				HeldFor:   li.ExpiresAt.Add(-li.ExpiresIn).Sub(li.AcquiredAt).Round(time.Millisecond).String(),
				ExpiresIn: expires,
			})
		}
	}
	infos, err := d.Locks().List(ctx)
	if err != nil {
		return nil, err
	}
	add("table", infos)
	if od, ok := d.(dialect.Optimistic); ok {
		infos, err := od.Versions().List(ctx)
		if err != nil {
			return nil, err
		}
		add("optimistic", infos)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows, nil
}

func reapFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn := dsnFlag(fs)
	batch := fs.Int("batch", 1000, "rows deleted per statement")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 0 {
			return usageError{"reap takes no arguments"}
		}
		t, err := openTarget(ctx, *dsn)
		if err != nil {
			return err
		}
		defer t.Close()
		if err := t.ready(ctx); err != nil {
			return err
		}
		r, err := sqllock.NewReaper(t.d, sqllock.ReaperOptions{BatchSize: *batch})
		if err != nil {
			return usageError{err.Error()}
		}
		n, err := r.Reap(ctx)
		if err != nil {
			return t.fail(err)
		}
		fmt.Fprintf(stdout, "reaped %d rows\n", n)
		return nil
	}
}
