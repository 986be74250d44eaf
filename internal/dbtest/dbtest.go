// Package dbtest gives sqllock's integration tests a PostgreSQL and a
// MySQL/MariaDB server to run against.
//
// The servers are named by the environment variables SQLLOCK_TEST_POSTGRES_URL
// and SQLLOCK_TEST_MYSQL_DSN (scripts/test.sh sets both), and default to local
// servers on 127.0.0.1. Tests share one connection pool per server and process,
// and each test gets a fresh PostgreSQL schema or MySQL database of its own,
// dropped when the test ends, so tests can run in parallel.
//
// Two PgBouncers in front of the PostgreSQL server, in transaction and in
// session pooling, are named by SQLLOCK_TEST_PGBOUNCER_TX_URL and
// SQLLOCK_TEST_PGBOUNCER_SESSION_URL (see PgBouncerURL); they have no
// default.
//
// Reachability policy: when a server cannot be reached, a test that asks for
// it is skipped, or fails if the environment variable CI is non-empty. The
// first attempt to connect is remembered for the rest of the process, so an
// unreachable server costs one timeout, not one per test.
//
// Selection: SQLLOCK_TEST_DATABASES, when set, lists the databases to test
// against, comma-separated ("postgres", "mysql", "sqlite"); a test that asks
// for an unlisted one is skipped, even under CI, without connecting to it.
// make test-matrix sets it to "postgres" to run the PostgreSQL tests alone on
// each PostgreSQL major. SQLite needs no server: the suites that run on
// every dialect ask SQLite(t) before opening their SQLite file; tests of
// SQLite alone (its dialect's settings, several processes on one file) run
// whatever the list says.
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"go.uber.org/goleak"
)

// Environment variables naming the test servers.
const (
	// PostgresURLEnv names the environment variable holding the URL of the
	// PostgreSQL test server, e.g. DefaultPostgresURL.
	PostgresURLEnv = "SQLLOCK_TEST_POSTGRES_URL"
	// MySQLDSNEnv names the environment variable holding the
	// github.com/go-sql-driver/mysql DSN of the MySQL/MariaDB test server,
	// e.g. DefaultMySQLDSN.
	MySQLDSNEnv = "SQLLOCK_TEST_MYSQL_DSN"
	// TiDBDSNEnv names the environment variable holding the
	// github.com/go-sql-driver/mysql DSN of a TiDB test server (make
	// test-tidb starts one). It has no default: without it, the tests that
	// ask for TiDB are skipped, even when CI is set.
	TiDBDSNEnv = "SQLLOCK_TEST_TIDB_DSN"
	// CIEnv names the environment variable that, when non-empty, turns an
	// unreachable server from a skipped test into a failed one.
	CIEnv = "CI"
	// DatabasesEnv names the environment variable that, when non-empty,
	// lists the databases to test against, comma-separated: "postgres",
	// "mysql", "sqlite". Tests that ask for an unlisted one are skipped,
	// even when CI is set.
	DatabasesEnv = "SQLLOCK_TEST_DATABASES"
	// PgBouncerTxURLEnv and PgBouncerSessionURLEnv name the environment
	// variables holding the URLs of a PgBouncer in front of the PostgreSQL
	// test server, in transaction and in session pooling (scripts/test.sh
	// starts both). They have no default.
	PgBouncerTxURLEnv      = "SQLLOCK_TEST_PGBOUNCER_TX_URL"
	PgBouncerSessionURLEnv = "SQLLOCK_TEST_PGBOUNCER_SESSION_URL"
)

// Database names in DatabasesEnv.
const (
	postgresKind = "postgres"
	mysqlKind    = "mysql"
	sqliteKind   = "sqlite"
)

// kinds are the database names DatabasesEnv accepts.
var kinds = []string{postgresKind, mysqlKind, sqliteKind}

// Servers used when the environment does not name any.
const (
	// DefaultPostgresURL is the PostgreSQL server used when PostgresURLEnv
	// is unset or empty.
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	// DefaultMySQLDSN is the MySQL/MariaDB server used when MySQLDSNEnv is
	// unset or empty.
	DefaultMySQLDSN = "root@tcp(127.0.0.1:3306)/test"
)

