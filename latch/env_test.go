package latch_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/latch"
	"github.com/sqllock/sqllock/tests/migrated"
)

func TestMain(m *testing.M) {
	code := dbtest.Finish(m.Run())
	if code == 0 {
		// Every dialect's listener, and every Wait's subscription,
		// have ended with their tests.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// env is one dialect on a private, migrated schema (PostgreSQL), database
// (MySQL) or database file (SQLite).
type env struct {
	kind string
	d    dialect.Dialect
}

// each runs fn against every dialect, migrated, in parallel subtests.
func each(t *testing.T, fn func(t *testing.T, e *env)) {
	migrated.Each(t, func(t *testing.T, kind string, d dialect.Dialect) { fn(t, &env{kind: kind, d: d}) })
}

// ctxT is the test's context with a deadline, so no test can hang.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// latch returns a Latch on e.
func (e *env) latch(t *testing.T) *latch.Latch {
	t.Helper()
	l, err := latch.New(e.d, latch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}
