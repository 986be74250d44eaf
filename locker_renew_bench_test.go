package sqllock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/testutil"
)

// BenchmarkRenewal measures one renewal period of a process holding 1 000
// or 10 000 leases: batched (RenewMany, as lockers do) and, for 1 000, one
// statement per lease for comparison. Each b.N is one period. Reports
// stmts/period and ms/period (wall time of the period's statements, issued
// one after another). Run:
//
//	go test -run '^$' -bench Renewal -benchtime 5x .
func BenchmarkRenewal(b *testing.B) {
	ds := benchDialects(b)
	ctx := context.Background()
	for _, kind := range []string{"postgres", "mysql"} {
		d := ds[kind]
		var held []dialect.Lease
		for _, n := range []int{1000, 10000} {
			for i := len(held); i < n; i++ {
				l := dialect.Lease{Name: fmt.Sprintf("renew-%d", i), Owner: "bench"}
				tok, err := testutil.Tables(b, d).Locks.Acquire(ctx, dialect.AcquireParams{Name: l.Name, Owner: l.Owner, TTL: time.Hour})
				if err != nil || tok == 0 {
					b.Fatalf("grant %d: %v", i, err)
				}
				l.Token = tok
				held = append(held, l)
			}
			ls := held[:n]
			b.Run(fmt.Sprintf("%s/leases=%d/batched", kind, n), func(b *testing.B) {
				perBatch := 1
				if kind == "mysql" {
					perBatch = 2 // the update, then a read of what it renewed
				}
				var stmts int
				for range b.N {
					for i := 0; i < len(ls); i += dialect.MaxRenewBatch {
						ok, err := testutil.Renewed(testutil.Tables(b, d).Locks.RenewMany(ctx, ls[i:min(i+dialect.MaxRenewBatch, len(ls))], time.Hour))
						if err != nil {
							b.Fatal(err)
						}
						for _, o := range ok {
							if !o {
								b.Fatal("a held lease was not renewed")
							}
						}
						stmts += perBatch
					}
				}
				b.ReportMetric(float64(stmts)/float64(b.N), "stmts/period")
				b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/period")
			})
			if n > 1000 {
				continue
			}
			b.Run(fmt.Sprintf("%s/leases=%d/single", kind, n), func(b *testing.B) {
				for range b.N {
					for _, l := range ls {
						if ok, err := testutil.Renewed(testutil.Tables(b, d).Locks.RenewMany(ctx, []dialect.Lease{l}, time.Hour)); err != nil || !ok[0] {
							b.Fatalf("renew: %v %v", ok, err)
						}
					}
				}
				b.ReportMetric(float64(len(ls)), "stmts/period")
				b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/period")
			})
		}
	}
}
