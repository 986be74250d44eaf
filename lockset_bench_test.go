package sqllock_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/tests/benchtest"
)

// setSize is the number of names of the benchmarked sets.
const setSize = 4

// BenchmarkAcquireAllRelease measures an uncontended TryAcquireAll of four
// names and the set's Release, next to the minimal raw SQL doing the same
// (a transaction running the lock table's acquire statement for each
// name, then one release statement for the four leases), interleaved in
// one run on the same pool. It reports sqllock-ns/op, raw-ns/op and ratio
// = raw time / sqllock time (the target is >= 0.9). Run:
//
//	go test -run '^$' -bench AcquireAllRelease -benchtime 3s .
func BenchmarkAcquireAllRelease(b *testing.B) {
	for _, kind := range []string{"postgres", "mysql", "sqlite"} {
		var (
			db      *sql.DB
			d       dialect.Dialect
			acquire string // one name's grant, with ? for name, owner, TTL in µs
			release func(n int) string
			args    func(name, owner string) []any
		)
		switch kind {
		case "postgres":
			var schema string
			db, schema = dbtest.Postgres(b)
			pd, err := postgres.New(db, postgres.WithSchema(schema))
			if err != nil {
				b.Fatal(err)
			}
			closeAtEnd(b, pd)
			d = pd
			acquire = benchtest.PostgresAcquire(schema)
			args = func(name, owner string) []any { return []any{name, owner, int64(30e6)} }
			release = func(n int) string {
				var tuples []string
				for i := range n {
					tuples = append(tuples, fmt.Sprintf("($%d, $%d, $%d::bigint)", 3*i+1, 3*i+2, 3*i+3))
				}
				return fmt.Sprintf(`UPDATE "%s".sqllock_locks SET holds = holds - 1,
  expires_at = CASE WHEN holds = 1 THEN '-infinity' ELSE expires_at END
WHERE (name, owner, token) IN (%s) AND holds > 0 RETURNING name`, schema, strings.Join(tuples, ", "))
			}
		case "mysql":
			var database string
			db, database = dbtest.MySQL(b)
			md, err := mysql.New(db, mysql.WithDatabase(database))
			if err != nil {
				b.Fatal(err)
			}
			closeAtEnd(b, md)
			d = md
			t := fmt.Sprintf("`%s`.sqllock_locks", database)
			acquire = fmt.Sprintf(`INSERT INTO %[1]s (name, owner, token, holds, acquired_at, expires_at)
SELECT ?, ?, LAST_INSERT_ID(GREATEST(f.token + 1, %[3]s)), 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
FROM `+"`%[2]s`"+`.sqllock_token_floor f WHERE f.id = 1 LOCK IN SHARE MODE
ON DUPLICATE KEY UPDATE
  token = IF(%[1]s.expires_at <= UTC_TIMESTAMP(6), LAST_INSERT_ID(GREATEST(%[1]s.token + 1, %[3]s)),
    IF(%[1]s.owner = VALUES(owner), LAST_INSERT_ID(%[1]s.token), %[1]s.token + LAST_INSERT_ID(0))),
  acquired_at = IF(%[1]s.expires_at <= UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), %[1]s.acquired_at),
  holds = IF(%[1]s.expires_at <= UTC_TIMESTAMP(6), 1, IF(%[1]s.owner = VALUES(owner), %[1]s.holds + 1, %[1]s.holds)),
  owner = IF(%[1]s.expires_at <= UTC_TIMESTAMP(6), VALUES(owner), %[1]s.owner),
  expires_at = IF(%[1]s.owner = VALUES(owner), VALUES(expires_at), %[1]s.expires_at)`, t, database,
				"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))")
			args = func(name, owner string) []any { return []any{name, owner, int64(30e6)} }
			release = func(n int) string {
				return fmt.Sprintf("UPDATE %s SET holds = holds - 1, expires_at = IF(holds = 0, '1000-01-01 00:00:00', expires_at) WHERE (name, owner, token) IN (%s) AND holds > 0",
					t, strings.TrimSuffix(strings.Repeat("(?, ?, ?), ", n), ", "))
			}
		case "sqlite":
			db, _ = openSQLite(b)
			sd, err := sqlite.New(db)
			if err != nil {
				b.Fatal(err)
			}
			d = sd
			acquire = benchtest.SQLiteAcquire
			args = func(name, owner string) []any { return []any{name, owner, int64(30e6)} }
			release = func(n int) string {
				return fmt.Sprintf(`UPDATE sqllock_locks SET holds = holds - 1, expires_at = CASE WHEN holds = 1 THEN 0 ELSE expires_at END
WHERE (name, owner, token) IN (%s) AND holds > 0 RETURNING name`, strings.TrimSuffix(strings.Repeat("(?, ?, ?), ", n), ", "))
			}
		}
		if err := sqllock.Migrate(context.Background(), d); err != nil {
			b.Fatal(err)
		}
		locker, err := sqllock.NewTable(d, sqllock.TableOptions{})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		ours := func(name string) error {
			s, err := locker.TryAcquireAll(ctx, setNames(name)...)
			if err != nil {
				return err
			}
			return s.Release(ctx)
		}
		var n atomic.Int64
		releaseQ := release(setSize)
		raw := func(name string) error {
			owner := "raw-" + strconv.FormatInt(n.Add(1), 10)
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				return err
			}
			var rel []any
			for _, nm := range setNames(name) {
				var tok int64
				if kind == "mysql" {
					res, err := tx.ExecContext(ctx, acquire, args(nm, owner)...)
					if err == nil {
						tok, err = res.LastInsertId()
					}
					if err != nil {
						_ = tx.Rollback()
						return err
					}
				} else if err := tx.QueryRowContext(ctx, acquire, args(nm, owner)...).Scan(&tok); err != nil {
					_ = tx.Rollback()
					return err
				}
				rel = append(rel, nm, owner, tok)
			}
			if err := tx.Commit(); err != nil {
				return err
			}
			if kind == "mysql" {
				_, err = db.ExecContext(ctx, releaseQ, rel...)
				return err
			}
			rows, err := db.QueryContext(ctx, releaseQ, rel...)
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			return rows.Close()
		}
		for _, clients := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/clients=%d", kind, clients), func(b *testing.B) {
				if kind == "sqlite" && clients > 1 {
					b.Skip("SQLite runs one writer at a time: the single-client figure is the one that counts")
				}
				db.SetMaxIdleConns(clients + 2)
				t := benchtest.Alternate(b, benchtest.Chunk, clients, raw, ours)
				benchtest.ReportRatio(b, t[0], t[1])
			})
		}
	}
}

// setNames are the names of a client's set: setSize names derived from
// the client's own.
func setNames(name string) []string {
	names := make([]string, setSize)
	for i := range names {
		names[i] = name + "/" + strconv.Itoa(i)
	}
	return names
}
