// Package migrated gives a test of a module beside the core (contrib/...)
// a schema or database of its own with sqllock's tables (see dbtest.Target),
// and the dialect over it; and the tests of the core's packages above the
// root (latch, barrier, ledger) a migrated dialect of every database
// (Each).
package migrated

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// MaxConns bounds each pool Connect opens, on servers shared with other
// tests.
const MaxConns = 5

// New creates a dbtest.Target of kind "postgres" or "mysql" and migrates
// it. If the server is unreachable, t is skipped, or fails when CI is set.
func New(t testing.TB, kind string) dbtest.Target {
	t.Helper()
	tg := dbtest.NewTarget(t, kind)
	_, d := Connect(t, tg)
	if err := sqllock.Migrate(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	return tg
}

// Connect opens a pool of MaxConns connections whose unqualified tables
// are tg's, and the dialect over it, both closed when t ends.
func Connect(t testing.TB, tg dbtest.Target) (*sql.DB, dialect.Dialect) {
	t.Helper()
	db := tg.Open(t)
	db.SetMaxOpenConns(MaxConns)
	var (
		d   dialect.Dialect
		err error
	)
	if tg.Kind == "mysql" {
		d, err = mysql.New(db)
	} else {
		d, err = postgres.New(db, postgres.WithSchema(tg.Schema))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, ok := d.(interface{ Close(context.Context) error }); ok {
			_ = c.Close(context.Background())
		}
	})
	return db, d
}

// Kinds are the databases Each runs on.
var Kinds = []string{"postgres", "mysql", "sqlite"}

// Dialect returns a dialect of kind ("postgres", "mysql" or "sqlite") on a
// schema, database or SQLite file of its own, not migrated, closed when t
// ends. If the server is unreachable, t is skipped, or fails when CI is
// set.
func Dialect(t testing.TB, kind string) dialect.Dialect {
	t.Helper()
	var (
		d   dialect.Dialect
		err error
	)
	switch kind {
	case "postgres":
		db, schema := dbtest.Postgres(t)
		d, err = postgres.New(db, postgres.WithSchema(schema))
	case "mysql":
		db, database := dbtest.MySQL(t)
		d, err = mysql.New(db, mysql.WithDatabase(database))
	case "sqlite":
		dbtest.SQLite(t)
		var db *sql.DB
		if db, err = sqlite.Open(filepath.Join(t.TempDir(), "sqllock.db")); err == nil {
			t.Cleanup(func() { db.Close() })
			d, err = sqlite.New(db)
		}
	default:
		t.Fatalf("migrated: no database kind %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := d.(interface{ Close(context.Context) error }); ok {
		CloseAtEnd(t, c)
	}
	return d
}

// CloseAtEnd closes d (a dialect's listener) when t ends, failing t if
// that fails.
func CloseAtEnd(t testing.TB, d interface{ Close(context.Context) error }) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Errorf("closing the dialect: %v", err)
		}
	})
}

// Each runs fn against a migrated dialect of every kind of Kinds, in
// parallel subtests named after the kinds (t is parallel too).
func Each(t *testing.T, fn func(t *testing.T, kind string, d dialect.Dialect)) {
	t.Parallel()
	for _, kind := range Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			d := Dialect(t, kind)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			if err := sqllock.Migrate(ctx, d); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			fn(t, kind, d)
		})
	}
}
