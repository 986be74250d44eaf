package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/testutil"
)

// The migration lock as the dialects name it, for tests that hold it from
// outside: on PostgreSQL a transaction-scoped advisory lock keyed by the
// schema the migrations write to, on MySQL a GET_LOCK keyed by the hash of
// the database's name.
const (
	pgMigrationLock    = `SELECT pg_advisory_xact_lock(hashtextextended('sqllock:migrate:' || $1, 0))`
	pgMigrationTryLock = `SELECT pg_try_advisory_xact_lock(hashtextextended('sqllock:migrate:' || $1, 0))`
	myMigrationKey     = `CONCAT('sqllock_migrate:', SHA1(?))`
)

// Migrate calls whose context ends at any point leave nothing behind: no
// connection goes back to the pool inside the migration's transaction or
// holding the migration lock, and the lock database stays usable from this
// pool and from others.
func TestMigrateCancelledLeavesNothingBehind(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		app := "sqllock_test_" + e.ns // names this test's PostgreSQL sessions
		d := otherPool(t, e, app)
		if e.kind == "sqlite" {
			d = e.d // the pool's one connection is what a leak wedges
		}
		// Deadlines sweep from 0 to past the end of an uncut call (3 ms at
		// least), so that every step of a run is cut off somewhere; every
		// third call is also cancelled at a random point of that span.
		full := time.Hour
		for range 3 {
			start := time.Now()
			if err := sqllock.Migrate(ctx, d); err != nil {
				t.Fatal(err)
			}
			full = min(full, time.Since(start))
		}
		span := max(3*time.Millisecond, 2*full)
		seed := uint64(time.Now().UnixNano())
		rng := rand.New(rand.NewPCG(seed, 0))
		const calls = 150
		cut := 0
		for i := range calls {
			cctx, cancel := context.WithTimeout(ctx, time.Duration(i)*span/calls)
			var stop func() bool
			if i%3 == 0 {
				stop = time.AfterFunc(time.Duration(rng.Int64N(int64(span))), cancel).Stop
			}
			err := sqllock.Migrate(cctx, d)
			if stop != nil {
				stop()
			}
			cancel()
			if err != nil {
				cut++
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				t.Errorf("call %d (seed %d): %v, want nil or the context's error", i, seed, err)
			}
		}
		t.Logf("%d of %d calls cut off within %v", cut, calls, span)
		if t.Failed() {
			t.FailNow()
		}

		// The database is usable: from this pool, and from another one
		// (on SQLite, another pool on the same file: a leaked transaction
		// would hold the write lock).
		bctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for i, d := range []dialect.Dialect{d, otherPool(t, e, "")} {
			pool := [...]string{"this pool", "another pool"}[i]
			if err := sqllock.Migrate(bctx, d); err != nil {
				t.Fatalf("%s: migrate after cancelled migrations: %v", pool, err)
			}
			l, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			k, err := l.TryAcquire(bctx, "after-cancelled-migrations")
			if err != nil {
				t.Fatalf("%s: acquire after cancelled migrations: %v", pool, err)
			}
			if err := k.Release(bctx); err != nil {
				t.Fatal(err)
			}
		}

		// Nothing holds the migration lock, and no session of the pool is
		// left inside a transaction.
		switch e.kind {
		case "postgres":
			var n int
			err := e.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity a
WHERE a.application_name = $1 AND (a.state LIKE 'idle in transaction%'
	OR EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory'))`, app).Scan(&n)
			if err != nil || n != 0 {
				t.Fatalf("%d sessions of the pool in a transaction or holding an advisory lock (%v)", n, err)
			}
			tx, err := e.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			var free bool
			if err := tx.QueryRowContext(ctx, pgMigrationTryLock, e.ns).Scan(&free); err != nil || !free {
				t.Fatalf("migration lock free: %v (%v)", free, err)
			}
		case "mysql":
			var holder sql.NullInt64
			if err := e.db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(`+myMigrationKey+`)`, e.ns).Scan(&holder); err != nil || holder.Valid {
				t.Fatalf("migration lock held by connection %v (%v)", holder, err)
			}
		}
	})
}

// A Migrate waiting for the migration lock stops waiting, on the server
// too, when its context ends, and leaves the lock to the next migrator.
func TestMigrateWaitEndsWithContext(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		app := "sqllock_test_" + e.ns
		d := otherPool(t, e, app)
		release := holdMigrationLock(t, e)
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := sqllock.Migrate(wctx, d)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			release()
			t.Fatalf("Migrate beside a held migration lock: %v, want context.DeadlineExceeded", err)
		}
		// No statement of the migrator still waits on the server, while the
		// lock is still held: a cancellation reaches a loaded server late,
		// but it does reach it (a statement left waiting would wait until
		// the release).
		testutil.Eventually(ctx, t, "no statement of the migrator waits for the migration lock", func() bool {
			var n int
			var err error
			switch e.kind {
			case "postgres":
				err = e.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n)
			case "mysql":
				err = e.db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.processlist
WHERE db = ? AND info LIKE 'SELECT GET_LOCK%' AND id <> CONNECTION_ID()`, e.ns).Scan(&n)
			}
			if err != nil {
				release()
				t.Fatal(err)
			}
			return n == 0
		})
		release()
		if err := sqllock.Migrate(ctx, d); err != nil {
			t.Fatalf("Migrate after the lock was released: %v", err)
		}
	})
}

