package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
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

// newSessions closes db's idle connections, so that the next statements
// run on new sessions.
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
	db, schema := dbtest.Postgres(t)
	d := dialectOn(t, db, schema)
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	const ttl = time.Hour
	table, err := sqllock.NewTable(d, sqllock.TableOptions{TTL: ttl})
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
	opt, err := sqllock.NewOptimistic(d, sqllock.OptimisticOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := opt.TryAcquire(ctx, "new"); !errors.As(err, &we) {
		t.Fatalf("optimistic TryAcquire after a promotion: %v, want a refusal", err)
	}
	sem, err := sqllock.NewSemaphore(d, 2, sqllock.SemaphoreOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx, "new"); !errors.As(err, &we) {
		t.Fatalf("semaphore TryAcquire after a promotion: %v, want a refusal", err)
	}
	rw, err := sqllock.NewRWLock(d, sqllock.RWLockOptions{TTL: time.Second})
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
	renewed, err := d.Catalogue().Locks.RenewMany(ctx, []dialect.Lease{{Name: held.Name(), Owner: held.Owner(), Token: held.Token()}}, ttl)
	if err != nil || len(renewed) != 1 || !renewed[0] {
		t.Fatalf("renewal during the grace: %v, %v", renewed, err)
	}
	// Without the grace, grants go on at once.
	free := dialectOn(t, db, schema, postgres.WithoutFailoverGrace())
	plain, err := sqllock.NewTable(free, sqllock.TableOptions{TTL: ttl})
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
