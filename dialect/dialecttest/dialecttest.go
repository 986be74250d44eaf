// Package dialecttest is the conformance suite of sqllock's dialect seam.
// Exercise checks, statement by statement, that a dialect keeps the
// contracts documented in package dialect: the grants and their fencing
// tokens, renewal, release, the guard, listing, the version table's
// compare-and-swap, reaping, the end of a grant whose context ends, pool
// exhaustion, row locks and announcements of released locks.
//
// Every dialect runs it from its own tests, with a Harness that gives each
// subtest a fresh dialect on tables of its own, plus the few hooks that the
// suite cannot do through the seam (make a lease expire now, hold a row
// from another transaction, see which statements wait, end a session):
//
//	func TestConformance(t *testing.T) {
//		dialecttest.Exercise(t, dialecttest.Harness{New: newEnv})
//	}
//
// A new dialect (CockroachDB, TiDB, SQL Server, ...) is written by passing
// this suite: the strategies of package sqllock rely on nothing the suite
// does not check. Like the dialect interfaces, the suite is an
// implementer's API, and changes with them.
//
// The suite does not need an idle machine: leases that are not meant to
// expire get a TTL of an hour, leases that must expire are expired by the
// harness (Env.Expire), and every wait is for a condition the suite can
// observe, bounded by a context.
//
// # What is checked
//
// Lock table: Acquire inserts, re-enters (same token, one more hold),
// takes over expired and released rows (a larger token, one hold) and
// refuses another owner's live lease (0, the lease untouched); Remaining
// with and without a row; Break ends a live lease (or a minimum hold) so
// that its guard, renewal and release fail and the next token is larger,
// and is announced as a release.
//
// Each lease table (lock table; version table, where the dialect has one):
// tokens only grow per name across release, expiry, takeover and Reap (the
// floor rule); RenewMany reports exactly which leases of a mixed batch it
// renewed and extends them on the database clock, also for a batch of
// dialect.MaxRenewBatch; Release drops one hold, the last one frees the
// lock, and it reports false after a takeover or a full release; a last
// Release within its minimum hold leaves the row unexpired, with no holds,
// refused to every owner (the former holder too) until acquired_at + the
// minimum hold on the database clock, listed, untouched by Reap, and then
// taken over with a larger token; Guard is true for a live lease only, and
// a takeover waits for the guarded transaction; List shows held rows (and
// those within a minimum hold) only, ordered by name, with times on the
// database clock; lock names and owners are bind parameters, compared
// byte for byte; a grant whose context ends while it waits behind a row
// lock returns an error wrapping the context's, and nothing is granted
// after it returned.
//
// Version table: Read, Create, Take and Reenter as compare-and-swaps on the
// version (a stale version is refused; Create of an existing row returns 0
// without error).
//
// Reap deletes expired and released rows, at most Limit per call, spares
// live ones, and concurrent reapers (on pools of their own, like processes)
// beside acquirers keep tokens growing.
//
// Every statement that needs a connection fails with an error wrapping
// dialect.ErrPoolExhausted, never dialect.ErrOutcomeUnknown, when the pool
// is exhausted; the dialect never closes its pool (nor does a migration
// driver, which closes its own connection); schema and database names are
// validated (Harness.WithNamespace).
//
// Row locks (dialect.Catalogue.Pessimistic): NOWAIT refusals wrap dialect.ErrLocked,
// shared and exclusive modes exclude each other as they should, tokens grow
// across names and rollbacks, a waiting LockRow gets the lock once it is
// free, a cancelled one leaves no wait on the server and nothing pinned,
// BeginTx's lock timeout is classified as dialect.ErrLocked, and a killed
// holder's lock goes to the next one.
//
// Semaphores (dialect.Catalogue.Semaphores): the lease checks above on the holders'
// table with a limit of 1, then up to the limit granted and no more,
// re-entry, ErrLimitMismatch while holders remain, expiry, Remaining, Reap
// and concurrent acquirers (see Semaphores). Their FIFO queue
// (dialect.Catalogue.FairSemaphores): grants in ticket order, as many as permits are
// free, tickets given up or expired skipped, and the addressed wake-ups.
//
// Read/write locks (dialect.Catalogue.RWLocks): readers share
// and a writer excludes everyone, tokens grow in grant order on both sides,
// re-entry keeps the token, a reader asking for the write side is refused
// as an upgrade, a waiting writer's intent keeps new readers out until it
// is withdrawn or the writer is granted, expired holders are ignored, not
// renewed and reaped, concurrent holders on pools of their own never
// conflict, releases and withdrawals are announced where the table says
// so, and the lease checks above hold for the holders table.
//
// Elections (sqlrun.Elections): a value is proclaimed only for a live
// lease (not for a stale owner or token, an expired, taken-over or released
// lease) and read back as the leader only while that lease is live and
// keeps the token it was proclaimed for; values travel byte for byte.
//
// Lock values (sqlrun.LockValues): as elections' values, set only for a
// live lease and read only for its token, in Value and in the lock table's
// List, and kept apart from elections' values.
//
// Release requests (sqlrun.ReleaseRequests): asked of a held lease only,
// read back by its renewals alone, for its token, never by a takeover's.
//
// The run ledger (dialect.Catalogue.Runs): attempts recorded running on
// the database clock, finished once and only under their own token, with
// their error text byte for byte; running attempts abandoned by
// occurrence; job schedules listed when periodic, their history restarted
// by a new period or phase; occurrences by range; reaping by age, at most
// the batch asked for.
//
// Multi-name grants (dialect.LockSQL.ReleaseAll): a set is granted whole or
// not at all (a refused set leaves its other names as they were), re-entered
// by its owner, with tokens that follow the lock table's rules; ReleaseAll
// reports which leases it released and announces what it frees; a
// cancelled set grants nothing; goroutines taking overlapping sets in
// random orders never share a name and see no error but ErrTransient.
//
// Announcements (dialect.Notifier): a subscriber is told Ready, and then
// the names released, or reaped, while someone waited for them (marked by
// Remaining, or by Watch where dialect.Catalogue.WatchesNames), and no others.
package dialecttest

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/internal/testutil"
)

