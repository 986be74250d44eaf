package sqllock_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/tests/benchtest"
)

// BenchmarkLockValue measures Lock.SetValue and Table.Value, each next to
// the one statement it stands for issued raw on the same pool (the fenced
// write of a held lease's value; the read of a name's live lease and
// value), interleaved in one run, with a context that never ends and with
// a cancellable one (which drivers watch: sqllock's calls are bounded, so
// its own are always watched). It reports sqllock-ns/op, raw-ns/op and
// ratio = raw time / sqllock time (the target is >= 0.9). Run:
//
//	go test -run '^$' -bench LockValue -benchtime 2000x .
func BenchmarkLockValue(b *testing.B) {
	for _, kind := range []string{"postgres", "mysql", "sqlite"} {
		b.Run(kind, func(b *testing.B) {
			ctx := context.Background()
			db, d, set, get := valueBenchSetup(b, kind)
			if err := sqllock.Migrate(ctx, d); err != nil {
				b.Fatal(err)
			}
			locker, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Hour}})
			if err != nil {
				b.Fatal(err)
			}
			lock, err := locker.TryAcquire(ctx, "bench-value")
			if err != nil {
				b.Fatal(err)
			}
			defer lock.Release(ctx)
			raw, err := locker.TryAcquire(ctx, "bench-value-raw")
			if err != nil {
				b.Fatal(err)
			}
			defer raw.Release(ctx)
			const value = "host-a, schema v42"

			cancellable, cancel := context.WithCancel(ctx)
			defer cancel()
			for _, run := range []struct {
				name string
				ctx  context.Context
			}{{"", ctx}, {"/ctx=cancellable", cancellable}} {
				b.Run("SetValue"+run.name, func(b *testing.B) {
					var ours, theirs time.Duration
					for range b.N {
						start := time.Now()
						if err := lock.SetValue(run.ctx, value); err != nil {
							b.Fatal(err)
						}
						ours += time.Since(start)
						start = time.Now()
						res, err := db.ExecContext(run.ctx, set, value, raw.Name(), raw.Owner(), raw.Token())
						if err != nil {
							b.Fatal(err)
						}
						if n, err := res.RowsAffected(); err != nil || n != 1 {
							b.Fatalf("raw set: %d rows, %v", n, err)
						}
						theirs += time.Since(start)
					}
					benchtest.ReportRatio(b, theirs, ours)
				})
				b.Run("Value"+run.name, func(b *testing.B) {
					var ours, theirs time.Duration
					for range b.N {
						start := time.Now()
						if li, ok, err := locker.Value(run.ctx, "bench-value"); err != nil || !ok || li.Value != value {
							b.Fatalf("Value = %+v, %v, %v", li, ok, err)
						}
						ours += time.Since(start)
						start = time.Now()
						var (
							name, owner, v               []byte
							token                        int64
							holds                        int
							acquired, expires, expiresIn any
						)
						if err := db.QueryRowContext(run.ctx, get, raw.Name()).Scan(&name, &owner, &token, &holds, &acquired, &expires, &expiresIn, &v); err != nil {
							b.Fatal(err)
						}
						theirs += time.Since(start)
					}
					benchtest.ReportRatio(b, theirs, ours)
				})
			}
		})
	}
}

// valueBenchSetup opens kind on a namespace of the benchmark's own, with
// the raw statements of a lock value's write (value, name, owner, token)
// and read (name), written as a user would write them.
func valueBenchSetup(b *testing.B, kind string) (db *sql.DB, d dialect.Dialect, set, get string) {
	b.Helper()
	db, d, ns := benchOpen(b, kind)
	switch kind {
	case "postgres":
		locks := `"` + ns + `".sqllock_locks`
		set = `UPDATE ` + locks + ` SET lock_value = $1, lock_value_token = token
WHERE name = $2 AND owner = $3 AND token = $4 AND holds > 0 AND expires_at > now()`
		get = `SELECT name, owner, token, holds, acquired_at, expires_at, expires_at - now(),
  CASE WHEN lock_value_token = token THEN lock_value END FROM ` + locks + ` WHERE name = $1 AND expires_at > now()`
	case "mysql":
		locks := "`" + ns + "`.sqllock_locks"
		set = `UPDATE ` + locks + ` SET lock_value = ?, lock_value_token = token, expires_at = expires_at + INTERVAL 1 MICROSECOND
WHERE name = ? AND owner = ? AND token = ? AND holds > 0 AND expires_at > ` + mysqlNow
		get = `SELECT name, owner, token, holds, acquired_at, expires_at, TIMESTAMPDIFF(MICROSECOND, ` + mysqlNow + `, expires_at),
  IF(lock_value_token = token, lock_value, NULL) FROM ` + locks + ` WHERE name = ? AND expires_at > ` + mysqlNow
	default:
		set = `INSERT INTO sqllock_lock_holder_values (name, token, value)
SELECT name, token, ?1 FROM sqllock_locks WHERE name = ?2 AND owner = ?3 AND token = ?4 AND holds > 0 AND expires_at > ` + sqliteNow + `
ON CONFLICT (name) DO UPDATE SET token = excluded.token, value = excluded.value`
		get = `SELECT l.name, l.owner, l.token, l.holds, l.acquired_at, l.expires_at, l.expires_at - ` + sqliteNow + `, v.value
FROM sqllock_locks l LEFT JOIN sqllock_lock_holder_values v ON v.name = l.name AND v.token = l.token
WHERE l.name = ?1 AND l.expires_at > ` + sqliteNow
	}
	return db, d, set, get
}

// The dialects' clocks, as raw statements write them: MySQL's is one that
// no session's SET timestamp moves; SQLite's, microseconds since the epoch.
const (
	mysqlNow  = "(UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND)"
	sqliteNow = `(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)`
)

// benchOpen opens kind (postgres, mysql or sqlite) on a namespace of the
// benchmark's own: its schema, its database, or "" for SQLite's file.
func benchOpen(b *testing.B, kind string) (db *sql.DB, d dialect.Dialect, ns string) {
	b.Helper()
	var err error
	switch kind {
	case "postgres":
		db, ns = dbtest.Postgres(b)
		var pd *postgres.Dialect
		if pd, err = postgres.New(db, postgres.WithSchema(ns)); err == nil {
			closeAtEnd(b, pd)
		}
		d = pd
	case "mysql":
		db, ns = dbtest.MySQL(b)
		var md *mysql.Dialect
		if md, err = mysql.New(db, mysql.WithDatabase(ns)); err == nil {
			closeAtEnd(b, md)
		}
		d = md
	default:
		dbtest.SQLite(b)
		db, _ = openSQLite(b)
		d, err = sqlite.New(db)
	}
	if err != nil {
		b.Fatal(err)
	}
	return db, d, ns
}
