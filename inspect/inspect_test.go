package inspect_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/inspect"
)

// Locks lists a holder of each primitive, by name, with what its lease
// row does not say: the election's value, the semaphore's limit, the read
// side, the tickets waiting; and the reason SQLite's row locks are not
// listed is no error.
func TestLocksEveryPrimitive(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "locks.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := sqlite.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	release := func(l *sqllock.Lock, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Release(ctx) })
	}
	table, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	release(table.TryAcquire(ctx, "a-table"))
	el, err := sqllock.NewElection(d, sqllock.LeaseOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	lead, err := el.Campaign(ctx, "b-election", "host:8080")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lead.Resign(ctx) })
	sem, err := sqllock.NewSemaphore(d, 3, sqllock.SemaphoreOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	release(sem.TryAcquire(ctx, "c-semaphore"))
	rw, err := sqllock.NewRWLock(d, sqllock.LeaseOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	release(rw.TryAcquireShared(ctx, "d-rwlock"))

	r, err := inspect.Locks(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if r.Unlisted != nil {
		t.Errorf("Unlisted = %v on SQLite, which lists no row locks", r.Unlisted)
	}
	want := []dialect.Holder{
		{Primitive: "table", Mode: "exclusive"},
		{Primitive: "election", Mode: "exclusive", LockInfo: dialect.LockInfo{Value: "host:8080"}},
		{Primitive: "semaphore", Mode: "shared", Limit: 3},
		{Primitive: "rwlock", Mode: "shared"},
	}
	if len(r.Holders) != len(want) {
		t.Fatalf("Holders = %+v, want %d", r.Holders, len(want))
	}
	for i, h := range r.Holders {
		w := want[i]
		if h.Primitive != w.Primitive || h.Mode != w.Mode || h.Value != w.Value || h.Limit != w.Limit ||
			h.Holds != 1 || h.Token <= 0 || h.ExpiresIn <= 0 || h.HeldFor < 0 {
			t.Errorf("Holders[%d] = %+v, want %+v, held once, with a lease", i, h, w)
		}
	}
}

// A nil dialect is refused.
func TestLocksNilDialect(t *testing.T) {
	t.Parallel()
	if _, err := inspect.Locks(t.Context(), nil); err != dialect.ErrNilDB {
		t.Fatalf("Locks(nil) = %v, want ErrNilDB", err)
	}
}
