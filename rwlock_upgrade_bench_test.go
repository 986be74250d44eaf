package sqllock_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/tests/benchtest"
)

// BenchmarkRWLockChangeSides measures Lock.Downgrade of a write hold and
// Lock.Upgrade of an upgradeable read (uncontended), each next to the
// statements it stands for issued through the dialect's read/write lock
// table alone (the one downgrade statement; the upgrade's transaction),
// without sqllock's handles, waiting room and checks, interleaved in one
// run. Only the change of side is timed; the grants and releases around
// it are not. It reports sqllock-ns/op, raw-ns/op and ratio = raw time /
// sqllock time (the target is >= 0.9). Run:
//
//	go test -run '^$' -bench RWLockChangeSides -benchtime 1000x .
func BenchmarkRWLockChangeSides(b *testing.B) {
	for _, kind := range []string{"postgres", "mysql", "sqlite"} {
		b.Run(kind, func(b *testing.B) {
			ctx := context.Background()
			d := rwBenchDialect(b, kind)
			if err := sqllock.Migrate(ctx, d); err != nil {
				b.Fatal(err)
			}
			l, err := sqllock.NewRWLock(d, sqllock.LeaseOptions{TTL: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			rw := testutil.Tables(b, d).RWLocks
			grant := func(name, owner string, upgradeable bool) dialect.Lease {
				p := dialect.RWAcquireParams{Name: name, Owner: owner, TTL: time.Hour, Shared: upgradeable, Upgradeable: upgradeable}
				g, err := rw.Acquire(ctx, p)
				if err != nil || g.Token == 0 {
					b.Fatalf("raw grant %+v: %v", g, err)
				}
				return dialect.Lease{Name: name, Owner: owner, Token: g.Token}
			}
			releaseRaw := func(lease dialect.Lease) {
				if _, err := rw.Release(ctx, lease, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.Run("Downgrade", func(b *testing.B) {
				var ours, theirs time.Duration
				for range b.N {
					k, err := l.TryAcquire(ctx, "bench-downgrade")
					if err != nil {
						b.Fatal(err)
					}
					start := time.Now()
					if err := k.Downgrade(ctx); err != nil {
						b.Fatal(err)
					}
					ours += time.Since(start)
					if err := k.Release(ctx); err != nil {
						b.Fatal(err)
					}
					lease := grant("bench-downgrade-raw", "raw", false)
					start = time.Now()
					if ok, err := rw.Downgrade(ctx, lease); err != nil || !ok {
						b.Fatalf("raw downgrade: %v, %v", ok, err)
					}
					theirs += time.Since(start)
					releaseRaw(lease)
				}
				benchtest.ReportRatio(b, theirs, ours)
			})
			b.Run("Upgrade", func(b *testing.B) {
				var ours, theirs time.Duration
				for range b.N {
					k, err := l.TryAcquireUpgradeable(ctx, "bench-upgrade")
					if err != nil {
						b.Fatal(err)
					}
					start := time.Now()
					if err := k.Upgrade(ctx); err != nil {
						b.Fatal(err)
					}
					ours += time.Since(start)
					if err := k.Release(ctx); err != nil {
						b.Fatal(err)
					}
					lease := grant("bench-upgrade-raw", "raw", true)
					start = time.Now()
					p := dialect.RWUpgradeParams{Name: lease.Name, Owner: lease.Owner, Token: lease.Token, TTL: time.Hour, Wait: true}
					if g, err := rw.Upgrade(ctx, p); err != nil || g.Token != lease.Token {
						b.Fatalf("raw upgrade: %+v, %v", g, err)
					}
					theirs += time.Since(start)
					releaseRaw(lease)
				}
				benchtest.ReportRatio(b, theirs, ours)
			})
		})
	}
}

// rwBenchDialect opens a database of kind of b's own, as
// BenchmarkRWLockShared does.
func rwBenchDialect(b *testing.B, kind string) dialect.Dialect {
	b.Helper()
	switch kind {
	case "postgres":
		db, schema := dbtest.Postgres(b)
		d, err := postgres.New(db, postgres.WithSchema(schema))
		if err != nil {
			b.Fatal(err)
		}
		closeAtEnd(b, d)
		return d
	case "mysql":
		db, database := dbtest.MySQL(b)
		d, err := mysql.New(db, mysql.WithDatabase(database))
		if err != nil {
			b.Fatal(err)
		}
		closeAtEnd(b, d)
		return d
	}
	dbtest.SQLite(b)
	db, _ := openSQLite(b)
	d, err := sqlite.New(db)
	if err != nil {
		b.Fatal(err)
	}
	return d
}
