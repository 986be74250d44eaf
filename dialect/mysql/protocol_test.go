package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// protocolEnv is a migrated database with a Go lock table on it, and a
// pool on the server that calls the protocol's procedures (migration 24)
// by their database-qualified names.
type protocolEnv struct {
	ctx      context.Context
	d        *mysql.Dialect
	db       *sql.DB
	database string
	table    *sqllock.Table
}

func newProtocolEnv(t *testing.T, opts sqllock.TableOptions) *protocolEnv {
	t.Helper()
	t.Parallel()
	db, database := dbtest.MySQL(t)
	d, err := mysql.New(db, mysql.WithDatabase(database))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if opts.TTL == 0 {
		opts.TTL = time.Minute
	}
	table, err := sqllock.NewTable(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &protocolEnv{ctx: ctx, d: d, db: db, database: database, table: table}
}

// call is the CALL of the protocol's procedure name with n arguments.
func (e *protocolEnv) call(name string, n int) string {
	return "CALL `" + e.database + "`." + name + "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")"
}

// tryAcquire calls sqllock_try_acquire on q; ok is false when another
// owner holds the lock.
func (e *protocolEnv) tryAcquire(t *testing.T, q querier, name, owner string, ttl time.Duration) (token int64, ok bool) {
	t.Helper()
	var tok sql.NullInt64
	if err := q.QueryRowContext(e.ctx, e.call("sqllock_try_acquire", 3), name, owner, ttl.Microseconds()).Scan(&tok); err != nil {
		t.Fatalf("sqllock_try_acquire(%q, %q): %v", name, owner, err)
	}
	return tok.Int64, tok.Valid
}

// renew calls sqllock_renew on q.
func (e *protocolEnv) renew(t *testing.T, q querier, name, owner string, token int64, ttl time.Duration) bool {
	t.Helper()
	var ok bool
	if err := q.QueryRowContext(e.ctx, e.call("sqllock_renew", 4), name, owner, token, ttl.Microseconds()).Scan(&ok); err != nil {
		t.Fatalf("sqllock_renew(%q, %q, %d): %v", name, owner, token, err)
	}
	return ok
}

// release calls sqllock_release on q.
func (e *protocolEnv) release(t *testing.T, q querier, name, owner string, token int64) bool {
	t.Helper()
	var ok bool
	if err := q.QueryRowContext(e.ctx, e.call("sqllock_release", 3), name, owner, token).Scan(&ok); err != nil {
		t.Fatalf("sqllock_release(%q, %q, %d): %v", name, owner, token, err)
	}
	return ok
}

// remaining calls sqllock_remaining on q.
func (e *protocolEnv) remaining(t *testing.T, q querier, name string) sql.NullInt64 {
	t.Helper()
	var us sql.NullInt64
	if err := q.QueryRowContext(e.ctx, e.call("sqllock_remaining", 1), name).Scan(&us); err != nil {
		t.Fatalf("sqllock_remaining(%q): %v", name, err)
	}
	return us
}

// querier is a pool or a transaction.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// sqlState is the SQLSTATE of err, or "".
func sqlState(err error) string {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return string(me.SQLState[:])
	}
	return ""
}

// A lease taken through the procedures and one taken by the Go library
// exclude each other on one name, both ways; the procedures' tokens follow
// the library's and re-entry counts holds as the library does.
func TestProtocolExcludesGo(t *testing.T) {
	e := newProtocolEnv(t, sqllock.TableOptions{})
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
	if e.renew(t, e.db, "job", "py-1", tok, time.Minute) {
		t.Fatal("renewal of a lease taken over succeeded")
	}
	if err := k.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
}