// Harness is what a dialect's tests give Exercise.
type Harness struct {
	// New returns a fresh dialect for one subtest, its tables migrated, on
	// a namespace of its own (a schema, a database, a file) that no other
	// subtest uses, together with the hooks. What it opens it closes when
	// t ends (t.Cleanup), the dialect included if it has a Close. Subtests
	// call it in parallel.
	New func(t *testing.T) *Env

	// Polling says that the server is one where the dialect's notifier
	// never listens by design and its waiters poll (a MariaDB Galera
	// cluster): the announcement checks are skipped.
	Polling bool

	// WithNamespace builds the dialect with its tables in the named schema
	// or database (say postgres.WithSchema(name)) and returns the
	// constructor's error, without connecting. Nil for a dialect without
	// namespaces (SQLite): the identifier checks are then skipped.
	WithNamespace func(name string) error
}

// Env is one dialect under test and the hooks that reach below its seam.
// The hooks act on the dialect's own namespace, may be called from several
// goroutines at once, and must not wait for anything but the database.
type Env struct {
	// Dialect is the dialect under test.
	Dialect dialect.Dialect

	// Open returns another dialect on the same tables, on a private pool
	// of its own, as another process would have: with at most maxConns
	// open connections when maxConns > 0, else as many as the dialect's
	// pools usually have. Pool and dialect are closed when t ends.
	Open func(t *testing.T, maxConns int) dialect.Dialect

	// Expire makes the lease on name in table expire now: it sets the
	// row's expires_at to one second before the database's current time
	// and leaves the rest of the row alone. It fails if there is no row.
	Expire func(ctx context.Context, table Table, name string) error

	// HoldRow begins a transaction on a connection of its own that locks
	// the row of name in table as a writer would (SELECT ... FOR UPDATE;
	// on a dialect.Catalogue.SingleWriter database, the database's write lock), so that the
	// row's transitions wait for it, and returns a function that ends the
	// transaction. It fails if there is no row.
	HoldRow func(ctx context.Context, table Table, name string) (end func() error, err error)

	// Waiting reports how many statements on the namespace's tables wait
	// for a lock held by another transaction, as the server shows them. A
	// database that shows no waiting statements may count the statements
	// under way on Dialect's pool instead: the suite asks only while the
	// statement it waits for is the one statement on that pool.
	Waiting func(ctx context.Context) (int, error)

	// Kill ends, from another connection, the server session running tx,
	// as an administrator or a failover would. Nil for a database without
	// sessions (SQLite): the checks that need it are skipped.
	Kill func(ctx context.Context, tx *sql.Tx) error
}

