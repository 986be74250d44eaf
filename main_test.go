package sqllock_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/internal/testutil"
)

func TestMain(m *testing.M) {
	testutil.ChildMain(childEnv, childConfig.run) // a child process of a SQLite test
	code := m.Run()
	nonNilDB.Close()
	removeCLI()
	os.Exit(dbtest.Finish(code))
}

// nonNilDB is a pool that is never used to connect: for argument checks.
var nonNilDB, _ = sql.Open("pgx", "postgres://nowhere.invalid/none")

// env is one dialect on a private, migrated schema (Postgres), database
// (MySQL) or database file (SQLite).
type env struct {
	kind string
	db   *sql.DB
	d    dialect.Dialect
	ns   string    // schema, database, or SQLite file
	s    *strategy // the locker under test; table unless eachLocker says
	pess bool      // eachStrategy: the pessimistic strategy is under test
}

// locker is what the lease-based strategies offer.
type locker interface {
	sqllock.Locker
	List(ctx context.Context) ([]sqllock.LockInfo, error)
}

// strategy is a lease-based strategy under test. Tests give either
// strategy TableOptions; Fair is the table's alone.
type strategy struct {
	name  string
	table string // its lock table
	new   func(d dialect.Dialect, opts sqllock.TableOptions) (locker, error)
	// grant acquires a fresh name without a locker: nobody renews it.
	grant func(ctx context.Context, d dialect.Dialect, p dialect.AcquireParams) (int64, error)
	// stmts returns the lease statements on its table, with which a test
	// plays a process that crashed or paused.
	stmts func(d dialect.Dialect) sqlrun.LeaseTable
}

var (
	tableStrategy = &strategy{
		name:  "table",
		table: "sqllock_locks",
		new: func(d dialect.Dialect, opts sqllock.TableOptions) (locker, error) {
			return sqllock.NewTable(d, opts)
		},
		grant: func(ctx context.Context, d dialect.Dialect, p dialect.AcquireParams) (int64, error) {
			return tablesOf(d).Locks.Acquire(ctx, p)
		},
		stmts: func(d dialect.Dialect) sqlrun.LeaseTable { return tablesOf(d).Locks },
	}
	optimisticStrategy = &strategy{
		name:  "optimistic",
		table: "sqllock_versions",
		new: func(d dialect.Dialect, opts sqllock.TableOptions) (locker, error) {
			return sqllock.NewOptimistic(d, optimisticOptions(opts))
		},
		grant: func(ctx context.Context, d dialect.Dialect, p dialect.AcquireParams) (int64, error) {
			return tablesOf(d).Versions.Create(ctx, p)
		},
		stmts: func(d dialect.Dialect) sqlrun.LeaseTable { return tablesOf(d).Versions },
	}
	leaseStrategies = []*strategy{tableStrategy, optimisticStrategy}
)

// tablesOf returns the tables the runner builds from d's catalogue; the
// dialects of these tests come from their constructors, which check it.
func tablesOf(d dialect.Dialect) *sqlrun.Tables {
	tb, err := sqlrun.Open(d)
	if err != nil {
		panic(err)
	}
	return tb
}

type envMaker struct {
	kind string
	make func(t *testing.T) *env
}

var envs = []envMaker{
	{"postgres", func(t *testing.T) *env {
		db, schema := dbtest.Postgres(t)
		d, err := postgres.New(db, postgres.WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		closeAtEnd(t, d)
		return migrated(t, &env{kind: "postgres", db: db, d: d, ns: schema, s: tableStrategy})
	}},
	{"mysql", func(t *testing.T) *env {
		db, database := dbtest.MySQL(t)
		d, err := mysql.New(db, mysql.WithDatabase(database))
		if err != nil {
			t.Fatal(err)
		}
		closeAtEnd(t, d)
		return migrated(t, &env{kind: "mysql", db: db, d: d, ns: database, s: tableStrategy})
	}},
	{"sqlite", func(t *testing.T) *env {
		dbtest.SQLite(t)
		db, path := openSQLite(t)
		d, err := sqlite.New(db)
		if err != nil {
			t.Fatal(err)
		}
		closeAtEnd(t, d)
		return migrated(t, &env{kind: "sqlite", db: db, d: d, ns: path, s: tableStrategy})
	}},
}

// closeAtEnd closes the dialect d when t ends, stopping its listening (or
// bell) connection (cleanups run in reverse: before its pool closes).
func closeAtEnd(t testing.TB, d interface{ Close(context.Context) error }) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Errorf("closing the dialect: %v", err)
		}
	})
}