// MaxOpenConns is the maximum number of connections of each shared pool.
const MaxOpenConns = 40

const (
	connectTimeout = 5 * time.Second // first connection to a server
	ddlTimeout     = 2 * time.Minute // creating or dropping a schema: a hang guard (a forced DROP DATABASE took over 30 s on a loaded server)
	maxIdleConns   = 10              // idle connections kept by shared pools
)

// shared is a process-wide handle on one server, opened at most once.
type shared[T any] struct {
	kind   string                                           // name in DatabasesEnv: "postgres"
	server string                                           // for messages: "PostgreSQL"
	env    string                                           // environment variable naming the server
	def    string                                           // server used when env is unset
	redact func(string) string                              // hides a password in a URL or DSN
	open   func(context.Context, string) (T, func(), error) // connects; returns a closer

	mu     sync.Mutex
	done   bool // open was attempted; val, close, err are final
	url    string
	val    T
	close  func()
	err    error
	opened int // attempts to open, for tests
}

// get returns the handle and the URL or DSN it was opened with, connecting
// on the first call. If DatabasesEnv does not select the server, t is
// skipped; if the server is unreachable it applies the reachability policy:
// t is skipped, or fails when CI is set.
func (s *shared[T]) get(t testing.TB) (T, string) {
	t.Helper()
	if !wanted(t, s.kind, s.server) {
		var zero T
		return zero, ""
	}
	s.mu.Lock()
	if !s.done {
		s.done = true
		s.opened++
		s.url = envOr(s.env, s.def)
		if s.url == "" {
			s.err = fmt.Errorf("%s is not set", s.env)
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
			s.val, s.close, s.err = s.open(ctx, s.url)
			cancel()
		}
	}
	val, u, err := s.val, s.url, s.err
	s.mu.Unlock()
	if err != nil {
		unreachable(t, os.Getenv(CIEnv) != "", s.server, s.env, s.redact(u), err)
	}
	return val, u
}

// reset closes the handle, if open, so that the next get connects again.
func (s *shared[T]) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.close != nil {
		s.close()
	}
	var zero T
	s.done, s.url, s.val, s.close, s.err = false, "", zero, nil, nil
}

// unreachable is the reachability policy, in one place: fail under CI, skip
// otherwise.
func unreachable(t testing.TB, ci bool, server, env, u string, err error) {
	t.Helper()
	if ci {
		t.Fatalf("dbtest: %s at %s is unreachable: %v\n"+
			"%s is set, so this fails instead of skipping: start the server, or set %s to a reachable one (scripts/test.sh does both)",
			server, u, err, CIEnv, env)
		return
	}
	t.Skipf("dbtest: skipping: %s at %s is unreachable: %v (set %s, or run make test)", server, u, err, env)
}

// wanted applies the selection: it reports whether DatabasesEnv selects
// kind, skipping t if not, and failing it if the list names an unknown
// database.
func wanted(t testing.TB, kind, server string) bool {
	t.Helper()
	list := os.Getenv(DatabasesEnv)
	if list == "" {
		return true
	}
	ok, err := selected(list, kind)
	if err != nil {
		t.Fatalf("dbtest: %s: %v", DatabasesEnv, err)
		return false
	}
	if !ok {
		t.Skipf("dbtest: skipping: %s is not among the databases %s=%q selects", server, DatabasesEnv, list)
		return false
	}
	return true
}

// selected reports whether the comma-separated list of database names, the
// value of DatabasesEnv, includes kind. A name it does not know is an error,
// so that a misspelt list does not skip everything silently.
func selected(list, kind string) (bool, error) {
	found := false
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(kinds, name) {
			return false, fmt.Errorf("unknown database %q in %q; the names are %s", name, list, strings.Join(kinds, ", "))
		}
		found = found || name == kind
	}
	return found, nil
}

