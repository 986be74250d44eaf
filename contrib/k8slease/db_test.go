package sqllockk8slease_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// The test servers, as the core's tests name them. A test needing one is
// skipped when it is unset or unreachable, and fails instead when CI is
// set.
const (
	postgresURLEnv = "SQLLOCK_TEST_POSTGRES_URL"
	mysqlDSNEnv    = "SQLLOCK_TEST_MYSQL_DSN"
)

// testPostgres returns the URL of a new schema on the PostgreSQL test
// server (its search_path), dropped when t ends, and the schema.
func testPostgres(t *testing.T) (dsn, schema string) {
	t.Helper()
	admin := server(t, "pgx", postgresURLEnv)
	schema = newName()
	namespace(t, admin, `CREATE SCHEMA "`+schema+`"`, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`)
	u, err := url.Parse(os.Getenv(postgresURLEnv))
	if err != nil {
		t.Fatalf("%s: %v", postgresURLEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}

// testMySQL returns the DSN of a new database on the MySQL/MariaDB test
// server, dropped when t ends, and the database.
func testMySQL(t *testing.T) (dsn, database string) {
	t.Helper()
	admin := server(t, "mysql", mysqlDSNEnv)
	database = newName()
	namespace(t, admin, "CREATE DATABASE `"+database+"`", "DROP DATABASE IF EXISTS `"+database+"`")
	c, err := gomysql.ParseDSN(os.Getenv(mysqlDSNEnv))
	if err != nil {
		t.Fatalf("%s: %v", mysqlDSNEnv, err)
	}
	c.DBName = database
	return c.FormatDSN(), database
}

// server opens a pool on the test server named by env, closed when t
// ends, or skips t (fails it when CI is set) if it is unset or
// unreachable.
func server(t *testing.T, driver, env string) *sql.DB {
	t.Helper()
	dsn := os.Getenv(env)
	if dsn == "" {
		unreachable(t, "%s is not set", env)
	}
	db := open(t, driver, dsn)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		unreachable(t, "the test server of %s is unreachable: %v", env, err)
	}
	return db
}

func unreachable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf("skipping: "+format, args...)
}

// open opens a pool on dsn, closed when t ends.
func open(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", driver, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// namespace runs create on db, and drop when t ends.
func namespace(t *testing.T, db *sql.DB, create, drop string) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), create); err != nil {
		t.Fatalf("%s: %v", create, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, drop); err != nil {
			t.Errorf("%s: %v", drop, err)
		}
	})
}

// newName returns a fresh schema or database name.
func newName() string {
	return "sqllock_contrib_" + strings.ToLower(rand.Text()[:12])
}
