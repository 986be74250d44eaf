package sqllock_test

import (
	"testing"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/tests/benchtest"
)

// BenchmarkTryAcquireRelease measures an uncontended TryAcquire+Release on
// distinct names with 1 and 8 concurrent clients, next to the same two
// statements issued raw on the same pool, interleaved in one run. It reports
// sqllock-ns/op, raw-ns/op and ratio = raw time / sqllock time (1.0 means no
// overhead; the target is >= 0.9). sqllockotel's BenchmarkTryAcquireRelease
// adds lockers observed through OpenTelemetry. Run:
//
//	go test -run '^$' -bench TryAcquireRelease -benchtime 3s .
func BenchmarkTryAcquireRelease(b *testing.B) {
	benchTryAcquireRelease(b, benchtest.Kinds...)
}

// BenchmarkTryAcquireReleaseTiDB is BenchmarkTryAcquireRelease on the
// TiDB server named by SQLLOCK_TEST_TIDB_DSN (skipped without it). Run, on
// a server started as scripts/test-tidb.sh starts it:
//
//	SQLLOCK_TEST_TIDB_DSN='root@tcp(127.0.0.1:PORT)/test' go test -run '^$' -bench TryAcquireReleaseTiDB -benchtime 300x .
func BenchmarkTryAcquireReleaseTiDB(b *testing.B) {
	benchTryAcquireRelease(b, "tidb")
}

// benchTryAcquireRelease runs BenchmarkTryAcquireRelease on kinds.
func benchTryAcquireRelease(b *testing.B, kinds ...string) {
	for _, kind := range kinds {
		db, d, raw := benchtest.OpenTable(b, kind)
		locker, err := sqllock.NewTable(d, sqllock.TableOptions{})
		if err != nil {
			b.Fatal(err)
		}
		ours := benchtest.Table(locker)
		for _, run := range benchtest.Runs(b) {
			b.Run(kind+"/"+run.Name, func(b *testing.B) {
				db.SetMaxIdleConns(run.Clients + 2) // keep connections: no reconnects in either loop
				t := benchtest.Alternate(b, benchtest.Chunk, run.Clients, benchtest.Bind(run.Ctx, raw, ours)...)
				benchtest.ReportRatio(b, t[0], t[1])
			})
		}
	}
}