// envOr returns the value of the environment variable env, or def if it is
// unset or empty.
func envOr(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

var (
	pgDB = &shared[*sql.DB]{
		kind: postgresKind, server: "PostgreSQL", env: PostgresURLEnv, def: DefaultPostgresURL,
		redact: redactURL, open: openSQL("pgx"),
	}
	pgPool = &shared[*pgxpool.Pool]{
		kind: postgresKind, server: "PostgreSQL", env: PostgresURLEnv, def: DefaultPostgresURL,
		redact: redactURL, open: openPgxPool,
	}
	myDB = &shared[*sql.DB]{
		kind: mysqlKind, server: "MySQL", env: MySQLDSNEnv, def: DefaultMySQLDSN,
		redact: redactDSN, open: openSQL("mysql"),
	}
	tidbDB = &shared[*sql.DB]{
		server: "TiDB", env: TiDBDSNEnv,
		redact: redactDSN, open: openSQL("mysql"),
	}
	pgbTx = &shared[*sql.DB]{
		kind: postgresKind, server: "PgBouncer (transaction pooling)", env: PgBouncerTxURLEnv,
		redact: redactURL, open: reach,
	}
	pgbSession = &shared[*sql.DB]{
		kind: postgresKind, server: "PgBouncer (session pooling)", env: PgBouncerSessionURLEnv,
		redact: redactURL, open: reach,
	}
)

// PoolMode is a PgBouncer pool_mode.
type PoolMode string

// The pool modes of the test PgBouncers.
const (
	Transaction PoolMode = "transaction"
	Session     PoolMode = "session"
)

// PoolModes lists the pool modes of the test PgBouncers.
var PoolModes = []PoolMode{Transaction, Session}

// PgBouncerURL returns the URL of the test PgBouncer in pool mode m, in
// front of the PostgreSQL test server: the value of PgBouncerTxURLEnv or
// PgBouncerSessionURLEnv. Any database of the server is reached by its own
// name, and tables are best kept in a schema named in the dialect
// (postgres.WithSchema): a pooler refuses search_path as a startup
// parameter. If the variable is unset or the PgBouncer unreachable, t is
// skipped, or fails when CI is set.
func PgBouncerURL(t testing.TB, m PoolMode) string {
	t.Helper()
	s := pgbSession
	if m == Transaction {
		s = pgbTx
	}
	_, u := s.get(t)
	return u
}

// openSQL returns an opener of shared database/sql pools for driver.
func openSQL(driver string) func(context.Context, string) (*sql.DB, func(), error) {
	return func(ctx context.Context, dsn string) (*sql.DB, func(), error) {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			return nil, nil, err
		}
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, nil, err
		}
		db.SetMaxOpenConns(MaxOpenConns)
		db.SetMaxIdleConns(maxIdleConns)
		return db, func() { db.Close() }, nil
	}
}

// reach checks that a PostgreSQL URL answers, and keeps no connection: a
// session pooler would keep a server connection for it.
func reach(ctx context.Context, u string) (*sql.DB, func(), error) {
	_, closeDB, err := openSQL("pgx")(ctx, u)
	if err == nil {
		closeDB()
	}
	return nil, nil, err
}

func openPgxPool(ctx context.Context, u string) (*pgxpool.Pool, func(), error) {
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns = MaxOpenConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, pool.Close, nil
}

// redactURL hides the password of a PostgreSQL URL, for messages.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// redactDSN hides the password of a MySQL DSN, for messages.
func redactDSN(s string) string {
	c, err := gomysql.ParseDSN(s)
	if err != nil {
		return "(unparsable DSN)"
	}
	if c.Passwd != "" {
		c.Passwd = "xxxxx"
	}
	return c.FormatDSN()
}

// PostgresURL returns the URL of the PostgreSQL test server: the value of
// SQLLOCK_TEST_POSTGRES_URL, or DefaultPostgresURL. If the server is
// unreachable, t is skipped, or fails when CI is set.
func PostgresURL(t testing.TB) string {
	t.Helper()
	_, u := pgDB.get(t)
	return u
}

