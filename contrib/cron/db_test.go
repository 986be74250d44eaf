package sqllockcron_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// maxConns bounds each pool of a test, on servers shared with other tests.
const maxConns = 5

// testDB is a schema (PostgreSQL) or database (MySQL/MariaDB) of its own
// for one test, migrated, and dropped when the test ends (see
// internal/dbtest). Its fields are all a process needs to connect to it
// (see connect).
type testDB struct {
	Kind   string // "postgres" or "mysql"
	DSN    string // the server's URL or DSN
	Schema string // the schema or database
}

// newTestDB creates a testDB of the kind; dbtest skips t, or fails it when
// CI is set, if the server is unreachable.
func newTestDB(t *testing.T, kind string) testDB {
	t.Helper()
	var tdb testDB
	switch kind {
	case "mysql":
		_, name := dbtest.MySQL(t)
		tdb = testDB{Kind: kind, DSN: dbtest.MySQLDSN(t), Schema: name}
	default:
		_, schema := dbtest.Postgres(t)
		tdb = testDB{Kind: kind, DSN: dbtest.PostgresURL(t), Schema: schema}
	}
	_, d := tdb.connect(t)
	if err := sqllock.Migrate(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	return tdb
}

// connect opens a pool whose unqualified tables are the testDB's, and the
// dialect over it, both closed when t ends.
func (tdb testDB) connect(t testing.TB) (*sql.DB, dialect.Dialect) {
	t.Helper()
	var (
		db  *sql.DB
		d   dialect.Dialect
		err error
	)
	switch tdb.Kind {
	case "mysql":
		var cfg *gomysql.Config
		if cfg, err = gomysql.ParseDSN(tdb.DSN); err != nil {
			t.Fatal(err)
		}
		cfg.DBName = tdb.Schema
		db = dbtest.OpenMySQL(t, cfg.FormatDSN())
		d, err = mysql.New(db)
	default:
		sep := "?"
		if strings.Contains(tdb.DSN, "?") {
			sep = "&"
		}
		db = dbtest.OpenPostgres(t, tdb.DSN+sep+"search_path="+tdb.Schema)
		d, err = postgres.New(db, postgres.WithSchema(tdb.Schema))
	}
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(maxConns)
	t.Cleanup(func() {
		if c, ok := d.(interface{ Close(context.Context) error }); ok {
			_ = c.Close(context.Background())
		}
	})
	return db, d
}

// q returns query, written with ? placeholders, for the testDB's database.
func (tdb testDB) q(query string) string {
	if tdb.Kind == "mysql" {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
