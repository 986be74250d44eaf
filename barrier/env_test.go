package barrier_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/barrier"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
)

func TestMain(m *testing.M) {
	code := dbtest.Finish(m.Run())
	if code == 0 {
		// Every dialect's listener, every waiter's subscription and
		// every member's renewal have ended with their tests.
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

var envs = []struct {
	kind string
	make func(t testing.TB) dialect.Dialect
}{
	{"postgres", func(t testing.TB) dialect.Dialect {
		db, schema := dbtest.Postgres(t)
		d, err := postgres.New(db, postgres.WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		closeAtEnd(t, d)
		return d
	}},
	{"mysql", func(t testing.TB) dialect.Dialect {
		db, database := dbtest.MySQL(t)
		d, err := mysql.New(db, mysql.WithDatabase(database))
		if err != nil {
			t.Fatal(err)
		}
		closeAtEnd(t, d)
		return d
	}},
	{"sqlite", func(t testing.TB) dialect.Dialect {
		dbtest.SQLite(t)
		db, err := sqlite.Open(filepath.Join(t.TempDir(), "barriers.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		d, err := sqlite.New(db)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}},
}

// closeAtEnd closes the dialect d when t ends.
func closeAtEnd(t testing.TB, d interface{ Close(context.Context) error }) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Errorf("closing the dialect: %v", err)
		}
	})
}

// each runs fn against every dialect, migrated, in parallel subtests.
func each(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Parallel()
	for _, m := range envs {
		t.Run(m.kind, func(t *testing.T) {
			t.Parallel()
			d := m.make(t)
			if err := sqllock.Migrate(ctxT(t), d); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			fn(t, &env{kind: m.kind, d: d})
		})
	}
}

// ctxT is the test's context with a deadline, so no test can hang.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// barrier returns the barrier name of size on e, with a Barrier of its
// own (as a process of its own would have).
func (e *env) barrier(t *testing.T, name string, size int, opts barrier.Options) *barrier.Barrier {
	t.Helper()
	b, err := barrier.New(e.d, name, size, opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
