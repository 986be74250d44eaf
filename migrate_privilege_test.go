package sqllock_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/ledger"
)

// roleEnv is a dialect on e's migrated schema or database whose pool logs in
// as a role of the test's own with r's privileges (see dbtest.Role): the
// least-privilege set-up of docs/databases.md.
func roleEnv(t *testing.T, e *env, r dbtest.Role) dialect.Dialect {
	t.Helper()
	var (
		d   dialect.Dialect
		err error
	)
	switch e.kind {
	case "postgres":
		d, err = postgres.New(dbtest.OpenPostgres(t, dbtest.PostgresRole(t, e.ns, r)), postgres.WithSchema(e.ns))
	case "mysql":
		d, err = mysql.New(dbtest.OpenMySQL(t, dbtest.MySQLRole(t, e.ns, r)), mysql.WithDatabase(e.ns))
	default:
		t.Fatalf("no roles on %s", e.kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, d.(interface{ Close(context.Context) error }))
	return d
}

// eachServer runs fn against PostgreSQL and MySQL/MariaDB, which have
// roles, in parallel subtests.
func eachServer(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Parallel()
	for _, m := range envs {
		if m.kind == "sqlite" {
			continue
		}
		t.Run(m.kind, func(t *testing.T) {
			t.Parallel()
			fn(t, m.make(t))
		})
	}
}

// newestVersion is the version of the newest migration of d.
func newestVersion(t *testing.T, ctx context.Context, owner dialect.Dialect) uint {
	t.Helper()
	v, dirty, err := sqllock.MigrationVersion(ctx, owner)
	if err != nil || dirty || v == 0 {
		t.Fatalf("the owner's schema: version %d, dirty %v, %v", v, dirty, err)
	}
	return v
}

// A role with SELECT, INSERT, UPDATE and DELETE on sqllock's tables alone
// (migrated by their owner) can start a service: Migrate on the up-to-date
// schema needs no DDL, and every primitive works. Its MigrateDown fails
// and leaves the schema as it was, clean.
func TestLeastPrivilegeApp(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(ctxT(t), 2*time.Minute)
		defer cancel()
		latest := newestVersion(t, ctx, e.d)
		d := roleEnv(t, e, dbtest.App)

		if err := sqllock.Migrate(ctx, d); err != nil {
			t.Fatalf("Migrate of an up-to-date schema by the application's role: %v", err)
		}
		if v, dirty, err := sqllock.MigrationVersion(ctx, d); err != nil || v != latest || dirty {
			t.Fatalf("MigrationVersion: %d, %v, %v; want %d, clean", v, dirty, err, latest)
		}

		leastPrivilegePrimitives(t, ctx, d)

		err := sqllock.MigrateDown(ctx, d)
		if err == nil {
			t.Fatal("MigrateDown by the application's role succeeded")
		}
		t.Logf("MigrateDown by the application's role: %v", err)
		if v, dirty, err := sqllock.MigrationVersion(ctx, e.d); err != nil || v != latest || dirty {
			t.Fatalf("after the refused MigrateDown: version %d, dirty %v, %v; want %d, clean", v, dirty, err, latest)
		}
		// The tables are all there: the owner's locker still works.
		l, err := sqllock.NewTable(e.d, sqllock.TableOptions{})
		if err != nil {
			t.Fatal(err)
		}
		k, err := l.TryAcquire(ctx, "after-down")
		if err != nil {
			t.Fatalf("a lock after the refused MigrateDown: %v", err)
		}
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A viewer, with SELECT alone, reads the schema's version and lists locks.
func TestLeastPrivilegeViewer(t *testing.T) {
	eachServer(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(ctxT(t), time.Minute)
		defer cancel()
		latest := newestVersion(t, ctx, e.d)
		d := roleEnv(t, e, dbtest.Viewer)
		if v, dirty, err := sqllock.MigrationVersion(ctx, d); err != nil || v != latest || dirty {
			t.Fatalf("MigrationVersion: %d, %v, %v; want %d, clean", v, dirty, err, latest)
		}
		if err := sqllock.Migrate(ctx, d); err != nil {
			t.Fatalf("Migrate of an up-to-date schema by a viewer: %v", err)
		}
		l, err := sqllock.NewTable(d, sqllock.TableOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.List(ctx); err != nil {
			t.Fatalf("List by a viewer: %v", err)
		}
		if _, err := l.TryAcquire(ctx, "viewer"); err == nil {
			t.Fatal("a viewer was granted a lock")
		}
	})
}

// leastPrivilegePrimitives takes and releases each primitive once on d.
func leastPrivilegePrimitives(t *testing.T, ctx context.Context, d dialect.Dialect) {
	t.Helper()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s as the application's role: %v", what, err)
		}
	}
	release := func(what string, k interface{ Release(context.Context) error }) {
		t.Helper()
		must(what+": release", k.Release(ctx))
	}

	for _, fair := range []bool{false, true} {
		tbl, err := sqllock.NewTable(d, sqllock.TableOptions{Fair: fair})
		must("NewTable", err)
		k, err := tbl.Acquire(ctx, "table")
		must("table lock", err)
		release("table lock", k)
		if !fair { // a fair table takes no sets
			set, err := tbl.AcquireAll(ctx, "set-a", "set-b")
			must("lock set", err)
			release("lock set", set)
		}
		_, err = tbl.List(ctx)
		must("List", err)
	}

	opt, err := sqllock.NewOptimistic(d, sqllock.OptimisticOptions{})
	must("NewOptimistic", err)
	k, err := opt.Acquire(ctx, "optimistic")
	must("optimistic lock", err)
	release("optimistic lock", k)

	pess, err := sqllock.NewPessimistic(d, sqllock.PessimisticOptions{})
	must("NewPessimistic", err)
	k, err = pess.Acquire(ctx, "pessimistic")
	must("pessimistic lock", err)
	release("pessimistic lock", k)
	k, err = pess.AcquireShared(ctx, "pessimistic-shared")
	must("shared pessimistic lock", err)
	release("shared pessimistic lock", k)

	for _, fair := range []bool{false, true} {
		sem, err := sqllock.NewSemaphore(d, 2, sqllock.SemaphoreOptions{Fair: fair})
		must("NewSemaphore", err)
		k, err = sem.Acquire(ctx, "semaphore")
		must("semaphore", err)
		release("semaphore", k)
	}

	rw, err := sqllock.NewRWLock(d, sqllock.LeaseOptions{})
	must("NewRWLock", err)
	k, err = rw.AcquireShared(ctx, "rw")
	must("read lock", err)
	release("read lock", k)
	k, err = rw.Acquire(ctx, "rw")
	must("write lock", err)
	release("write lock", k)

	el, err := sqllock.NewElection(d, sqllock.LeaseOptions{})
	must("NewElection", err)
	lead, err := el.Campaign(ctx, "election", "me")
	must("Campaign", err)
	must("Proclaim", lead.Proclaim(ctx, "still me"))
	_, err = el.Leader(ctx, "election")
	must("Leader", err)
	must("Resign", lead.Resign(ctx))

	led, err := ledger.New(d, ledger.Options{})
	must("ledger.New", err)
	_, err = led.Run(ctx, "job", ledger.Key("once"), func(context.Context, *ledger.Run) error { return nil })
	must("ledger run", err)
	_, err = led.Runs(ctx, "job", 10)
	must("ledger runs", err)
	_, err = led.Reap(ctx, time.Hour)
	must("ledger reap", err)

	r, err := sqllock.NewReaper(d, sqllock.ReaperOptions{})
	must("NewReaper", err)
	_, err = r.Reap(ctx)
	must("Reap", err)
}