// Table names a lease table for the hooks: its unqualified name, which the
// harness qualifies with the namespace.
type Table string

const (
	// Locks is the lock table, sqlrun.LockTable.
	Locks Table = "sqllock_locks"
	// Versions is the version table, sqlrun.VersionTable.
	Versions Table = "sqllock_versions"
)

// long is the TTL of leases that must not expire during a test.
const long = time.Hour

// testTimeout bounds each subtest's waits.
const testTimeout = 2 * time.Minute

// Exercise runs the suite against the dialect of h, in parallel subtests
// of t. It calls h.New once for t itself, to read the dialect's
// catalogue (which primitives it holds, and the facts that shape the
// checks), and once per subtest.
func Exercise(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("dialecttest: Harness.New is nil")
	}
	probe := h.New(t)
	if probe == nil || probe.Dialect == nil || probe.Open == nil || probe.Expire == nil || probe.HoldRow == nil || probe.Waiting == nil {
		t.Fatal("dialecttest: Harness.New must return an Env with a Dialect and the hooks Open, Expire, HoldRow and Waiting")
	}
	cat := probe.Dialect.Catalogue()
	if cat.Locks == nil {
		t.Fatal("dialecttest: the dialect's Catalogue has no Locks")
	}
	tb, err := sqlrun.Open(probe.Dialect)
	if err != nil {
		t.Fatalf("dialecttest: the runner cannot build the catalogue's tables: %v", err)
	}
	optimistic, pessimistic := cat.Versions != nil, cat.Pessimistic != nil
	notifier, fair := cat.Notifier != nil, cat.Fair != nil

	run := func(name string, check func(t *testing.T, e *env)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			check(t, newEnv(t, &h))
		})
	}
	if pessimistic && !supportsPessimistic(t, probe.Dialect) {
		pessimistic = false
		run("PessimisticRefused", checkPessimisticRefused)
	}
	t.Run("Identifiers", func(t *testing.T) {
		t.Parallel()
		checkIdentifiers(t, h)
	})
	run("Migrations", checkMigrations)
	run("PoolNotClosed", checkPoolNotClosed)
	run("PoolExhausted", checkPoolExhausted)
	run("Acquire", checkAcquire)
	run("Remaining", checkRemaining)
	run("Break", checkBreak)
	run("ReapLimit", checkReapLimit)
	run("ReapConcurrent", checkReapConcurrent)
	run("Inventory", checkInventory)

	kinds := []Table{Locks}
	if optimistic {
		kinds = append(kinds, Versions)
		run("Versions/Swaps", checkSwaps)
	}
	for _, k := range kinds {
		prefix := map[Table]string{Locks: "Locks/", Versions: "Versions/"}[k]
		for _, c := range leaseChecks {
			run(prefix+c.name, func(t *testing.T, e *env) { c.check(t, e, e.table(k)) })
		}
	}
	if pessimistic {
		for _, c := range rowLockChecks {
			run("RowLocks/"+c.name, func(t *testing.T, e *env) { c.check(t, e, e.Dialect.Catalogue().Pessimistic) })
		}
		if cat.RowLocks != nil {
			run("RowLocks/List", checkRowLockList)
		}
	}
	if notifier && !h.Polling {
		run("Notifier", checkNotifier)
	}
	if fair {
		run("Fair", checkFair)
		run("FairHandoff", checkFairHandoff)
	}
	if cat.Waking != nil {
		run("Waking", checkWaking)
	}
	if cat.Semaphores != nil {
		exerciseSemaphores(t, run, notifier && !h.Polling)
	}
	if cat.FairSemaphores != nil {
		run("FairSemaphore", checkFairSemaphore)
	}
	if cat.WakingSemaphores != nil {
		run("WakingSemaphore", checkWakingSemaphore)
	}
	if cat.RWLocks != nil {
		exerciseRW(&cat, h.Polling, run)
	}
	if el := tb.Elections; el != nil && !electionsRefused(t, el) {
		for _, c := range electionChecks {
			run("Election/"+c.name, func(t *testing.T, e *env) { c.check(t, e, e.tables(e.Dialect).Elections) })
		}
	}
	if tb.LockValues != nil {
		for _, c := range lockValueChecks {
			run("LockValue/"+c.name, func(t *testing.T, e *env) { c.check(t, e, e.tables(e.Dialect).LockValues) })
		}
	}
	if tb.Requests != nil {
		for _, c := range requestChecks {
			run("Requests/"+c.name, func(t *testing.T, e *env) { c.check(t, e, e.tables(e.Dialect).Requests) })
		}
	}
	if cat.Runs != nil {
		for _, c := range ledgerChecks {
			run("Runs/"+c.name, func(t *testing.T, e *env) { c.check(t, e, e.tables(e.Dialect).Runs) })
		}
	}
	if tb.Latches != nil {
		for _, c := range latchChecks {
			run("Latches/"+c.name, func(t *testing.T, e *env) { c.check(t, e, e.tables(e.Dialect).Latches) })
		}
	}
	if tb.Barriers != nil {
		for _, c := range barrierChecks {
			run("Barriers/"+c.name, func(t *testing.T, e *env) { c.check(t, e, e.tables(e.Dialect).Barriers) })
		}
	}
	if tb.Multi != nil {
		for _, c := range multiChecks {
			run("Multi/"+c.name, func(t *testing.T, e *env) { c.check(t, e, e.tables(e.Dialect).Multi) })
		}
	}
}

