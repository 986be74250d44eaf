package ledger_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/ledger"
	"github.com/sqllock/sqllock/tests/benchtest"
)

// BenchmarkRun measures a Ledger.Run of an empty function on a fresh
// occurrence each time (a claim and a record of success), next to the
// lock table's uncontended TryAcquire and Release on the same pool,
// interleaved in one run, with one client. It reports sqllock-ns/op (the
// ledger's), raw-ns/op (the lock's) and ratio = lock time / ledger time.
// A Run is 12 round trips to the lock's 2: the lease's acquire; the
// claim's transaction (begin, guard, the occurrence's attempts, the
// attempt's insert, the job's upsert, commit); the record's (begin, guard,
// update, commit); the release. Every adds one (the database's time).
// Run:
//
//	go test -run '^$' -bench Run -benchtime 3s ./ledger/
func BenchmarkRun(b *testing.B) {
	for _, kind := range benchtest.Kinds {
		_, d, _ := benchtest.OpenTable(b, kind)
		locker, err := sqllock.NewTable(d, sqllock.TableOptions{})
		if err != nil {
			b.Fatal(err)
		}
		l, err := ledger.New(d, ledger.Options{})
		if err != nil {
			b.Fatal(err)
		}
		var n atomic.Int64
		run := func(ctx context.Context, name string) error {
			_, err := l.Run(ctx, "bench", ledger.Key(name+"-"+strconv.FormatInt(n.Add(1), 10)),
				func(context.Context, *ledger.Run) error { return nil })
			return err
		}
		b.Run(kind, func(b *testing.B) {
			t := benchtest.Alternate(b, benchtest.Chunk, 1, benchtest.Bind(context.Background(), benchtest.Table(locker), run)...)
			benchtest.ReportRatio(b, t[0], t[1])
		})
	}
}
