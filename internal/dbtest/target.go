package dbtest

import (
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
)

// Target is a schema (PostgreSQL) or database (MySQL/MariaDB) of a test's
// own, dropped when the test ends. Its fields are all another process
// needs to reach it: a test may hand a Target to a child process as JSON.
type Target struct {
	Kind   string // "postgres" or "mysql"
	DSN    string // the test server's URL or DSN
	Schema string // the schema or database
}

// NewTarget creates a Target of kind "postgres" or "mysql" on the test
// server (see Postgres and MySQL). If the server is unreachable, t is
// skipped, or fails when CI is set.
func NewTarget(t testing.TB, kind string) Target {
	t.Helper()
	switch kind {
	case postgresKind:
		_, schema := Postgres(t)
		return Target{Kind: kind, DSN: PostgresURL(t), Schema: schema}
	case mysqlKind:
		_, database := MySQL(t)
		return Target{Kind: kind, DSN: MySQLDSN(t), Schema: database}
	}
	t.Fatalf("dbtest: no target of kind %q", kind)
	return Target{}
}

// URL returns tg.DSN with the target for the default schema (PostgreSQL's
// search_path) or database, so that unqualified table names are the
// target's.
func (tg Target) URL(t testing.TB) string {
	t.Helper()
	if tg.Kind == mysqlKind {
		c, err := gomysql.ParseDSN(tg.DSN)
		if err != nil {
			t.Fatalf("dbtest: %s: %v", redactDSN(tg.DSN), err)
		}
		c.DBName = tg.Schema
		return c.FormatDSN()
	}
	u, err := url.Parse(tg.DSN)
	if err != nil {
		t.Fatalf("dbtest: %s: %v", redactURL(tg.DSN), err)
	}
	q := u.Query()
	q.Set("search_path", tg.Schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Open opens a private database/sql pool on tg.URL for this test alone,
// closed when the test ends (see OpenPostgres and OpenMySQL).
func (tg Target) Open(t testing.TB) *sql.DB {
	t.Helper()
	if tg.Kind == mysqlKind {
		return OpenMySQL(t, tg.URL(t))
	}
	return OpenPostgres(t, tg.URL(t))
}

// Rebind returns query, written with ? placeholders, in the placeholders
// of tg's database: $1, $2, ... for PostgreSQL.
func (tg Target) Rebind(query string) string {
	if tg.Kind == mysqlKind {
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

// PgBouncerDatabase creates a database of the test's own on the PostgreSQL
// test server (see PostgresDatabase) and returns its name and its URL
// through the test PgBouncer in pool mode m. In transaction pooling the
// URL turns pgx's statement cache off (default_query_exec_mode=exec), as
// the README says to. If the server or the PgBouncer is unreachable, t is
// skipped, or fails when CI is set.
func PgBouncerDatabase(t testing.TB, m PoolMode) (pgbURL, name string) {
	t.Helper()
	u, err := url.Parse(PgBouncerURL(t, m))
	if err != nil {
		t.Fatalf("dbtest: PgBouncer URL: %v", err)
	}
	name = PostgresDatabase(t)
	u.Path = "/" + name
	if m == Transaction {
		q := u.Query()
		q.Set("default_query_exec_mode", "exec")
		u.RawQuery = q.Encode()
	}
	return u.String(), name
}