// env is one subtest's dialect, hooks and context.
type env struct {
	*Env
	h   *Harness
	t   *testing.T
	ctx context.Context
}

func newEnv(t *testing.T, h *Harness) *env {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return &env{Env: h.New(t), h: h, t: t, ctx: ctx}
}

// tables returns the tables the runner builds from d's catalogue.
func (e *env) tables(d dialect.Dialect) *sqlrun.Tables {
	e.t.Helper()
	tb, err := sqlrun.Open(d)
	e.must(err, "sqlrun.Open")
	return tb
}

// must fails the test if err is not nil.
func (e *env) must(err error, what string) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

// expire makes the lease on name in tb expire now.
func (e *env) expire(tb *table, name string) {
	e.t.Helper()
	e.must(e.Expire(e.ctx, tb.name, name), "Expire "+name)
}

// eventually waits until cond holds, bounded by the subtest's context.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	testutil.Eventually(e.ctx, e.t, what, cond)
}

// waiting reports the statements waiting for a lock, per Env.Waiting.
func (e *env) waiting() int {
	e.t.Helper()
	n, err := e.Waiting(e.ctx)
	e.must(err, "Waiting")
	return n
}

// grantResult is what a grant run in a goroutine returned.
type grantResult struct {
	token int64
	err   error
}

// grantAsync runs tb.grant in a goroutine.
func grantAsync(ctx context.Context, tb *table, name, owner string) <-chan grantResult {
	got := make(chan grantResult, 1)
	go func() {
		token, err := tb.grant(ctx, name, owner, long)
		got <- grantResult{token, err}
	}()
	return got
}