// MySQLDSN returns the DSN of the MySQL/MariaDB test server: the value of
// SQLLOCK_TEST_MYSQL_DSN, or DefaultMySQLDSN. If the server is unreachable,
// t is skipped, or fails when CI is set.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	_, dsn := myDB.get(t)
	return dsn
}

// Postgres returns the process-wide database/sql pool (driver "pgx") on the
// PostgreSQL test server, and the name of a new, empty schema for this test,
// dropped with everything in it when the test ends. The pool must not be
// closed. If the server is unreachable, t is skipped, or fails when CI is set.
func Postgres(t testing.TB) (db *sql.DB, schema string) {
	t.Helper()
	db, _ = pgDB.get(t)
	schema = newName()
	ddl(t, `CREATE SCHEMA "`+schema+`"`, func(ctx context.Context, q string) error {
		_, err := db.ExecContext(ctx, q)
		return err
	})
	cleanupDDL(t, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`, func(ctx context.Context, q string) error {
		_, err := db.ExecContext(ctx, q)
		return err
	})
	return db, schema
}

// PostgresDatabase creates a new, empty database on the PostgreSQL test
// server for this test, dropped (with WITH (FORCE), which ends its
// sessions) when the test ends, and returns its name: for programs that
// cannot be given a schema, such as a command-line client through a
// pooler, which refuses search_path as a startup parameter.
func PostgresDatabase(t testing.TB) string {
	t.Helper()
	db, _ := pgDB.get(t)
	name := newName()
	exec := func(ctx context.Context, q string) error {
		_, err := db.ExecContext(ctx, q)
		return err
	}
	ddl(t, `CREATE DATABASE "`+name+`"`, exec)
	cleanupDDL(t, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`, exec)
	return name
}