// sqllock_renew moves the expiry of the live lease to the TTL from now,
// and sqllock_remaining reports it; an expired lease is not renewed, and
// a renewal by another owner or with another token matches nothing.
func TestProtocolRenewAndRemaining(t *testing.T) {
	e := newProtocolEnv(t, sqllock.TableOptions{})
	if us := e.remaining(t, e.db, "renewed"); us.Valid {
		t.Fatalf("sqllock_remaining of a name without a row: %v, want NULL", us)
	}
	tok, ok := e.tryAcquire(t, e.db, "renewed", "py-1", time.Minute)
	if !ok {
		t.Fatal("not granted")
	}
	if us := e.remaining(t, e.db, "renewed"); !us.Valid || us.Int64 <= 0 || us.Int64 > time.Minute.Microseconds() {
		t.Fatalf("sqllock_remaining of a minute's lease: %v", us)
	}
	if !e.renew(t, e.db, "renewed", "py-1", tok, time.Hour) {
		t.Fatal("renewal of the live lease failed")
	}
	if us := e.remaining(t, e.db, "renewed"); us.Int64 <= time.Minute.Microseconds() {
		t.Fatalf("sqllock_remaining after a renewal for an hour: %v", us)
	}
	if e.renew(t, e.db, "renewed", "py-2", tok, time.Hour) || e.renew(t, e.db, "renewed", "py-1", tok+1, time.Hour) {
		t.Fatal("a renewal by another owner or token succeeded")
	}
	if _, err := e.db.ExecContext(e.ctx, "UPDATE `"+e.database+"`.sqllock_locks SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE name = 'renewed'"); err != nil {
		t.Fatal(err)
	}
	if us := e.remaining(t, e.db, "renewed"); !us.Valid || us.Int64 != 0 {
		t.Fatalf("sqllock_remaining of an expired lease: %v, want 0", us)
	}
	if e.renew(t, e.db, "renewed", "py-1", tok, time.Minute) {
		t.Fatal("renewal of an expired lease succeeded")
	}
}