// await returns what got delivers, or fails the test when the subtest's
// context ends first.
func await[T any](e *env, what string, got <-chan T) T {
	e.t.Helper()
	select {
	case v := <-got:
		return v
	case <-e.ctx.Done():
		e.t.Fatalf("never: %s", what)
		var zero T
		return zero
	}
}

// table is one lease table under test: its statements and how its rows are
// granted.
type table struct {
	name  Table
	stmts sqlrun.LeaseTable
	// grant makes one attempt to grant a lease on name to owner for ttl:
	// it returns the lease's token, or 0 when another owner holds a live
	// lease.
	grant func(ctx context.Context, name, owner string, ttl time.Duration) (int64, error)
}

// table returns the lease table k of the dialect under test.
func (e *env) table(k Table) *table {
	if k == Versions {
		return versionTable(e.tables(e.Dialect).Versions)
	}
	lt := e.tables(e.Dialect).Locks
	return &table{name: Locks, stmts: lt,
		grant: func(ctx context.Context, name, owner string, ttl time.Duration) (int64, error) {
			return lt.Acquire(ctx, dialect.AcquireParams{Name: name, Owner: owner, TTL: ttl})
		}}
}

// versionTable grants rows of the version table as the optimistic strategy
// does: read the row, then create it, re-enter it or take it over by a
// compare-and-swap on the version read.
func versionTable(vt sqlrun.VersionTable) *table {
	grant := func(ctx context.Context, name, owner string, ttl time.Duration) (int64, error) {
		row, ok, err := vt.Read(ctx, name)
		if err != nil {
			return 0, err
		}
		p := dialect.SwapParams{Name: name, Owner: owner, TTL: ttl, Version: row.Version}
		var swapped bool
		switch {
		case !ok:
			return vt.Create(ctx, dialect.AcquireParams{Name: name, Owner: owner, TTL: ttl})
		case row.Live && row.Owner == owner && row.Holds > 0:
			swapped, err = vt.Reenter(ctx, p)
		case row.Live:
			return 0, nil
		default:
			row.Version, err = vt.Take(ctx, p)
			swapped = row.Version != 0
		}
		if err != nil || !swapped {
			return 0, err
		}
		return row.Version, nil
	}
	return &table{name: Versions, stmts: vt, grant: grant}
}

// grant grants a lease on name to owner for an hour, failing the test
// unless it is granted.
func (e *env) grant(tb *table, name, owner string) dialect.Lease {
	e.t.Helper()
	return e.grantTTL(tb, name, owner, long)
}

// grantTTL is grant with a TTL.
func (e *env) grantTTL(tb *table, name, owner string, ttl time.Duration) dialect.Lease {
	e.t.Helper()
	token, err := tb.grant(e.ctx, name, owner, ttl)
	e.must(err, "grant "+name+" to "+owner)
	if token <= 0 {
		e.t.Fatalf("grant %s to %s: refused (token %d)", name, owner, token)
	}
	return dialect.Lease{Name: name, Owner: owner, Token: token}
}

// refused checks that owner is refused the lease on name.
func (e *env) refused(tb *table, name, owner string) {
	e.t.Helper()
	token, err := tb.grant(e.ctx, name, owner, long)
	e.must(err, "grant "+name+" to "+owner)
	if token != 0 {
		e.t.Fatalf("grant %s to %s while another owner holds it: token %d, want 0 (refused)", name, owner, token)
	}
}

// release releases one hold of l and checks the reply.
func (e *env) release(tb *table, l dialect.Lease, want bool) {
	e.t.Helper()
	ok, err := tb.stmts.Release(e.ctx, l, 0)
	e.must(err, "Release "+l.Name)
	if ok != want {
		e.t.Fatalf("Release(%+v) = %v, want %v", l, ok, want)
	}
}

