package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/inspect"
)

// strategySemaphore is run's strategy under --max: one of N permits of a
// semaphore. Semaphore names are a namespace of their own, apart from the
// names of the other strategies' locks.
const strategySemaphore = "semaphore"

// maxFlag defines run's --max.
func maxFlag(fs *flag.FlagSet) *int {
	return intFlag(fs, "max", 0, "hold one of `N` permits of a semaphore named NAME instead of a lock: up to N commands run at once (like consul lock -n); "+
		"while runs of the name hold, a run giving another N counts against theirs; sqllock semaphore --set-limit sets a name's limit for every run (0: a lock)")
}

// checkMax validates --max against the other flags, and returns the
// strategy run uses.
func checkMax(fs *flag.FlagSet, max int, strategy string, shared bool) (string, error) {
	switch {
	case max < 0:
		return "", usageError{msg: fmt.Sprintf("--max %d: want a number of permits of at least 1", max)}
	case max == 0:
		return strategy, nil
	case isSet(fs, "strategy"):
		return "", usageError{msg: "--max takes no --strategy: a semaphore has leases of its own"}
	case shared:
		return "", usageError{msg: "--max and --shared contradict each other: a semaphore's permits are all alike"}
	}
	return strategySemaphore, nil
}

// newSemaphore builds run's locker under --max.
func newSemaphore(d dialect.Dialect, max int, opts sqllock.TableOptions) (sqllock.Locker, error) {
	s, err := sqllock.NewSemaphore(d, max, sqllock.SemaphoreOptions{LeaseOptions: sqllock.LeaseOptions{TTL: opts.TTL}, MinHold: opts.MinHold, Fair: opts.Fair})
	if errors.Is(err, sqllock.ErrInvalidOptions) || errors.Is(err, sqllock.ErrUnsupported) {
		return nil, usageError{msg: err.Error()}
	}
	return s, err
}

// semaphoreHolders describes the holders of the semaphore name, for
// messages.
func semaphoreHolders(ctx context.Context, t *target, name string, max int) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := inspect.Locks(ctx, t.d)
	if err != nil {
		return fmt.Sprintf("all %d permits held", max)
	}
	var owners []string
	for _, li := range r.Holders {
		if li.Primitive == strategySemaphore && li.Name == name && li.Holds > 0 && li.ExpiresIn > 0 {
			owners = append(owners, fmt.Sprintf("%s (token %d)", li.Owner, li.Token))
		}
	}
	// The name's limit may not be max: the holders' or a set one.
	return fmt.Sprintf("all %d permits held: %s", len(owners), strings.Join(owners, ", "))
}

// semaphoreFlags defines the flags of sqllock semaphore.
func semaphoreFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := dsnFlag(fs), schemaFlag(fs)
	setLimit := intFlag(fs, "set-limit", 0, "set the semaphore's limit to `N` permits for every run --max of the name, at once: a raise lets waiting runs in now; "+
		"a lower limit lets the holders finish and admits no run until fewer than N hold (0: leave the limit)")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 1 {
			return usageError{msg: "semaphore takes one semaphore name"}
		}
		name := args[0]
		if err := sqllock.ValidateName(name); err != nil {
			return usageError{msg: err.Error()}
		}
		if *setLimit < 0 || *setLimit > sqllock.MaxSemaphoreLimit {
			return usageError{msg: fmt.Sprintf("--set-limit %d: want 1 to %d permits (0: leave the limit)", *setLimit, sqllock.MaxSemaphoreLimit)}
		}
		t, err := openReady(ctx, *dsn, *schema)
		if err != nil {
			return err
		}
		defer t.Close()
		sem, err := sqllock.NewSemaphore(t.d, max(*setLimit, 1), sqllock.SemaphoreOptions{})
		if errors.Is(err, sqllock.ErrUnsupported) {
			return usageError{msg: err.Error()}
		}
		if err != nil {
			return err
		}
		if *setLimit > 0 {
			if err := sem.SetLimit(ctx, name, *setLimit); err != nil {
				return err
			}
		}
		return showSemaphore(ctx, t, sem, name, *setLimit, stdout)
	}
}

// showSemaphore prints the limit, holders and free permits of the
// semaphore name; limit is the one just set (0: none was).
func showSemaphore(ctx context.Context, t *target, sem *sqllock.Semaphore, name string, limit int, stdout io.Writer) error {
	r, err := inspect.Locks(ctx, t.d)
	if err != nil {
		return err
	}
	held := 0
	for _, li := range r.Holders {
		if li.Primitive == strategySemaphore && li.Name == name && li.Holds > 0 && li.ExpiresIn > 0 {
			held++
			if limit == 0 {
				limit = li.Limit
			}
		}
	}
	if limit == 0 {
		fmt.Fprintf(stdout, "%s: no holder (a limit set by --set-limit stays; else the next run --max N gives the limit)\n", name)
		return nil
	}
	free, err := sem.Available(ctx, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: limit %d, %d held, %d free\n", name, limit, held, free)
	return nil
}
