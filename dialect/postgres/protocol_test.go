package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// protocolEnv is a migrated schema with a Go lock table on it, and a pool
// on the server that calls the protocol's functions (migration 23) by
// their schema-qualified names.
type protocolEnv struct {
	ctx    context.Context
	db     *sql.DB
	schema string
	table  *sqllock.Table
}

func newProtocolEnv(t *testing.T) *protocolEnv {
	t.Helper()
	t.Parallel()
	db, schema := dbtest.Postgres(t)
	d := dialectOn(t, db, schema)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	table, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	return &protocolEnv{ctx: ctx, db: db, schema: schema, table: table}
}

// fn is the schema-qualified name of the protocol's function name.
func (e *protocolEnv) fn(name string) string { return `"` + e.schema + `".` + name }

// tryAcquire calls sqllock_try_acquire on q; ok is false when another
// owner holds the lock.
func (e *protocolEnv) tryAcquire(t *testing.T, q querier, name, owner string, ttl time.Duration) (token int64, ok bool) {
	t.Helper()
	var tok sql.NullInt64
	err := q.QueryRowContext(e.ctx, `SELECT `+e.fn("sqllock_try_acquire")+`($1, $2, $3::bigint * interval '1 microsecond')`,
		name, owner, ttl.Microseconds()).Scan(&tok)
	if err != nil {
		t.Fatalf("sqllock_try_acquire(%q, %q): %v", name, owner, err)
	}
	return tok.Int64, tok.Valid
}

// release calls sqllock_release on q.
func (e *protocolEnv) release(t *testing.T, q querier, name, owner string, token int64) bool {
	t.Helper()
	var ok bool
	if err := q.QueryRowContext(e.ctx, `SELECT `+e.fn("sqllock_release")+`($1, $2, $3)`, name, owner, token).Scan(&ok); err != nil {
		t.Fatalf("sqllock_release(%q, %q, %d): %v", name, owner, token, err)
	}
	return ok
}