// On PostgreSQL the migration lock is keyed by the schema the migrations
// write to, as the server resolves it: a migrator stuck under the lock of
// one schema, named by its connection's search_path, does not hold up the
// migrators of another schema named the same way; and a migrator naming
// the schema with WithSchema waits for one that resolves to it through the
// search_path.
func TestMigrateLockPerResolvedSchema(t *testing.T) {
	t.Parallel()
	db, a := dbtest.Postgres(t)
	_, b := dbtest.Postgres(t)
	ctx := ctxT(t)
	app := "sqllock_test_" + a
	onPath := func(schema string) dialect.Dialect {
		d, err := postgres.New(openPostgres(t, "search_path", schema, "application_name", app))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	dA, dB := onPath(a), onPath(b)
	named, err := postgres.New(db, postgres.WithSchema(a))
	if err != nil {
		t.Fatal(err)
	}
	if err := sqllock.Migrate(ctx, dA); err != nil {
		t.Fatal(err)
	}

	// A migrator of schema a stuck under its lock: it waits for the
	// version table, which another transaction locks.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `LOCK TABLE "`+a+`".sqllock_schema_migrations IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	stuck := make(chan error, 1)
	go func() { stuck <- sqllock.Migrate(ctx, dA) }()
	testutil.Eventually(ctx, t, "the migrator of schema "+a+" waits for its lock", func() bool {
		select {
		case err := <-stuck:
			t.Fatalf("the migrator of schema %s was not held up: %v", a, err)
		default:
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE '%sqllock_schema_migrations%'`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	bctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := sqllock.Migrate(bctx, dB); err != nil {
		t.Fatalf("schema %s waited for the migrator of schema %s: %v", b, a, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-stuck; err != nil {
		t.Fatal(err)
	}

	// The lock's key is the resolved schema's, whether the search_path or
	// WithSchema names it.
	if tx, err = db.BeginTx(ctx, nil); err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, pgMigrationLock, a); err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]dialect.Dialect{"search_path": dA, "WithSchema": named} {
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := sqllock.Migrate(wctx, d)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("schema %s by %s beside its held migration lock: %v, want context.DeadlineExceeded", a, name, err)
		}
	}
	if err := sqllock.Migrate(ctx, dB); err != nil {
		t.Fatal(err)
	}
}

// otherPool returns a dialect on a pool of its own for e's schema, database
// or file. A non-empty app is the pool's PostgreSQL application_name.
func otherPool(t *testing.T, e *env, app string) dialect.Dialect {
	t.Helper()
	var (
		d   dialect.Dialect
		err error
	)
	switch e.kind {
	case "postgres":
		d, err = postgres.New(openPostgres(t, "application_name", app), postgres.WithSchema(e.ns))
	case "mysql":
		d, err = mysql.New(dbtest.OpenMySQL(t, dbtest.MySQLDSN(t)), mysql.WithDatabase(e.ns))
	case "sqlite":
		var db *sql.DB
		if db, err = sqlite.Open(e.ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		d, err = sqlite.New(db)
	}
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// openPostgres opens a private pool on the PostgreSQL test server, with
// run-time parameters given as name, value pairs (an empty value is left
// out).
func openPostgres(t *testing.T, params ...string) *sql.DB {
	t.Helper()
	u, err := url.Parse(dbtest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for i := 0; i < len(params); i += 2 {
		if params[i+1] != "" {
			q.Set(params[i], params[i+1])
		}
	}
	u.RawQuery = q.Encode()
	return dbtest.OpenPostgres(t, u.String())
}

// holdMigrationLock takes e's migration lock as another migrator would,
// until release is called.
func holdMigrationLock(t *testing.T, e *env) (release func()) {
	t.Helper()
	ctx := ctxT(t)
	db := e.db
	if e.kind == "sqlite" {
		db = otherPool(t, e, "").DB()
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var unlock string
	switch e.kind {
	case "postgres":
		if _, err = conn.ExecContext(ctx, "BEGIN"); err == nil {
			_, err = conn.ExecContext(ctx, pgMigrationLock, e.ns)
		}
		unlock = "ROLLBACK"
	case "mysql":
		var got int
		if err = conn.QueryRowContext(ctx, `SELECT GET_LOCK(`+myMigrationKey+`, 0)`, e.ns).Scan(&got); err == nil && got != 1 {
			err = fmt.Errorf("GET_LOCK returned %d", got)
		}
		unlock = "DO RELEASE_LOCK(" + strings.Replace(myMigrationKey, "?", "'"+e.ns+"'", 1) + ")"
	case "sqlite":
		_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		unlock = "ROLLBACK"
	}
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(context.WithoutCancel(ctx), unlock); err != nil {
				t.Error(err)
			}
			conn.Close()
		})
	}
	t.Cleanup(release)
	return release
}
