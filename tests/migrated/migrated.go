// Package migrated gives a test of a module beside the core (contrib/...)
// a schema or database of its own with sqllock's tables (see dbtest.Target),
// and the dialect over it.
package migrated

import (
	"context"
	"database/sql"
	"testing"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
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
