package sqllockcron_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
)

// testDB is a schema (PostgreSQL) or database (MySQL/MariaDB) of its own
// for one test, migrated, and dropped when the test ends. Its fields are
// all a process needs to connect to it (see connect).
type testDB struct {
	Kind   string // "postgres" or "mysql"
	DSN    string // the server's URL or DSN
	Schema string // the schema or database
}

// maxConns bounds each pool of a test, on servers shared with other tests.
const maxConns = 5

// servers maps a kind to the environment variable naming its server.
var servers = map[string]string{
	"postgres": "SQLLOCK_TEST_POSTGRES_URL",
	"mysql":    "SQLLOCK_TEST_MYSQL_DSN",
}

// newTestDB creates a testDB of the kind on the server its environment
// variable names. An unset variable or an unreachable server skips t, or
// fails it when CI is set.
func newTestDB(t *testing.T, kind string) testDB {
	t.Helper()
	unusable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	dsn := os.Getenv(servers[kind])
	if dsn == "" {
		unusable("%s is not set", servers[kind])
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	tdb := testDB{Kind: kind, DSN: dsn, Schema: "contrib_" + hex.EncodeToString(b[:])}
	admin, err := sql.Open(driver(kind), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		unusable("%s: %v", kind, err)
	}
	create, drop := "CREATE SCHEMA "+tdb.Schema, "DROP SCHEMA "+tdb.Schema+" CASCADE"
	if kind == "mysql" {
		create, drop = "CREATE DATABASE "+tdb.Schema, "DROP DATABASE "+tdb.Schema
	}
	if _, err := admin.ExecContext(ctx, create); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, drop); err != nil {
			t.Errorf("drop %s: %v", tdb.Schema, err)
		}
	})
	_, d := tdb.connect(t)
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	return tdb
}

func driver(kind string) string {
	if kind == "mysql" {
		return "mysql"
	}
	return "pgx"
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
		if cfg, err = gomysql.ParseDSN(tdb.DSN); err == nil {
			cfg.DBName = tdb.Schema
			if db, err = sql.Open("mysql", cfg.FormatDSN()); err == nil {
				d, err = mysql.New(db)
			}
		}
	default:
		sep := "?"
		if strings.Contains(tdb.DSN, "?") {
			sep = "&"
		}
		if db, err = sql.Open("pgx", tdb.DSN+sep+"search_path="+tdb.Schema); err == nil {
			d, err = postgres.New(db, postgres.WithSchema(tdb.Schema))
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(maxConns)
	t.Cleanup(func() {
		if c, ok := d.(interface{ Close(context.Context) error }); ok {
			_ = c.Close(context.Background())
		}
		db.Close()
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
