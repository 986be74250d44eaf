package sqllock_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/tests/benchtest"
)

// BenchmarkOptimisticTryAcquireRelease is BenchmarkTryAcquireRelease for the
// optimistic strategy: an uncontended TryAcquire+Release on distinct names
// (a read, a version swap, a release) next to the same three statements
// issued raw, interleaved in one run. Reports ratio = raw time / sqllock
// time. Run:
//
//	go test -run '^$' -bench OptimisticTryAcquireRelease -benchtime 3000x .
func BenchmarkOptimisticTryAcquireRelease(b *testing.B) {
	ds := benchDialects(b)
	for _, kind := range []string{"postgres", "mysql"} {
		d := ds[kind]
		db := d.DB()
		ctx := context.Background()
		locker, err := sqllock.NewOptimistic(d, sqllock.OptimisticOptions{})
		if err != nil {
			b.Fatal(err)
		}
		var read, take, release string
		switch kind {
		case "postgres":
			v := `"` + d.(interface{ Schema() string }).Schema() + `".sqllock_versions`
			read = `SELECT version, owner, holds, holds > 0 AND expires_at > now(),
  (extract(epoch FROM greatest(expires_at, now()) - now()) * 1000000)::bigint FROM ` + v + ` WHERE name = $1`
			take = `UPDATE ` + v + ` SET owner = $2, version = version + 1, holds = 1, acquired_at = now(),
  expires_at = now() + $3::bigint * interval '1 microsecond' WHERE name = $1 AND version = $4 AND expires_at <= now()`
			release = `UPDATE ` + v + ` SET holds = holds - 1, expires_at = CASE WHEN holds = 1 THEN '-infinity' ELSE expires_at END
WHERE name = $1 AND owner = $2 AND version = $3 AND holds > 0`
		case "mysql":
			v := "`" + d.(interface{ Database() string }).Database() + "`.sqllock_versions"
			read = `SELECT version, owner, holds, holds > 0 AND expires_at > UTC_TIMESTAMP(6),
  GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), 0) FROM ` + v + ` WHERE name = ?`
			take = `UPDATE ` + v + ` SET owner = ?, version = version + 1, holds = 1, acquired_at = UTC_TIMESTAMP(6),
  expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE name = ? AND version = ? AND expires_at <= UTC_TIMESTAMP(6)`
			release = `UPDATE ` + v + ` SET holds = holds - 1, expires_at = IF(holds = 0, '1000-01-01 00:00:00', expires_at)
WHERE name = ? AND owner = ? AND version = ? AND holds > 0`
		}
		var n atomic.Int64
		raw := func(name string) error {
			name = "raw-" + name // rows of its own, created by the locker below
			owner := "raw-" + strconv.FormatInt(n.Add(1), 10)
			var (
				version     int64
				rowOwner    []byte
				holds       int
				live        bool
				remainingUS int64
			)
			if err := db.QueryRowContext(ctx, read, name).Scan(&version, &rowOwner, &holds, &live, &remainingUS); err != nil {
				return err
			}
			var err error
			if kind == "postgres" {
				_, err = db.ExecContext(ctx, take, name, owner, int64(30e6), version)
			} else {
				_, err = db.ExecContext(ctx, take, owner, int64(30e6), name, version)
			}
			if err != nil {
				return err
			}
			_, err = db.ExecContext(ctx, release, name, owner, version+1)
			return err
		}
		ours := func(name string) error {
			k, err := locker.TryAcquire(ctx, name)
			if err != nil {
				return err
			}
			return k.Release(ctx)
		}
		for c := range 8 { // the rows both sides use, created once
			for _, name := range []string{"bench-" + strconv.Itoa(c), "raw-bench-" + strconv.Itoa(c)} {
				if err := ours(name); err != nil {
					b.Fatal(err)
				}
			}
		}
		for _, run := range benchtest.Runs(b) {
			clients := run.Clients
			ctx = run.Ctx
			b.Run(kind+"/"+run.Name, func(b *testing.B) {
				t := benchtest.Alternate(b, benchtest.Chunk, clients, raw, ours)
				benchtest.ReportRatio(b, t[0], t[1])
			})
		}
	}
}
