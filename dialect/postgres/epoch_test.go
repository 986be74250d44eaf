package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/internal/testutil"
)

// serverTimeline reads the server's current timeline ID the way an operator
// would: from pg_control_checkpoint(), which may lag a promotion but not on
// a server that was never promoted.
func serverTimeline(ctx context.Context, t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var tl int64
	if err := db.QueryRowContext(ctx, `SELECT timeline_id FROM pg_control_checkpoint()`).Scan(&tl); err != nil {
		t.Fatal(err)
	}
	return tl
}

// Every token and version carries the server's timeline in its high bits,
// and is larger than a token of an installation upgraded from before
// (whose tokens are plain sequence values).
func TestTokensCarryTimeline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	env := newEnv(t)
	d := env.Dialect.(*postgres.Dialect)
	tl := serverTimeline(ctx, t, d.DB())
	if tl < 1 {
		t.Fatalf("timeline %d", tl)
	}
	check := func(what string, token int64) {
		t.Helper()
		if got := postgres.Timeline(token); got != tl {
			t.Fatalf("%s %d is of timeline %d, want %d", what, token, got, tl)
		}
		if token <= 0 {
			t.Fatalf("%s %d is not positive", what, token)
		}
	}
	token, err := testutil.Tables(t, d).Locks.Acquire(ctx, dialect.AcquireParams{Name: "a", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	check("token", token)
	if err := env.Expire(ctx, "sqllock_locks", "a"); err != nil {
		t.Fatal(err)
	}
	taken, err := testutil.Tables(t, d).Locks.Acquire(ctx, dialect.AcquireParams{Name: "a", Owner: "p", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	check("takeover token", taken)
	if taken <= token {
		t.Fatalf("takeover token %d not above %d", taken, token)
	}
	v, err := testutil.Tables(t, d).Versions.Create(ctx, dialect.AcquireParams{Name: "v", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	check("version", v)
	pl, err := sqllock.NewPessimistic(d, sqllock.PessimisticOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k, err := pl.TryAcquire(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	check("pessimistic token", k.Token())
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A lease granted on another timeline than the server's current one (here
// a later one, standing in for an earlier one on a promoted server) is
// neither renewed nor guarded nor re-entered: its holder learns it is lost.
// A lease of before tokens carried a timeline (epoch 0) still is.
func TestLeaseOfAnotherTimelineIsLost(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	db, schema := dbtest.Postgres(t)
	d := dialectOn(t, db, schema)
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	tl := serverTimeline(ctx, t, db)
	other := (tl+1)<<postgres.TimelineShift + 5
	for _, tb := range []struct {
		table, col string
		lt         sqlrun.LeaseTable
	}{{"sqllock_locks", "token", testutil.Tables(t, d).Locks}, {"sqllock_versions", "version", testutil.Tables(t, d).Versions}} {
		for _, token := range []int64{other, 7} {
			if _, err := db.ExecContext(ctx, `INSERT INTO "`+schema+`".`+tb.table+` (name, owner, `+tb.col+`, holds, acquired_at, expires_at)
VALUES ('n', 'o', $1, 1, now(), now() + interval '1 hour')
ON CONFLICT (name) DO UPDATE SET `+tb.col+` = $1`, token); err != nil {
				t.Fatal(err)
			}
			want := token == 7
			l := dialect.Lease{Name: "n", Owner: "o", Token: token}
			ok, err := testutil.Renewed(tb.lt.RenewMany(ctx, []dialect.Lease{l}, time.Hour))
			if err != nil || ok[0] != want {
				t.Fatalf("%s: renewal of token %d: %v %v, want renewed: %v", tb.table, token, ok, err, want)
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			guarded, err := tb.lt.Guard(ctx, tx, l)
			_ = tx.Rollback()
			if err != nil || guarded != want {
				t.Fatalf("%s: guard of token %d: %v %v, want %v", tb.table, token, guarded, err, want)
			}
		}
	}
	// Re-entry by the same owner of a live lease of another timeline is
	// refused; so is re-entry at that version.
	if _, err := db.ExecContext(ctx, `UPDATE "`+schema+`".sqllock_locks SET token = $1`, other); err != nil {
		t.Fatal(err)
	}
	if token, err := testutil.Tables(t, d).Locks.Acquire(ctx, dialect.AcquireParams{Name: "n", Owner: "o", TTL: time.Minute}); err != nil || token != 0 {
		t.Fatalf("re-entry of a lease of another timeline: %d %v, want refused", token, err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE "`+schema+`".sqllock_versions SET version = $1`, other); err != nil {
		t.Fatal(err)
	}
	ok, err := testutil.Tables(t, d).Versions.Reenter(ctx, dialect.SwapParams{Name: "n", Owner: "o", TTL: time.Minute, Version: other})
	if err != nil || ok {
		t.Fatalf("re-entry of a version of another timeline: %v %v, want refused", ok, err)
	}
}

// A read-only server (here a session whose transactions default to read
// only, as on a standby) refuses grants with ErrReadOnly.
func TestReadOnlyServerRefusesGrants(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	db, schema := dbtest.Postgres(t)
	d := dialectOn(t, db, schema)
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dbtest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_transaction_read_only", "on") // a startup parameter, as on a standby
	u.RawQuery = q.Encode()
	ro := dbtest.OpenPostgres(t, u.String())
	rd := dialectOn(t, ro, schema)
	l, err := sqllock.NewTable(rd, sqllock.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "ro"); !errors.Is(err, sqllock.ErrReadOnly) {
		t.Fatalf("acquire on a read-only server: %v, want ErrReadOnly", err)
	}
	o, err := sqllock.NewOptimistic(rd, sqllock.OptimisticOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.TryAcquire(ctx, "ro"); !errors.Is(err, sqllock.ErrReadOnly) {
		t.Fatalf("optimistic acquire on a read-only server: %v, want ErrReadOnly", err)
	}
}

// WithSynchronousCommit on a server without a synchronous standby refuses
// every lock statement with ErrUnsupported, rather than grant leases a
// failover could lose; an unknown level is refused at once.
func TestSynchronousCommitNeedsStandby(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	db, schema := dbtest.Postgres(t)
	if _, err := postgres.New(db, postgres.WithSynchronousCommit("local")); !errors.Is(err, dialect.ErrInvalidOptions) {
		t.Fatalf("level local: %v, want ErrInvalidOptions", err)
	}
	var standbys string
	if err := db.QueryRowContext(ctx, `SELECT current_setting('synchronous_standby_names')`).Scan(&standbys); err != nil {
		t.Fatal(err)
	}
	if standbys != "" {
		t.Skip("the test server has a synchronous standby")
	}
	d, err := postgres.New(db, postgres.WithSchema(schema), postgres.WithSynchronousCommit("remote_apply"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	l, err := sqllock.NewTable(d, sqllock.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "durable"); !errors.Is(err, sqllock.ErrUnsupported) || !strings.Contains(err.Error(), "synchronous_standby_names") {
		t.Fatalf("acquire without a synchronous standby: %v, want ErrUnsupported naming synchronous_standby_names", err)
	}
	o, err := sqllock.NewOptimistic(d, sqllock.OptimisticOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.TryAcquire(ctx, "durable"); !errors.Is(err, sqllock.ErrUnsupported) {
		t.Fatalf("optimistic acquire without a synchronous standby: %v, want ErrUnsupported", err)
	}
	p, err := sqllock.NewPessimistic(d, sqllock.PessimisticOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.TryAcquire(ctx, "durable"); !errors.Is(err, sqllock.ErrUnsupported) {
		t.Fatalf("pessimistic acquire without a synchronous standby: %v, want ErrUnsupported", err)
	}
}
