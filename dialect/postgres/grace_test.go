package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/testutil"
)

// pretendPromotion makes schema's sqllock tables remember the timeline
// before the server's as the last one seen, as on a standby just promoted:
// the next grant on a new session finds a new timeline. The pool's idle
// sessions are closed: each notes the timeline on which the grace let it
// grant, and a real promotion changes the timeline, which this cannot.
func pretendPromotion(ctx context.Context, t *testing.T, db *sql.DB, schema string) {
	t.Helper()
	if _, err := db.ExecContext(ctx, `SELECT setval('"`+schema+`".sqllock_timeline_seen',
  ((last_value >> 42) - 1) << 42) FROM "`+schema+`".sqllock_timeline_seen`); err != nil {
		t.Fatal(err)
	}
	newSessions(db)
}

// graceSetup migrates a new schema on a pool of the test's own, and
// returns the pool, the schema and the dialect on them.
func graceSetup(ctx context.Context, t *testing.T) (*sql.DB, string, *postgres.Dialect) {
	t.Helper()
	_, schema := dbtest.Postgres(t)
	db := dbtest.OpenPostgres(t, dbtest.PostgresURL(t))
	d := dialectOn(t, db, schema)
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	return db, schema, d
}

// newSessions closes the idle connections of db, a pool of the test's
// own, so that the next statements run on new sessions.
func newSessions(db *sql.DB) {
	db.SetMaxIdleConns(-1)
	db.SetMaxIdleConns(2) // database/sql's default
}

// After a timeline change, the server grants no lease, on any primitive,
// until the longest TTL granted has passed since it saw the change: a
// TryAcquire is refused (ErrLocked, naming the promotion), an Acquire
// waits, leases granted on the timeline before go on being renewed, and
// grants resume once the grace is over. WithoutFailoverGrace grants at once.
func TestFailoverGrace(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// A pool of its own: pretendPromotion closes its idle sessions.
	db, schema, d := graceSetup(ctx, t)
	const ttl = time.Hour
	table, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl}})
	if err != nil {
		t.Fatal(err)
	}
	held, err := table.TryAcquire(ctx, "held") // sets the longest TTL granted
	if err != nil {
		t.Fatal(err)
	}
	pretendPromotion(ctx, t, db, schema)

	_, err = table.TryAcquire(ctx, "new")
	var we *dialect.WaitError
	if !errors.Is(err, sqllock.ErrLocked) || !errors.As(err, &we) || !strings.Contains(err.Error(), "promotion") {
		t.Fatalf("TryAcquire after a promotion: %v, want a refusal naming the promotion", err)
	}
	if we.Left <= ttl-time.Minute || we.Left > ttl {
		t.Fatalf("grace left %v, want about %v", we.Left, ttl)
	}
	opt, err := sqllock.NewOptimistic(d, sqllock.OptimisticOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := opt.TryAcquire(ctx, "new"); !errors.As(err, &we) {
		t.Fatalf("optimistic TryAcquire after a promotion: %v, want a refusal", err)
	}
	sem, err := sqllock.NewSemaphore(d, 2, sqllock.SemaphoreOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx, "new"); !errors.As(err, &we) {
		t.Fatalf("semaphore TryAcquire after a promotion: %v, want a refusal", err)
	}
	rw, err := sqllock.NewRWLock(d, sqllock.LeaseOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.TryAcquireShared(ctx, "new"); !errors.As(err, &we) {
		t.Fatalf("read/write TryAcquireShared after a promotion: %v, want a refusal", err)
	}
	// A waiter sleeps out the grace rather than asking again and again.
	actx, acancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = table.Acquire(actx, "new")
	acancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire during the grace: %v, want the context's deadline", err)
	}
	// The lease granted before the promotion goes on being renewed.
	renewed, err := testutil.Renewed(testutil.Tables(t, d).Locks.RenewMany(ctx, []dialect.Lease{{Name: held.Name(), Owner: held.Owner(), Token: held.Token()}}, ttl))
	if err != nil || len(renewed) != 1 || !renewed[0] {
		t.Fatalf("renewal during the grace: %v, %v", renewed, err)
	}
	// Without the grace, grants go on at once.
	free := dialectOn(t, db, schema, postgres.WithoutFailoverGrace())
	plain, err := sqllock.NewTable(free, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := plain.TryAcquire(ctx, "plain")
	if err != nil {
		t.Fatalf("WithoutFailoverGrace: %v", err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Once the grace is over, grants resume.
	if _, err := db.ExecContext(ctx, `SELECT setval('"`+schema+`".sqllock_timeline_seen',
  last_value - 2 * 3600 * 1000) FROM "`+schema+`".sqllock_timeline_seen`); err != nil {
		t.Fatal(err)
	}
	k, err = table.TryAcquire(ctx, "new")
	if err != nil {
		t.Fatalf("TryAcquire after the grace: %v", err)
	}
	if err := errors.Join(k.Release(ctx), held.Release(ctx)); err != nil {
		t.Fatal(err)
	}
}

// A session's note of the grace it passed (expandEpoch) names the schema's
// grace table, not the schema: once the grace's objects are dropped and
// created again (migration 16 down and up), the new table records the TTL
// of the next grant, even on the session that noted one before, so that a
// failover then waits it out.
func TestGraceNoteFollowsTheSchema(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	db, schema, d := graceSetup(ctx, t)
	db.SetMaxOpenConns(1) // one session throughout
	const ttl = time.Hour
	table, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl}})
	if err != nil {
		t.Fatal(err)
	}
	grant := func() (pid int) {
		t.Helper()
		k, err := table.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	maxTTL := func() time.Duration {
		t.Helper()
		var us int64
		if err := db.QueryRowContext(ctx, `SELECT max_ttl FROM "`+schema+`".sqllock_grace`).Scan(&us); err != nil {
			t.Fatal(err)
		}
		return time.Duration(us) * time.Microsecond
	}
	first := grant()
	if got := maxTTL(); got != ttl {
		t.Fatalf("longest TTL after the first grant: %v, want %v", got, ttl)
	}
	// Migration 16 down and up, on the same session.
	if _, err := db.ExecContext(ctx, `SET search_path TO "`+schema+`"`); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"16_failover_grace.down.sql", "16_failover_grace.up.sql"} {
		text, err := fs.ReadFile(postgres.Migrations(), file)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, string(text)); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	if got := maxTTL(); got != 0 {
		t.Fatalf("longest TTL after migration 16 down and up: %v, want 0", got)
	}
	if again := grant(); again != first {
		t.Fatalf("the grants ran on sessions %d and %d, want one", first, again)
	}
	if got := maxTTL(); got != ttl {
		t.Fatalf("longest TTL after a grant on the new grace table: %v, want %v", got, ttl)
	}
}