// sqllock_guard passes in a transaction while the lease is current and
// fails with SQLSTATE SQLK2 once the lease expired and was taken over;
// the guard's row lock keeps a takeover from committing before the
// guarded transaction ends.
func TestProtocolGuardFences(t *testing.T) {
	e := newProtocolEnv(t, sqllock.TableOptions{})
	tok, ok := e.tryAcquire(t, e.db, "fenced", "py-1", time.Minute)
	if !ok {
		t.Fatal("not granted")
	}
	guard := e.call("sqllock_guard", 3)
	tx, err := e.db.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(e.ctx, guard, "fenced", "py-1", tok); err != nil {
		t.Fatalf("guard of the current lease: %v", err)
	}
	// The guarded transaction holds the row: an expiry of the lease, and
	// so a takeover, waits for it (here: refused at once).
	other, err := e.db.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.ExecContext(e.ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	_, err = other.ExecContext(e.ctx, "UPDATE `"+e.database+"`.sqllock_locks SET expires_at = UTC_TIMESTAMP(6) WHERE name = 'fenced'")
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1205 {
		t.Fatalf("a write of the guarded row: %v, want a lock wait timeout", err)
	}
	if _, err := other.ExecContext(e.ctx, "SET SESSION innodb_lock_wait_timeout = DEFAULT"); err != nil {
		t.Fatal(err)
	}
	other.Rollback()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.ExecContext(e.ctx, "UPDATE `"+e.database+"`.sqllock_locks SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE name = 'fenced'"); err != nil {
		t.Fatal(err)
	}
	k, err := e.table.TryAcquire(e.ctx, "fenced")
	if err != nil {
		t.Fatalf("Go takeover of the expired lease: %v", err)
	}
	defer k.Release(e.ctx)
	if k.Token() <= tok {
		t.Fatalf("Go token %d after the takeover of SQL token %d", k.Token(), tok)
	}
	_, err = e.db.ExecContext(e.ctx, guard, "fenced", "py-1", tok)
	if sqlState(err) != "SQLK2" {
		t.Fatalf("guard of a lease taken over: %v; want SQLSTATE SQLK2", err)
	}
	if _, err := e.db.ExecContext(e.ctx, guard, "fenced", k.Owner(), k.Token()); err != nil {
		t.Fatalf("guard of the Go lease: %v", err)
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

// A release through the procedures wakes a Go waiter, whose lease and
// backoff last an hour, through its ticket alone: the ring of the oldest
// ticket's bell, which its dialect announces as the ticket's wake-up. The
// release comes once the waiter marked the row (ticketed): a release
// before the mark would let the waiter in without a ring.
func TestProtocolReleaseWakesGo(t *testing.T) {
	e := newProtocolEnv(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Hour, MaxBackoff: time.Hour}})
	tok, ok := e.tryAcquire(t, e.db, "wake", "py-1", time.Hour)
	if !ok {
		t.Fatal("not granted")
	}
	// The bell is up before the waiter comes: a bell that comes up lets
	// every waiter try once.
	r := make(recorder, 16)
	sub := e.d.Catalogue().Notifier.Subscribe(r)
	defer sub.Unsubscribe()
	r.expect(e.ctx, t, "ready")
	got := inBackground(e.ctx, func() (*sqllock.Lock, error) { return e.table.Acquire(e.ctx, "wake") })
	for marked := false; !marked; {
		if err := e.db.QueryRowContext(e.ctx, "SELECT ticketed FROM `"+e.database+"`.sqllock_locks WHERE name = 'wake'").Scan(&marked); err != nil {
			t.Fatal(err)
		}
		if marked {
			break
		}
		select {
		case err := <-got:
			t.Fatalf("the Go waiter returned before it marked the row: %v", err)
		case <-time.After(10 * time.Millisecond): // polls an observable condition
		}
	}
	if !e.release(t, e.db, "wake", "py-1", tok) {
		t.Fatal("release found no hold")
	}
	if told := r.next(e.ctx, t); !strings.HasPrefix(told, "released ") {
		t.Fatalf("told %q, want a ticket's wake-up", told)
	} else if _, ok := dialect.ParseTicketWake(strings.TrimPrefix(told, "released ")); !ok {
		t.Fatalf("told %q, want a ticket's wake-up", told)
	}
	if err := <-got; err != nil {
		t.Fatalf("Go Acquire after the SQL release: %v", err)
	}
}

// A release through the procedures rings the bells registered for the
// name: a process that watches it is told of the release (the only
// announcement of the name after its registration's).
func TestProtocolReleaseRingsWatchers(t *testing.T) {
	e := newProtocolEnv(t, sqllock.TableOptions{})
	tok, ok := e.tryAcquire(t, e.db, "watched", "py-1", time.Hour)
	if !ok {
		t.Fatal("not granted")
	}
	r := make(recorder, 16)
	watch(e.ctx, t, e.d, r, "watched")
	if !e.release(t, e.db, "watched", "py-1", tok) {
		t.Fatal("release found no hold")
	}
	r.expect(e.ctx, t, "released watched")
}

// A Go holder blocks a SQL caller's wait, which polls sqllock_remaining,
// until the Go release.
func TestProtocolSQLWaitsForGo(t *testing.T) {
	e := newProtocolEnv(t, sqllock.TableOptions{})
	k, err := e.table.TryAcquire(e.ctx, "queue")
	if err != nil {
		t.Fatal(err)
	}
	if us := e.remaining(t, e.db, "queue"); !us.Valid || us.Int64 <= 0 {
		t.Fatalf("sqllock_remaining of the Go lease: %v", us)
	}
	if _, ok := e.tryAcquire(t, e.db, "queue", "py-1", time.Minute); ok {
		t.Fatal("granted while Go holds the lock")
	}
	if err := k.Release(e.ctx); err != nil {
		t.Fatal(err)
	}
	if us := e.remaining(t, e.db, "queue"); !us.Valid || us.Int64 != 0 {
		t.Fatalf("sqllock_remaining after the Go release: %v, want 0", us)
	}
	if _, ok := e.tryAcquire(t, e.db, "queue", "py-1", time.Minute); !ok {
		t.Fatal("refused after the Go release")
	}
}

// A user with EXECUTE on the procedures alone can lock, and cannot read
// or write the tables.
func TestProtocolLeastPrivilege(t *testing.T) {
	e := newProtocolEnv(t, sqllock.TableOptions{})
	caller := dbtest.OpenMySQL(t, dbtest.MySQLRole(t, e.database, dbtest.Caller))
	tok, ok := e.tryAcquire(t, caller, "least", "py-1", time.Minute)
	if !ok {
		t.Fatal("not granted")
	}
	if _, err := e.table.TryAcquire(e.ctx, "least"); !errors.Is(err, sqllock.ErrLocked) {
		t.Fatalf("Go TryAcquire of the caller's lock: %v, want ErrLocked", err)
	}
	var n int
	err := caller.QueryRowContext(e.ctx, "SELECT count(*) FROM `"+e.database+"`.sqllock_locks").Scan(&n)
	if sqlState(err) != "42000" {
		t.Fatalf("the caller read the lock table: %v", err)
	}
	if !e.renew(t, caller, "least", "py-1", tok, time.Minute) {
		t.Fatal("renewal failed")
	}
	if us := e.remaining(t, caller, "least"); !us.Valid {
		t.Fatalf("sqllock_remaining: %v", us)
	}
	tx, err := caller.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(e.ctx, e.call("sqllock_guard", 3), "least", "py-1", tok); err != nil {
		t.Fatalf("guard: %v", err)
	}
	tx.Rollback()
	if _, err := caller.ExecContext(e.ctx, e.call("sqllock_ring", 2), "least", false); sqlState(err) != "42000" {
		t.Fatalf("the caller ran sqllock_ring: %v", err)
	}
	if !e.release(t, caller, "least", "py-1", tok) {
		t.Fatal("release found no hold")
	}
}

// Bad input fails with the stated SQLSTATE and leaves no row.
func TestProtocolBadInput(t *testing.T) {
	e := newProtocolEnv(t, sqllock.TableOptions{})
	longName := strings.Repeat("n", 256)
	minute := time.Minute.Microseconds()
	for _, c := range []struct {
		proc  string
		args  []any
		state string
	}{
		{"sqllock_try_acquire", []any{"", "o", minute}, "22023"},
		{"sqllock_try_acquire", []any{longName, "o", minute}, "22023"},
		{"sqllock_try_acquire", []any{strings.Repeat("n", 70000), "o", minute}, "22023"},
		{"sqllock_try_acquire", []any{"n", longName, minute}, "22023"},
		{"sqllock_try_acquire", []any{"n", "o", 0}, "22023"},
		{"sqllock_try_acquire", []any{"n", "o", -minute}, "22023"},
		{"sqllock_try_acquire", []any{nil, "o", minute}, "22004"},
		{"sqllock_try_acquire", []any{"n", nil, minute}, "22004"},
		{"sqllock_try_acquire", []any{"n", "o", nil}, "22004"},
		{"sqllock_renew", []any{"n", "o", 1, 0}, "22023"},
		{"sqllock_renew", []any{"n", "o", nil, minute}, "22004"},
		{"sqllock_renew", []any{"n", "o", 1, nil}, "22004"},
		{"sqllock_release", []any{"", "o", 1}, "22023"},
		{"sqllock_release", []any{"n", "o", nil}, "22004"},
		{"sqllock_guard", []any{"n", "", 1}, "22023"},
		{"sqllock_guard", []any{"n", "o", nil}, "22004"},
		{"sqllock_remaining", []any{nil}, "22004"},
		{"sqllock_remaining", []any{longName}, "22023"},
	} {
		_, err := e.db.ExecContext(e.ctx, e.call(c.proc, len(c.args)), c.args...)
		if got := sqlState(err); got != c.state {
			t.Errorf("%s %.20v: %v (SQLSTATE %q), want SQLSTATE %s", c.proc, c.args, err, got, c.state)
		}
	}
	var n int
	if err := e.db.QueryRowContext(e.ctx, "SELECT count(*) FROM `"+e.database+"`.sqllock_locks").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows after bad input, %v", n, err)
	}
}

