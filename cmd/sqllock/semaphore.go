package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
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
		"every run of the name must give the same N while any runs (0: a lock)")
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
	return fmt.Sprintf("all %d permits held: %s", max, strings.Join(owners, ", "))
}