// openSQLite opens a fresh SQLite database file of the test's own, closed
// when the test ends.
func openSQLite(t testing.TB) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "locks.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

func migrated(t *testing.T, e *env) *env {
	t.Helper()
	if err := sqllock.Migrate(ctxT(t), e.d); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return e
}

// each runs fn against every dialect, in parallel subtests.
func each(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Parallel()
	for _, m := range envs {
		t.Run(m.kind, func(t *testing.T) {
			t.Parallel()
			fn(t, m.make(t))
		})
	}
}

// eachLocker runs fn against every lease-based strategy on every dialect,
// in parallel subtests: the conformance suite.
func eachLocker(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Parallel()
	for _, m := range envs {
		for _, s := range leaseStrategies {
			t.Run(m.kind+"/"+s.name, func(t *testing.T) {
				t.Parallel()
				e := m.make(t)
				e.s = s
				fn(t, e)
			})
		}
	}
}

// eachStrategy runs fn against every strategy on every dialect that has
// it: the lease-based ones as eachLocker does, and the pessimistic one. fn
// makes its lockers with e.anyLocker.
func eachStrategy(t *testing.T, fn func(t *testing.T, e *env)) {
	eachLocker(t, fn)
	for _, m := range envs {
		if m.kind == "sqlite" {
			continue
		}
		t.Run(m.kind+"/pessimistic", func(t *testing.T) {
			t.Parallel()
			e := m.make(t)
			e.pess = true
			fn(t, e)
		})
	}
}

// anyLocker returns a locker of the strategy under test, with default
// options.
func (e *env) anyLocker(t *testing.T) sqllock.Locker {
	t.Helper()
	if e.pess {
		return e.pessimistic(t, sqllock.PessimisticOptions{})
	}
	return e.locker(t, sqllock.TableOptions{})
}

// pessimistic returns a pessimistic locker.
//
// It runs on a pool of its own (same namespace): every held lock pins a
// connection, and TryAcquire refuses at once with ErrPoolExhausted when the
// pool is full, which the process-wide pool of a parallel suite can be at
// any moment.
func (e *env) pessimistic(t *testing.T, opts sqllock.PessimisticOptions) *sqllock.Pessimistic {
	t.Helper()
	_, d := e.sibling(t, 0)
	l, err := sqllock.NewPessimistic(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// ctxT is the test's context with a deadline, so no test can hang. The
// deadline is for a hang, not a measure: some tests run whole campaigns
// under it, which took over 2 minutes on an overloaded machine.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// q rewrites a statement written with ? placeholders and {locks}/{ns} for
// this dialect.
func (e *env) q(s string) string {
	out := make([]byte, 0, len(s)+16)
	n := 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '?' && e.kind == "postgres":
			n++
			out = fmt.Appendf(out, "$%d", n)
		case s[i] == '{':
			j := i + 1
			for s[j] != '}' {
				j++
			}
			out = append(out, e.table(s[i+1:j])...)
			i = j
		default:
			out = append(out, s[i])
		}
	}
	return string(out)
}

// table qualifies a table name with the test's schema or database.
func (e *env) table(name string) string {
	switch e.kind {
	case "postgres":
		return `"` + e.ns + `".` + name
	case "sqlite": // one file, one namespace
		return name
	}
	return "`" + e.ns + "`." + name
}

// expire makes the lease on name expire now, as if its holder had stopped
// renewing TTL ago.
func (e *env) expire(t *testing.T, name string) {
	t.Helper()
	set := "expires_at = now() - INTERVAL '1' SECOND"
	switch e.kind {
	case "mysql":
		set = "expires_at = UTC_TIMESTAMP(6) - INTERVAL '1' SECOND"
	case "sqlite": // microseconds since the epoch
		set = "expires_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER) - 1000000"
	}
	res, err := e.db.ExecContext(ctxT(t), e.q("UPDATE {"+e.s.table+"} SET "+set+" WHERE name = ?"), name)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("expire %q: %d rows", name, n)
	}
}

// optimisticOptions are the options of o that the optimistic strategy
// has: a test gives both lease strategies TableOptions.
func optimisticOptions(o sqllock.TableOptions) sqllock.OptimisticOptions {
	return sqllock.OptimisticOptions{LeaseOptions: o.LeaseOptions, MinHold: o.MinHold}
}

// locker returns a locker of the strategy under test.
func (e *env) locker(t *testing.T, opts sqllock.TableOptions) locker {
	t.Helper()
	l, err := e.s.new(e.d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