// PostgresPool is Postgres for pgx's own pool: it returns the process-wide
// *pgxpool.Pool on the PostgreSQL test server and a new schema for this test,
// dropped when the test ends. The pool must not be closed.
func PostgresPool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	PostgresURL(t) // one reachability decision per server
	pool, _ := pgPool.get(t)
	schema := newName()
	ddl(t, `CREATE SCHEMA "`+schema+`"`, func(ctx context.Context, q string) error {
		_, err := pool.Exec(ctx, q)
		return err
	})
	cleanupDDL(t, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`, func(ctx context.Context, q string) error {
		_, err := pool.Exec(ctx, q)
		return err
	})
	return pool, schema
}

// MySQL returns the process-wide database/sql pool on the MySQL/MariaDB test
// server, and the name of a new, empty database for this test, dropped when
// the test ends. The pool's DSN is exactly the configured one: no parseTime,
// no clientFoundRows. The pool must not be closed. If the server is
// unreachable, t is skipped, or fails when CI is set.
func MySQL(t testing.TB) (db *sql.DB, database string) {
	t.Helper()
	db, _ = myDB.get(t)
	return db, newDatabase(t, db)
}

// TiDBDSN returns the DSN of the TiDB test server: the value of
// SQLLOCK_TEST_TIDB_DSN. If it is unset, t is skipped; if the server is
// unreachable, t is skipped, or fails when CI is set.
func TiDBDSN(t testing.TB) string {
	t.Helper()
	skipNoTiDB(t)
	_, dsn := tidbDB.get(t)
	return dsn
}

// TiDB is MySQL on the TiDB test server (see TiDBDSN).
func TiDB(t testing.TB) (db *sql.DB, database string) {
	t.Helper()
	skipNoTiDB(t)
	db, _ = tidbDB.get(t)
	return db, newDatabase(t, db)
}

// skipNoTiDB skips t when no TiDB test server is named: TiDB is opt-in.
func skipNoTiDB(t testing.TB) {
	t.Helper()
	if os.Getenv(TiDBDSNEnv) == "" {
		t.Skipf("dbtest: skipping: %s is not set (make test-tidb builds and starts a TiDB server)", TiDBDSNEnv)
	}
}

// newDatabase creates a new, empty database on db, dropped with
// everything in it when t ends, and returns its name.
func newDatabase(t testing.TB, db *sql.DB) (database string) {
	t.Helper()
	database = newName()
	ddl(t, "CREATE DATABASE `"+database+"`", func(ctx context.Context, q string) error {
		_, err := db.ExecContext(ctx, q)
		return err
	})
	cleanupDDL(t, "DROP DATABASE IF EXISTS `"+database+"`", func(ctx context.Context, q string) error {
		_, err := db.ExecContext(ctx, q)
		return err
	})
	return database
}

// SQLite skips t when SQLLOCK_TEST_DATABASES is set and leaves "sqlite" out.
// The suites that run on every dialect call it before opening their SQLite
// file (SQLite needs no server, so there is nothing else to provide).
func SQLite(t testing.TB) {
	t.Helper()
	wanted(t, sqliteKind, "SQLite")
}

// OpenPostgres opens a private database/sql pool (driver "pgx") on url for
// this test alone, closed when the test ends: for tests that set the pool's
// size or connection parameters. It does not connect; get url from
// PostgresURL so that the reachability policy applies.
func OpenPostgres(t testing.TB, url string) *sql.DB {
	t.Helper()
	return openPrivate(t, "pgx", url, redactURL)
}

// OpenMySQL opens a private database/sql pool on dsn for this test alone,
// closed when the test ends: for tests that set the pool's size or DSN
// parameters. It does not connect; derive dsn from MySQLDSN so that the
// reachability policy applies.
func OpenMySQL(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	return openPrivate(t, "mysql", dsn, redactDSN)
}

func openPrivate(t testing.TB, driver, dsn string, redact func(string) string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("dbtest: open %s %s: %v", driver, redact(dsn), err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("dbtest: close %s pool: %v", driver, err)
		}
	})
	return db
}

// CloseAll closes the shared pools. Call it from TestMain after m.Run, before
// checking for leaked goroutines; a later call of a helper opens them again.
func CloseAll() {
	pgDB.reset()
	pgPool.reset()
	myDB.reset()
	tidbDB.reset()
	pgbTx.reset()
	pgbSession.reset()
}

// newName returns a fresh schema or database name: "t_" and 12 random
// lowercase hex digits.
func newName() string {
	b := make([]byte, 6)
	rand.Read(b) // never fails
	return "t_" + hex.EncodeToString(b)
}

// ddl runs q with a bounded context and fails t if it fails.
func ddl(t testing.TB, q string, exec func(context.Context, string) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ddlTimeout)
	defer cancel()
	if err := exec(ctx, q); err != nil {
		t.Fatalf("dbtest: %s: %v", q, err)
	}
}

// cleanupDDL runs q when t ends, after the cleanups registered later (which
// close the test's private pools and release its locks).
func cleanupDDL(t testing.TB, q string, exec func(context.Context, string) error) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), ddlTimeout)
		defer cancel()
		err := exec(ctx, q)
		// A drop that met a deadlock (with a session of the test's that
		// was still ending, on a loaded server) was rolled back: again.
		for pause := 50 * time.Millisecond; deadlocked(err) && ctx.Err() == nil; pause *= 2 {
			time.Sleep(pause) // a backoff between attempts, not a synchronisation
			err = exec(ctx, q)
		}
		if err != nil {
			t.Errorf("dbtest: cleanup: %s: %v", q, err)
		}
	})
}

// deadlocked reports whether err is the server's deadlock error, whose
// statement was rolled back: PostgreSQL's SQLSTATE 40P01, MySQL's 1213.
func deadlocked(err error) bool {
	if err == nil {
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "40P01"
	}
	var my *gomysql.MySQLError
	return errors.As(err, &my) && my.Number == 1213
}

// Finish ends a test binary's TestMain: it closes the shared pools and, if
// the tests passed (code 0), fails the run on leaked goroutines. It returns
// the exit code:
//
//	os.Exit(dbtest.Finish(m.Run()))
func Finish(code int) int {
	CloseAll()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	return code
}
