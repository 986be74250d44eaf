package sqllock_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// BenchmarkTryAcquireRelease measures an uncontended TryAcquire+Release on
// distinct names with 1 and 8 concurrent clients, next to the same two
// statements issued raw on the same pool, so the ratio of the two ns/op
// figures is the cost of the strategy (renewal loop, bookkeeping). Run:
//
//	go test -run '^$' -bench TryAcquireRelease -benchtime 3s .
func BenchmarkTryAcquireRelease(b *testing.B) {
	for _, kind := range []string{"postgres", "mysql"} {
		var (
			db       *sql.DB
			locker   *sqllock.Table
			acquire  func(ctx context.Context, name, owner string) (int64, error)
			releaseQ string
		)
		ctx := context.Background()
		switch kind {
		case "postgres":
			var schema string
			db, schema = dbtest.Postgres(b)
			d, err := postgres.New(db, postgres.WithSchema(schema))
			if err != nil {
				b.Fatal(err)
			}
			benchSetup(b, d, &locker)
			q := fmt.Sprintf(`INSERT INTO "%[1]s".sqllock_locks AS l (name, owner, token, holds, acquired_at, expires_at)
VALUES ($1, $2, nextval('"%[1]s".sqllock_token_seq'), 1, now(), now() + $3::bigint * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE SET
  token = CASE WHEN l.expires_at <= now() THEN nextval('"%[1]s".sqllock_token_seq') ELSE l.token END,
  holds = CASE WHEN l.expires_at <= now() THEN 1 ELSE l.holds + 1 END,
  acquired_at = CASE WHEN l.expires_at <= now() THEN now() ELSE l.acquired_at END,
  owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
WHERE l.expires_at <= now() OR l.owner = EXCLUDED.owner
RETURNING token`, schema)
			acquire = func(ctx context.Context, name, owner string) (int64, error) {
				var tok int64
				err := db.QueryRowContext(ctx, q, name, owner, int64(30e6)).Scan(&tok)
				return tok, err
			}
			releaseQ = fmt.Sprintf(`UPDATE "%s".sqllock_locks SET holds = holds - 1,
  expires_at = CASE WHEN holds = 1 THEN '-infinity' ELSE expires_at END
WHERE name = $1 AND owner = $2 AND token = $3 AND holds > 0`, schema)
		case "mysql":
			var database string
			db, database = dbtest.MySQL(b)
			d, err := mysql.New(db, mysql.WithDatabase(database))
			if err != nil {
				b.Fatal(err)
			}
			benchSetup(b, d, &locker)
			t := fmt.Sprintf("`%s`.sqllock_locks", database)
			q := fmt.Sprintf(`INSERT INTO %[1]s (name, owner, token, holds, acquired_at, expires_at)
SELECT ?, ?, LAST_INSERT_ID(f.token + 1), 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
FROM `+"`%[2]s`"+`.sqllock_token_floor f WHERE f.id = 1 LOCK IN SHARE MODE
ON DUPLICATE KEY UPDATE
  token = IF(%[1]s.expires_at <= UTC_TIMESTAMP(6), LAST_INSERT_ID(%[1]s.token + 1),
    IF(%[1]s.owner = ?, LAST_INSERT_ID(%[1]s.token), %[1]s.token + LAST_INSERT_ID(0))),
  acquired_at = IF(%[1]s.expires_at <= UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), %[1]s.acquired_at),
  holds = IF(%[1]s.expires_at <= UTC_TIMESTAMP(6), 1, IF(%[1]s.owner = ?, %[1]s.holds + 1, %[1]s.holds)),
  owner = IF(%[1]s.expires_at <= UTC_TIMESTAMP(6), ?, %[1]s.owner),
  expires_at = IF(%[1]s.owner = ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, %[1]s.expires_at)`, t, database)
			acquire = func(ctx context.Context, name, owner string) (int64, error) {
				res, err := db.ExecContext(ctx, q, name, owner, int64(30e6), owner, owner, owner, owner, int64(30e6))
				if err != nil {
					return 0, err
				}
				return res.LastInsertId()
			}
			releaseQ = fmt.Sprintf("UPDATE %s SET holds = holds - 1, expires_at = IF(holds = 0, '1000-01-01 00:00:00', expires_at) WHERE name = ? AND owner = ? AND token = ? AND holds > 0", t)
		}
		for _, clients := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/clients=%d/sqllock", kind, clients), func(b *testing.B) {
				runClients(b, clients, func(name string) error {
					k, err := locker.TryAcquire(ctx, name)
					if err != nil {
						return err
					}
					return k.Release(ctx)
				})
			})
			b.Run(fmt.Sprintf("%s/clients=%d/raw", kind, clients), func(b *testing.B) {
				var n atomic.Int64
				runClients(b, clients, func(name string) error {
					owner := fmt.Sprint("raw-", n.Add(1))
					tok, err := acquire(ctx, name, owner)
					if err != nil || tok == 0 {
						return fmt.Errorf("raw acquire: %d, %v", tok, err)
					}
					_, err = db.ExecContext(ctx, releaseQ, name, owner, tok)
					return err
				})
			})
		}
	}
}

// benchSetup migrates d and makes the locker under test.
func benchSetup(b *testing.B, d dialect.Dialect, locker **sqllock.Table) {
	b.Helper()
	if err := sqllock.Migrate(context.Background(), d); err != nil {
		b.Fatal(err)
	}
	l, err := sqllock.NewTable(d, sqllock.Options{})
	if err != nil {
		b.Fatal(err)
	}
	*locker = l
}

// runClients runs op b.N times in total across clients goroutines, each on
// its own lock name.
func runClients(b *testing.B, clients int, op func(name string) error) {
	var (
		left = int64(b.N)
		wg   sync.WaitGroup
		errs = make(chan error, clients)
		next atomic.Int64
	)
	b.ResetTimer()
	start := time.Now()
	for c := range clients {
		name := fmt.Sprintf("bench-%d", c)
		wg.Go(func() {
			for next.Add(1) <= left {
				if err := op(name); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}
