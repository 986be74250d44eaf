package sqllock_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/tests/benchtest"
)

// BenchmarkRequestRelease measures Table.RequestRelease next to the one
// statement it stands for issued raw on the same pool (the write of a
// request's reason on a name's held lease), interleaved in one run. It
// reports sqllock-ns/op, raw-ns/op and ratio = raw time / sqllock time
// (the target is >= 0.9). The holder's side costs no statement: its
// renewals read the request (see BenchmarkRenewal). Run:
//
//	go test -run '^$' -bench RequestRelease -benchtime 2000x .
func BenchmarkRequestRelease(b *testing.B) {
	for _, kind := range []string{"postgres", "mysql", "sqlite"} {
		b.Run(kind, func(b *testing.B) {
			ctx := context.Background()
			db, d, ns := benchOpen(b, kind)
			if err := sqllock.Migrate(ctx, d); err != nil {
				b.Fatal(err)
			}
			var ask string
			switch kind {
			case "postgres":
				ask = `UPDATE "` + ns + `".sqllock_locks SET release_reason = $1, release_token = token
WHERE name = $2 AND holds > 0 AND expires_at > now()`
			case "mysql":
				ask = "UPDATE `" + ns + "`.sqllock_locks SET release_reason = ?, release_token = token, expires_at = expires_at + INTERVAL 1 MICROSECOND\nWHERE name = ? AND holds > 0 AND expires_at > " + mysqlNow
			default:
				ask = `INSERT INTO sqllock_release_requests (name, token, reason)
SELECT name, token, ?1 FROM sqllock_locks WHERE name = ?2 AND holds > 0 AND expires_at > ` + sqliteNow + `
ON CONFLICT (name) DO UPDATE SET token = excluded.token, reason = excluded.reason`
			}
			locker, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Hour}})
			if err != nil {
				b.Fatal(err)
			}
			for _, name := range []string{"bench-ask", "bench-ask-raw"} {
				k, err := locker.TryAcquire(ctx, name)
				if err != nil {
					b.Fatal(err)
				}
				defer k.Release(ctx)
			}
			const reason = "deploy v1.43"
			var ours, theirs time.Duration
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if asked, err := locker.RequestRelease(ctx, "bench-ask", reason); err != nil || !asked {
					b.Fatalf("RequestRelease = %v, %v", asked, err)
				}
				ours += time.Since(start)
				start = time.Now()
				res, err := db.ExecContext(ctx, ask, reason, "bench-ask-raw")
				if err != nil {
					b.Fatal(err)
				}
				if n, err := res.RowsAffected(); err != nil || n != 1 {
					b.Fatalf("raw request: %d rows, %v", n, err)
				}
				theirs += time.Since(start)
			}
			benchtest.ReportRatio(b, theirs, ours)
		})
	}
}
