package dbtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	CloseAll()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak after CloseAll:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var nameRE = regexp.MustCompile(`^t_[0-9a-f]{12}$`)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func pgSchemaExists(t *testing.T, db *sql.DB, schema string) bool {
	t.Helper()
	var n int
	if err := db.QueryRowContext(ctxT(t), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func myDatabaseExists(t *testing.T, db *sql.DB, database string) bool {
	t.Helper()
	var n int
	if err := db.QueryRowContext(ctxT(t), `SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?`, database).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// A test's schema exists, is usable and private, and is gone after the test.
func TestPostgres(t *testing.T) {
	t.Parallel()
	db, own := Postgres(t) // skips here if the server is unreachable
	var inner string
	t.Run("inner", func(t *testing.T) {
		db2, schema := Postgres(t)
		if db2 != db {
			t.Error("Postgres returned a different pool")
		}
		if !nameRE.MatchString(schema) || schema == own {
			t.Errorf("schema %q (outer %q)", schema, own)
		}
		if !pgSchemaExists(t, db, schema) {
			t.Fatalf("schema %s not created", schema)
		}
		if _, err := db.ExecContext(ctxT(t), `CREATE TABLE "`+schema+`".x (id int)`); err != nil {
			t.Fatal(err)
		}
		inner = schema
	})
	if inner == "" {
		t.Fatal("inner test did not run")
	}
	if pgSchemaExists(t, db, inner) {
		t.Errorf("schema %s not dropped", inner)
	}
	if !pgSchemaExists(t, db, own) {
		t.Errorf("schema %s dropped too early", own)
	}
}

func TestPostgresPool(t *testing.T) {
	t.Parallel()
	pool, own := PostgresPool(t)
	schemaExists := func(t *testing.T, schema string) bool {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctxT(t), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	var inner string
	t.Run("inner", func(t *testing.T) {
		pool2, schema := PostgresPool(t)
		if pool2 != pool {
			t.Error("PostgresPool returned a different pool")
		}
		if !nameRE.MatchString(schema) || schema == own {
			t.Errorf("schema %q (outer %q)", schema, own)
		}
		if !schemaExists(t, schema) {
			t.Fatalf("schema %s not created", schema)
		}
		if _, err := pool.Exec(ctxT(t), `CREATE TABLE "`+schema+`".x (id int)`); err != nil {
			t.Fatal(err)
		}
		inner = schema
	})
	if inner == "" {
		t.Fatal("inner test did not run")
	}
	if schemaExists(t, inner) {
		t.Errorf("schema %s not dropped", inner)
	}
	if !schemaExists(t, own) {
		t.Errorf("schema %s dropped too early", own)
	}
}

func TestMySQL(t *testing.T) {
	t.Parallel()
	db, own := MySQL(t)
	var inner string
	t.Run("inner", func(t *testing.T) {
		db2, database := MySQL(t)
		if db2 != db {
			t.Error("MySQL returned a different pool")
		}
		if !nameRE.MatchString(database) || database == own {
			t.Errorf("database %q (outer %q)", database, own)
		}
		if !myDatabaseExists(t, db, database) {
			t.Fatalf("database %s not created", database)
		}
		if _, err := db.ExecContext(ctxT(t), "CREATE TABLE `"+database+"`.x (id int)"); err != nil {
			t.Fatal(err)
		}
		inner = database
	})
	if inner == "" {
		t.Fatal("inner test did not run")
	}
	if myDatabaseExists(t, db, inner) {
		t.Errorf("database %s not dropped", inner)
	}
	if !myDatabaseExists(t, db, own) {
		t.Errorf("database %s dropped too early", own)
	}
}

// The shared MySQL pool uses the DSN as configured: DATETIME columns come
// back as bytes, not time.Time, without parseTime.
func TestMySQLDSNUnchanged(t *testing.T) {
	t.Parallel()
	c, err := gomysql.ParseDSN(MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	if c.ParseTime || c.ClientFoundRows {
		t.Skip("the configured DSN sets parseTime or clientFoundRows itself")
	}
	db, _ := MySQL(t)
	var v any
	if err := db.QueryRowContext(ctxT(t), "SELECT CAST('2000-01-02 03:04:05' AS DATETIME)").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if _, ok := v.(time.Time); ok {
		t.Errorf("shared pool parses times: %T", v)
	}
}

func TestPostgresOpen(t *testing.T) {
	t.Parallel()
	shared, _ := Postgres(t)
	var db *sql.DB
	t.Run("inner", func(t *testing.T) {
		db = OpenPostgres(t, PostgresURL(t))
		if db == shared {
			t.Fatal("OpenPostgres returned the shared pool")
		}
		db.SetMaxOpenConns(1)
		if err := db.PingContext(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	})
	if db == nil {
		t.Fatal("inner test did not run")
	}
	if err := db.Ping(); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("private pool not closed after its test: Ping = %v", err)
	}
	if err := shared.PingContext(ctxT(t)); err != nil {
		t.Errorf("shared pool: %v", err)
	}
}

func TestMySQLOpen(t *testing.T) {
	t.Parallel()
	shared, database := MySQL(t)
	var db *sql.DB
	t.Run("inner", func(t *testing.T) {
		c, err := gomysql.ParseDSN(MySQLDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		c.DBName = database
		c.ParseTime = true
		db = OpenMySQL(t, c.FormatDSN())
		if db == shared {
			t.Fatal("OpenMySQL returned the shared pool")
		}
		var got string
		if err := db.QueryRowContext(ctxT(t), "SELECT DATABASE()").Scan(&got); err != nil || got != database {
			t.Fatalf("DATABASE() = %q, %v; want %q", got, err, database)
		}
		var v any
		if err := db.QueryRowContext(ctxT(t), "SELECT CAST('2000-01-02 03:04:05' AS DATETIME)").Scan(&v); err != nil {
			t.Fatal(err)
		}
		if _, ok := v.(time.Time); !ok {
			t.Errorf("parseTime not applied: %T", v)
		}
	})
	if db == nil {
		t.Fatal("inner test did not run")
	}
	if err := db.Ping(); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("private pool not closed after its test: Ping = %v", err)
	}
}

func TestPostgresURLDefault(t *testing.T) {
	t.Parallel()
	if got, want := PostgresURL(t), envOr(PostgresURLEnv, DefaultPostgresURL); got != want {
		t.Errorf("PostgresURL = %q, want %q", got, want)
	}
}

func TestMySQLDSNDefault(t *testing.T) {
	t.Parallel()
	if got, want := MySQLDSN(t), envOr(MySQLDSNEnv, DefaultMySQLDSN); got != want {
		t.Errorf("MySQLDSN = %q, want %q", got, want)
	}
}

func TestEnvOr(t *testing.T) {
	const env = "SQLLOCK_DBTEST_ENVOR_TEST"
	t.Setenv(env, "")
	if got := envOr(env, "def"); got != "def" {
		t.Errorf("empty: %q", got)
	}
	t.Setenv(env, "set")
	if got := envOr(env, "def"); got != "set" {
		t.Errorf("set: %q", got)
	}
}

func TestNewName(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		n := newName()
		if !nameRE.MatchString(n) || seen[n] {
			t.Fatalf("name %q (seen before: %v)", n, seen[n])
		}
		seen[n] = true
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		redactURL("postgres://u:s3cret@127.0.0.1:5432/test?sslmode=disable"),
		redactDSN("u:s3cret@tcp(127.0.0.1:3306)/test"),
	} {
		if strings.Contains(s, "s3cret") || !strings.Contains(s, "u:") {
			t.Errorf("redacted: %q", s)
		}
	}
}

// recorder is a testing.TB that records Fatalf and Skipf instead of ending
// the test.
type recorder struct {
	testing.TB
	fatal, skip []string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = append(r.fatal, fmt.Sprintf(format, args...))
}
func (r *recorder) Skipf(format string, args ...any) {
	r.skip = append(r.skip, fmt.Sprintf(format, args...))
}

func TestUnreachablePolicy(t *testing.T) {
	t.Parallel()
	err := errors.New("connection refused")
	var r recorder
	unreachable(&r, true, "PostgreSQL", PostgresURLEnv, "postgres://x", err)
	if len(r.fatal) != 1 || len(r.skip) != 0 || !strings.Contains(r.fatal[0], PostgresURLEnv) || !strings.Contains(r.fatal[0], "connection refused") {
		t.Errorf("CI: fatal %q, skip %q", r.fatal, r.skip)
	}
	r = recorder{}
	unreachable(&r, false, "MySQL", MySQLDSNEnv, "root@tcp(x)/test", err)
	if len(r.fatal) != 0 || len(r.skip) != 1 || !strings.Contains(r.skip[0], MySQLDSNEnv) {
		t.Errorf("no CI: fatal %q, skip %q", r.fatal, r.skip)
	}
}

// An unreachable server is tried once per process, however many tests ask.
func TestUnreachableCached(t *testing.T) {
	t.Parallel()
	s := &shared[*sql.DB]{
		kind: postgresKind, server: "PostgreSQL", env: "SQLLOCK_DBTEST_UNSET_FOR_TEST",
		def:    "postgres://postgres@127.0.0.1:1/test?sslmode=disable",
		redact: redactURL, open: openSQL("pgx"),
	}
	t.Cleanup(s.reset)
	wanted(t, postgresKind, "PostgreSQL") // skips t if DatabasesEnv leaves PostgreSQL out
	ci := os.Getenv(CIEnv) != ""
	for i := range 3 {
		var r recorder
		if db, _ := s.get(&r); db != nil {
			t.Fatalf("call %d: got a pool", i)
		}
		if n := len(r.fatal) + len(r.skip); n != 1 || (len(r.fatal) == 1) != ci {
			t.Fatalf("call %d: fatal %q, skip %q (CI %v)", i, r.fatal, r.skip, ci)
		}
	}
	if s.opened != 1 {
		t.Errorf("connected %d times, want 1", s.opened)
	}
}

func TestSelected(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		list, kind string
		want       bool
	}{
		{"postgres", postgresKind, true},
		{"postgres", mysqlKind, false},
		{"mysql", postgresKind, false},
		{" postgres , mysql ", mysqlKind, true},
		{"mysql,postgres,", postgresKind, true},
		{"postgres", sqliteKind, false},
		{"sqlite", sqliteKind, true},
	} {
		got, err := selected(c.list, c.kind)
		if err != nil || got != c.want {
			t.Errorf("selected(%q, %q) = %v, %v; want %v", c.list, c.kind, got, err, c.want)
		}
	}
	for _, list := range []string{"postgresql", "postgres,sqlite3", "PG"} {
		if _, err := selected(list, postgresKind); err == nil || !strings.Contains(err.Error(), "unknown database") {
			t.Errorf("selected(%q) error = %v, want unknown database", list, err)
		}
	}
}

// A server that SQLLOCK_TEST_DATABASES leaves out is skipped without a
// connection attempt, even under CI; a misspelt list fails the test.
func TestSelection(t *testing.T) {
	// Not parallel: t.Setenv.
	t.Setenv(CIEnv, "true")
	s := &shared[*sql.DB]{
		kind: mysqlKind, server: "MySQL", env: "SQLLOCK_DBTEST_UNSET_FOR_TEST",
		def:    "root@tcp(127.0.0.1:1)/test",
		redact: redactDSN, open: openSQL("mysql"),
	}
	t.Cleanup(s.reset)

	t.Setenv(DatabasesEnv, "postgres")
	var r recorder
	if db, _ := s.get(&r); db != nil || len(r.fatal) != 0 || len(r.skip) != 1 ||
		!strings.Contains(r.skip[0], DatabasesEnv) || !strings.Contains(r.skip[0], "MySQL") {
		t.Errorf("unselected: db %v, fatal %q, skip %q", db, r.fatal, r.skip)
	}
	if s.opened != 0 {
		t.Errorf("unselected server connected %d times, want 0", s.opened)
	}
	r = recorder{}
	if SQLite(&r); len(r.fatal) != 0 || len(r.skip) != 1 || !strings.Contains(r.skip[0], "SQLite") {
		t.Errorf("SQLite unselected: fatal %q, skip %q", r.fatal, r.skip)
	}
	t.Setenv(DatabasesEnv, "postgres,sqlite")
	r = recorder{}
	if SQLite(&r); len(r.fatal) != 0 || len(r.skip) != 0 {
		t.Errorf("SQLite selected: fatal %q, skip %q", r.fatal, r.skip)
	}

	t.Setenv(DatabasesEnv, "postgres,mysqll")
	r = recorder{}
	if db, _ := s.get(&r); db != nil || len(r.fatal) != 1 || len(r.skip) != 0 || !strings.Contains(r.fatal[0], `"mysqll"`) {
		t.Errorf("misspelt: db %v, fatal %q, skip %q", db, r.fatal, r.skip)
	}

	// Selected: the reachability policy applies (CI: unreachable fails).
	t.Setenv(DatabasesEnv, "mysql")
	r = recorder{}
	if db, _ := s.get(&r); db != nil || len(r.fatal) != 1 || !strings.Contains(r.fatal[0], "unreachable") || s.opened != 1 {
		t.Errorf("selected: db %v, fatal %q, skip %q, opened %d", db, r.fatal, r.skip, s.opened)
	}
}

// A server without a default (a PgBouncer) whose variable is unset is
// unreachable: skipped, or failed under CI, with the variable named.
func TestUnsetWithoutDefault(t *testing.T) {
	t.Parallel()
	if ok, _ := selected(os.Getenv(DatabasesEnv), postgresKind); os.Getenv(DatabasesEnv) != "" && !ok {
		t.Skip("PostgreSQL (and its PgBouncers) not selected")
	}
	s := &shared[*sql.DB]{
		kind: postgresKind, server: "PgBouncer", env: "SQLLOCK_DBTEST_UNSET_FOR_TEST",
		redact: redactURL, open: reach,
	}
	t.Cleanup(s.reset)
	var r recorder
	s.get(&r)
	msgs := append(r.fatal, r.skip...)
	if len(msgs) != 1 || !strings.Contains(msgs[0], "SQLLOCK_DBTEST_UNSET_FOR_TEST is not set") {
		t.Fatalf("fatal %q, skip %q", r.fatal, r.skip)
	}
	if s.opened != 1 {
		t.Errorf("tried %d times, want 1", s.opened)
	}
}

// The test PgBouncers answer, in both pool modes, and keep no connection.
func TestPgBouncerURL(t *testing.T) {
	t.Parallel()
	for _, m := range PoolModes {
		u := PgBouncerURL(t, m)
		db := OpenPostgres(t, u)
		// Exec without arguments: the simple protocol, no prepared
		// statement (which transaction pooling does not keep).
		if _, err := db.ExecContext(t.Context(), "SELECT 1"); err != nil {
			t.Fatalf("%s: SELECT 1: %v", m, err)
		}
	}
}

// A cleanup's drop is tried again after the server's deadlock error only.
func TestDeadlocked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("deadlock detected"), false},
		{fmt.Errorf("drop: %w", &pgconn.PgError{Code: "40P01"}), true},
		{&pgconn.PgError{Code: "55P03"}, false},
		{fmt.Errorf("drop: %w", &gomysql.MySQLError{Number: 1213}), true},
		{&gomysql.MySQLError{Number: 1205}, false},
	} {
		if got := deadlocked(c.err); got != c.want {
			t.Errorf("deadlocked(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