// releaseMin releases one hold of l with a minimum hold and checks the
// reply.
func (e *env) releaseMin(tb *table, l dialect.Lease, minHold time.Duration, want bool) {
	e.t.Helper()
	ok, err := tb.stmts.Release(e.ctx, l, minHold)
	e.must(err, "Release "+l.Name)
	if ok != want {
		e.t.Fatalf("Release(%+v, min hold %v) = %v, want %v", l, minHold, ok, want)
	}
}

// held returns name's row as List shows it; ok is false when it is not
// listed.
func (e *env) held(tb *table, name string) (li dialect.LockInfo, ok bool) {
	e.t.Helper()
	infos, err := tb.stmts.List(e.ctx)
	e.must(err, "List")
	for _, li := range infos {
		if li.Name == name {
			return li, true
		}
	}
	return dialect.LockInfo{}, false
}

// heldBy returns name's row of owner as List shows it (a permit table
// lists a row per owner); ok is false when it is not listed.
func (e *env) heldBy(tb *table, name, owner string) (li dialect.LockInfo, ok bool) {
	e.t.Helper()
	infos, err := tb.stmts.List(e.ctx)
	e.must(err, "List")
	for _, li := range infos {
		if li.Name == name && li.Owner == owner {
			return li, true
		}
	}
	return dialect.LockInfo{}, false
}

// holder checks that name is listed as held by l with holds holds.
func (e *env) holder(tb *table, l dialect.Lease, holds int) {
	e.t.Helper()
	li, ok := e.held(tb, l.Name)
	if !ok || li.Owner != l.Owner || li.Token != l.Token || li.Holds != holds {
		e.t.Fatalf("List shows %q as %+v (listed: %v), want owner %q, token %d, %d holds", l.Name, li, ok, l.Owner, l.Token, holds)
	}
}

// reapAll calls Reap until it deletes nothing more.
func (e *env) reapAll() int {
	e.t.Helper()
	total := 0
	for range 1000 {
		n, err := e.Dialect.Reap(e.ctx, dialect.ReapParams{Limit: 100})
		e.must(err, "Reap")
		if n == 0 {
			return total
		}
		total += n
	}
	e.t.Fatalf("Reap still deleting rows after %d", total)
	return total
}

// notSentErr checks that err says that no statement was sent because the
// pool was exhausted.
func notSentErr(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, dialect.ErrPoolExhausted) {
		t.Errorf("%s with the pool exhausted: %v, want an error wrapping ErrPoolExhausted", what, err)
	}
	if errors.Is(err, dialect.ErrOutcomeUnknown) {
		t.Errorf("%s with the pool exhausted: %v wraps ErrOutcomeUnknown, but no statement was sent", what, err)
	}
}

// supportsPessimistic reports whether d's server can hold the pessimistic
// strategy's row locks (see dialect.Catalogue.CheckPessimistic).
func supportsPessimistic(t *testing.T, d dialect.Dialect) bool {
	t.Helper()
	cat := d.Catalogue()
	if cat.Pessimistic == nil {
		return false
	}
	if cat.CheckPessimistic == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	err := cat.CheckPessimistic(ctx)
	if err != nil && !errors.Is(err, dialect.ErrUnsupported) {
		t.Fatalf("CheckPessimistic: %v", err)
	}
	return err == nil
}

// checkPessimisticRefused: a dialect whose server cannot hold row locks
// (a Galera cluster) refuses LockRow with ErrUnsupported, every time.
func checkPessimisticRefused(t *testing.T, e *env) {
	pd := e.Dialect.Catalogue().Pessimistic
	for range 2 {
		rl, err := pd.LockRow(e.ctx, dialect.RowLockParams{Name: "refused"})
		if err == nil {
			_ = rl.Tx.Rollback()
			_ = rl.Close(e.ctx)
		}
		if !errors.Is(err, dialect.ErrUnsupported) {
			t.Fatalf("LockRow on a server that cannot hold row locks: %v, want ErrUnsupported", err)
		}
	}
}