// BenchmarkProtocolAcquireRelease compares a try_acquire and release
// through the procedures with the Go library's TryAcquire and Release on
// the same database and pool. Each iteration runs both, in turn, so that
// a change in the machine's load falls on both alike; it reports each
// one's time (procedures-ns/op, library-ns/op) and their ratio.
func BenchmarkProtocolAcquireRelease(b *testing.B) {
	db, database := dbtest.MySQL(b)
	d, err := mysql.New(db, mysql.WithDatabase(database))
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
	acquire := "CALL `" + database + "`.sqllock_try_acquire(?, ?, ?)"
	release := "CALL `" + database + "`.sqllock_release(?, ?, ?)"
	minute := time.Minute.Microseconds()
	var procedures, library time.Duration
	for b.Loop() {
		start := time.Now()
		var tok sql.NullInt64
		if err := db.QueryRowContext(ctx, acquire, "bench-sql", "owner", minute).Scan(&tok); err != nil || !tok.Valid {
			b.Fatalf("try_acquire: %v, %v", tok, err)
		}
		var ok bool
		if err := db.QueryRowContext(ctx, release, "bench-sql", "owner", tok.Int64).Scan(&ok); err != nil || !ok {
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
		procedures += mid.Sub(start)
		library += time.Since(mid)
	}
	b.ReportMetric(float64(procedures.Nanoseconds())/float64(b.N), "procedures-ns/op")
	b.ReportMetric(float64(library.Nanoseconds())/float64(b.N), "library-ns/op")
	b.ReportMetric(float64(procedures)/float64(library), "ratio")
}