// querier is a pool or a transaction.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// sqlState is the SQLSTATE of err, or "".
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// A lease taken through the functions and one taken by the Go library
// exclude each other on one name, both ways; the functions' tokens follow
// the library's and re-entry counts holds as the library does.
func TestProtocolExcludesGo(t *testing.T) {
	e := newProtocolEnv(t)
	k, err := e.table.TryAcquire(e.ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.tryAcquire(t, e.db, "job", "py-1", time.Minute); ok {
		t.Fatal("sqllock_try_acquire granted a lock the Go library holds")
	}
	if err := k.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	tok, ok := e.tryAcquire(t, e.db, "job", "py-1", time.Minute)
	if !ok || tok <= k.Token() {
		t.Fatalf("sqllock_try_acquire after the release: token %d, %v; want one above %d", tok, ok, k.Token())
	}
	again, ok := e.tryAcquire(t, e.db, "job", "py-1", time.Minute)
	if !ok || again != tok {
		t.Fatalf("re-entry: token %d, %v; want %d", again, ok, tok)
	}
	for i := range 2 {
		if _, err := e.table.TryAcquire(e.ctx, "job"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("Go TryAcquire with %d holds taken through SQL: %v, want ErrLocked", 2-i, err)
		}
		if !e.release(t, e.db, "job", "py-1", tok) {
			t.Fatalf("release %d of 2 found no hold", i+1)
		}
	}
	if e.release(t, e.db, "job", "py-1", tok) {
		t.Fatal("a third release found a hold")
	}
	k, err = e.table.TryAcquire(e.ctx, "job")
	if err != nil {
		t.Fatalf("Go TryAcquire after the SQL releases: %v", err)
	}
	if k.Token() <= tok {
		t.Fatalf("Go token %d after SQL token %d", k.Token(), tok)
	}
	var renewed bool
	if err := e.db.QueryRowContext(e.ctx, `SELECT `+e.fn("sqllock_renew")+`('job', 'py-1', $1, interval '1 minute')`, tok).Scan(&renewed); err != nil || renewed {
		t.Fatalf("renewal of a lease taken over: %v, %v; want false", renewed, err)
	}
	if err := k.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
}

// sqllock_guard passes in a transaction while the lease is current and
// fails it with SQLSTATE SQLK2 once the lease expired and was taken over;
// the guard's row lock keeps a takeover from committing before the
// guarded transaction ends.
func TestProtocolGuardFences(t *testing.T) {
	e := newProtocolEnv(t)
	tok, ok := e.tryAcquire(t, e.db, "fenced", "py-1", time.Minute)
	if !ok {
		t.Fatal("not granted")
	}
	guard := `SELECT ` + e.fn("sqllock_guard") + `('fenced', 'py-1', $1)`
	tx, err := e.db.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pass bool
	if err := tx.QueryRowContext(e.ctx, guard, tok).Scan(&pass); err != nil || !pass {
		t.Fatalf("guard of the current lease: %v, %v", pass, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.ExecContext(e.ctx, `UPDATE "`+e.schema+`".sqllock_locks SET expires_at = now() - interval '1 second' WHERE name = 'fenced'`); err != nil {
		t.Fatal(err)
	}
	k, err := e.table.TryAcquire(e.ctx, "fenced")
	if err != nil {
		t.Fatalf("Go takeover of the expired lease: %v", err)
	}
	defer k.Release(e.ctx)
	err = e.db.QueryRowContext(e.ctx, guard, tok).Scan(&pass)
	if sqlState(err) != "SQLK2" {
		t.Fatalf("guard of a lease taken over: %v, %v; want SQLSTATE SQLK2", pass, err)
	}
	tx, err = e.db.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := k.Guard(e.ctx, tx); err != nil {
		t.Fatalf("Go guard of the current lease: %v", err)
	}
}

// A release through the functions wakes a Go waiter by NOTIFY, long before
// the lease it waited on would have expired.
func TestProtocolReleaseWakesGo(t *testing.T) {
	e := newProtocolEnv(t)
	tok, ok := e.tryAcquire(t, e.db, "wake", "py-1", time.Hour)
	if !ok {
		t.Fatal("not granted")
	}
	got := make(chan error, 1)
	go func() {
		k, err := e.table.Acquire(e.ctx, "wake")
		if err == nil {
			err = k.Release(e.ctx)
		}
		got <- err
	}()
	// The waiter marks the row before it sleeps; then only a NOTIFY wakes
	// it within the hour.
	for waiting := false; !waiting; {
		if err := e.db.QueryRowContext(e.ctx, `SELECT waiters OR ticketed FROM "`+e.schema+`".sqllock_locks WHERE name = 'wake'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case err := <-got:
			t.Fatalf("Go Acquire returned before the release: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if !e.release(t, e.db, "wake", "py-1", tok) {
		t.Fatal("release found no hold")
	}
	if err := <-got; err != nil {
		t.Fatalf("Go Acquire after the SQL release: %v", err)
	}
}

// A role with EXECUTE on the functions alone can lock, and cannot read or
// write the tables.
func TestProtocolLeastPrivilege(t *testing.T) {
	e := newProtocolEnv(t)
	caller := dbtest.OpenPostgres(t, dbtest.PostgresRole(t, e.schema, dbtest.Caller))
	tok, ok := e.tryAcquire(t, caller, "least", "py-1", time.Minute)
	if !ok {
		t.Fatal("not granted")
	}
	if _, err := e.table.TryAcquire(e.ctx, "least"); !errors.Is(err, sqllock.ErrLocked) {
		t.Fatalf("Go TryAcquire of the caller's lock: %v, want ErrLocked", err)
	}
	var n int
	err := caller.QueryRowContext(e.ctx, `SELECT count(*) FROM "`+e.schema+`".sqllock_locks`).Scan(&n)
	if sqlState(err) != "42501" {
		t.Fatalf("the caller read the lock table: %v", err)
	}
	var remaining sql.NullString
	if err := caller.QueryRowContext(e.ctx, `SELECT `+e.fn("sqllock_remaining")+`('least')`).Scan(&remaining); err != nil || !remaining.Valid {
		t.Fatalf("sqllock_remaining: %v, %v", remaining, err)
	}
	if !e.release(t, caller, "least", "py-1", tok) {
		t.Fatal("release found no hold")
	}
}

// Bad input fails with the stated SQLSTATE and leaves no row.
func TestProtocolBadInput(t *testing.T) {
	e := newProtocolEnv(t)
	longName := strings.Repeat("n", 256)
	for _, c := range []struct {
		query string
		args  []any
		state string
	}{
		{`sqllock_try_acquire($1, $2, $3::interval)`, []any{"", "o", "1 minute"}, "22023"},
		{`sqllock_try_acquire($1, $2, $3::interval)`, []any{longName, "o", "1 minute"}, "22023"},
		{`sqllock_try_acquire($1, $2, $3::interval)`, []any{"n", longName, "1 minute"}, "22023"},
		{`sqllock_try_acquire($1, $2, $3::interval)`, []any{"n", "o", "0 seconds"}, "22023"},
		{`sqllock_try_acquire($1, $2, $3::interval)`, []any{"n", "o", "-1 minute"}, "22023"},
		{`sqllock_try_acquire($1, $2, $3::interval)`, []any{nil, "o", "1 minute"}, "22004"},
		{`sqllock_try_acquire($1, $2, $3::interval)`, []any{"n", nil, "1 minute"}, "22004"},
		{`sqllock_try_acquire($1, $2, $3::interval)`, []any{"n", "o", nil}, "22004"},
		{`sqllock_renew($1, $2, $3::bigint, $4::interval)`, []any{"n", "o", 1, "0 seconds"}, "22023"},
		{`sqllock_renew($1, $2, $3::bigint, $4::interval)`, []any{"n", "o", nil, "1 minute"}, "22004"},
		{`sqllock_release($1, $2, $3::bigint)`, []any{"", "o", 1}, "22023"},
		{`sqllock_release($1, $2, $3::bigint)`, []any{"n", "o", nil}, "22004"},
		{`sqllock_guard($1, $2, $3::bigint)`, []any{"n", "", 1}, "22023"},
		{`sqllock_remaining($1)`, []any{nil}, "22004"},
		{`sqllock_remaining($1)`, []any{longName}, "22023"},
	} {
		var v any
		err := e.db.QueryRowContext(e.ctx, `SELECT "`+e.schema+`".`+c.query, c.args...).Scan(&v)
		if got := sqlState(err); got != c.state {
			t.Errorf("%s %v: %v (SQLSTATE %q), want SQLSTATE %s", c.query, c.args, err, got, c.state)
		}
	}
	var n int
	if err := e.db.QueryRowContext(e.ctx, `SELECT count(*) FROM "`+e.schema+`".sqllock_locks`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows after bad input, %v", n, err)
	}
}

// BenchmarkProtocolAcquireRelease compares a try_acquire and release
// through the functions with the Go library's TryAcquire and Release on
// the same schema and pool. Each iteration runs both, in turn, so that a
// change in the machine's load falls on both alike; it reports each one's
// time (functions-ns/op, library-ns/op) and their ratio.
func BenchmarkProtocolAcquireRelease(b *testing.B) {
	db, schema := dbtest.Postgres(b)
	d, err := postgres.New(db, postgres.WithSchema(schema))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close(context.Background())
	ctx := b.Context()
	if err := sqllock.Migrate(ctx, d); err != nil {
		b.Fatalf("migrate: %v", err)
	}
	table, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}})
	if err != nil {
		b.Fatal(err)
	}
	acquire := `SELECT "` + schema + `".sqllock_try_acquire('bench-sql', 'owner', interval '1 minute')`
	release := `SELECT "` + schema + `".sqllock_release('bench-sql', 'owner', $1)`
	var functions, library time.Duration
	for b.Loop() {
		start := time.Now()
		var tok sql.NullInt64
		if err := db.QueryRowContext(ctx, acquire).Scan(&tok); err != nil || !tok.Valid {
			b.Fatalf("try_acquire: %v, %v", tok, err)
		}
		var ok bool
		if err := db.QueryRowContext(ctx, release, tok.Int64).Scan(&ok); err != nil || !ok {
			b.Fatalf("release: %v, %v", ok, err)
		}
		mid := time.Now()
		k, err := table.TryAcquire(ctx, "bench-go")
		if err != nil {
			b.Fatal(err)
		}
		if err := k.Release(ctx); err != nil {
			b.Fatal(err)
		}
		functions += mid.Sub(start)
		library += time.Since(mid)
	}
	b.ReportMetric(float64(functions.Nanoseconds())/float64(b.N), "functions-ns/op")
	b.ReportMetric(float64(library.Nanoseconds())/float64(b.N), "library-ns/op")
	b.ReportMetric(float64(functions)/float64(library), "ratio")
}
