package sqllock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// BenchmarkElectionCampaignResign measures an uncontended Campaign+Resign
// (the grant that stores the value, and the release: two statements) on
// distinct names, next to the lock table's TryAcquire+Release (two
// statements) on the same pool, interleaved in one run. It reports election-ns/op, table-ns/op and ratio
// = table time / election time. Run:
//
//	go test -run '^$' -bench ElectionCampaignResign -benchtime 2000x .
func BenchmarkElectionCampaignResign(b *testing.B) {
	for _, kind := range []string{"postgres", "mysql", "sqlite"} {
		b.Run(kind, func(b *testing.B) {
			d := benchDialect(b, kind)
			if err := sqllock.Migrate(context.Background(), d); err != nil {
				b.Fatal(err)
			}
			el, err := sqllock.NewElection(d, sqllock.LeaseOptions{})
			if err != nil {
				b.Fatal(err)
			}
			table, err := sqllock.NewTable(d, sqllock.TableOptions{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var elected, locked time.Duration
			b.ResetTimer()
			for i := range b.N {
				name := "bench-" + strconv.Itoa(i)
				start := time.Now()
				lead, err := el.Campaign(ctx, name, "node-1")
				if err != nil {
					b.Fatal(err)
				}
				if err := lead.Resign(ctx); err != nil {
					b.Fatal(err)
				}
				elected += time.Since(start)
				start = time.Now()
				lock, err := table.TryAcquire(ctx, name+"-t")
				if err != nil {
					b.Fatal(err)
				}
				if err := lock.Release(ctx); err != nil {
					b.Fatal(err)
				}
				locked += time.Since(start)
			}
			b.ReportMetric(float64(elected.Nanoseconds())/float64(b.N), "election-ns/op")
			b.ReportMetric(float64(locked.Nanoseconds())/float64(b.N), "table-ns/op")
			b.ReportMetric(float64(locked)/float64(elected), "ratio")
		})
	}
}

// benchDialect returns a migrated-to-be dialect of kind on a namespace of
// the benchmark's own.
func benchDialect(b *testing.B, kind string) dialect.Dialect {
	b.Helper()
	var (
		d   dialect.Dialect
		err error
	)
	switch kind {
	case "postgres":
		db, schema := dbtest.Postgres(b)
		var pd *postgres.Dialect
		pd, err = postgres.New(db, postgres.WithSchema(schema))
		if err == nil {
			closeAtEnd(b, pd)
		}
		d = pd
	case "mysql":
		db, database := dbtest.MySQL(b)
		var md *mysql.Dialect
		md, err = mysql.New(db, mysql.WithDatabase(database))
		if err == nil {
			closeAtEnd(b, md)
		}
		d = md
	default:
		dbtest.SQLite(b)
		db, _ := openSQLite(b)
		d, err = sqlite.New(db)
	}
	if err != nil {
		b.Fatal(err)
	}
	return d
}
