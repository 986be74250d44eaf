// Package benchtest is the harness of sqllock's side-by-side benchmarks:
// the library against the bare statements it issues, each side run in turn
// on the same clients so that drift of a shared machine hits every side
// alike. The core module and sqllockotel (a module of its own) share it.
package benchtest

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// Kinds are the databases the side-by-side benchmarks run on.
var Kinds = []string{"postgres", "mysql", "sqlite"}

// Chunk is how many operations each side runs before the other takes a turn.
const Chunk = 200

// Run is one configuration of the side-by-side benchmarks.
type Run struct {
	Name    string
	Clients int
	Ctx     context.Context
}

// Runs are 1 and 8 clients, with a context that never ends (as
// context.Background) and with one that can be cancelled (as a request's,
// which drivers watch).
func Runs(b *testing.B) []Run {
	cancellable, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	var runs []Run
	for _, clients := range []int{1, 8} {
		runs = append(runs,
			Run{fmt.Sprintf("clients=%d", clients), clients, context.Background()},
			Run{fmt.Sprintf("clients=%d/ctx=cancellable", clients), clients, cancellable})
	}
	return runs
}

// RunClients runs op n times in total across clients goroutines, each on
// its own lock name, and returns the elapsed time.
func RunClients(b *testing.B, n, clients int, op func(name string) error) time.Duration {
	var (
		wg   sync.WaitGroup
		errs = make(chan error, clients)
		next atomic.Int64
	)
	start := time.Now()
	for c := range clients {
		name := "bench-" + strconv.Itoa(c)
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := op(name); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return took
}

// Alternate runs each op b.N times across clients goroutines (RunClients),
// in chunks of chunk operations taken in turn, a different op going first
// in each round. It returns each op's total time, in the order given.
func Alternate(b *testing.B, chunk, clients int, ops ...func(name string) error) []time.Duration {
	took := make([]time.Duration, len(ops))
	for i, left := 0, b.N; left > 0; i, left = i+1, left-chunk {
		c := min(left, chunk)
		for j := range ops {
			k := (i + j) % len(ops)
			took[k] += RunClients(b, c, clients, ops[k])
		}
	}
	return took
}

// ReportRatio reports sqllock's and the raw statements' time per op and
// their ratio raw/sqllock (1: sqllock costs what its statements cost).
func ReportRatio(b *testing.B, raw, ours time.Duration) {
	b.ReportMetric(float64(ours.Nanoseconds())/float64(b.N), "sqllock-ns/op")
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(raw.Seconds()/ours.Seconds(), "ratio")
}

// TryAcquireRelease is an uncontended TryAcquire and Release of a lock
// table on ctx: what BenchmarkTryAcquireRelease times.
type TryAcquireRelease func(ctx context.Context, name string) error

// OpenTable opens a database of kind (one of Kinds, or "tidb") of b's own, migrates
// its lock table and returns its pool, its dialect, and the same
// acquire and release as a [sqllock.Table] issues them, as bare statements.
func OpenTable(b *testing.B, kind string) (*sql.DB, dialect.Dialect, TryAcquireRelease) {
	b.Helper()
	var (
		db       *sql.DB
		d        dialect.Dialect
		err      error
		acquire  func(ctx context.Context, name, owner string) (int64, error)
		releaseQ string
	)
	switch kind {
	case "postgres":
		var schema string
		db, schema = dbtest.Postgres(b)
		if d, err = postgres.New(db, postgres.WithSchema(schema)); err != nil {
			b.Fatal(err)
		}
		q := PostgresAcquire(schema)
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
		if d, err = mysql.New(db, mysql.WithDatabase(database)); err != nil {
			b.Fatal(err)
		}
		t := fmt.Sprintf("`%s`.sqllock_locks", database)
		q := fmt.Sprintf(`INSERT INTO %[1]s (name, owner, token, holds, acquired_at, expires_at)
SELECT ?, ?, LAST_INSERT_ID(GREATEST(f.token + 1, %[3]s)), 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
FROM `+"`%[2]s`"+`.sqllock_token_floor f WHERE f.id = 1 LOCK IN SHARE MODE
ON DUPLICATE KEY UPDATE
  token = IF(%[1]s.expires_at <= UTC_TIMESTAMP(6), LAST_INSERT_ID(GREATEST(%[1]s.token + 1, %[3]s)),
    IF(%[1]s.owner = ?, LAST_INSERT_ID(%[1]s.token), %[1]s.token + LAST_INSERT_ID(0))),
  acquired_at = IF(%[1]s.expires_at <= UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), %[1]s.acquired_at),
  holds = IF(%[1]s.expires_at <= UTC_TIMESTAMP(6), 1, IF(%[1]s.owner = ?, %[1]s.holds + 1, %[1]s.holds)),
  owner = IF(%[1]s.expires_at <= UTC_TIMESTAMP(6), ?, %[1]s.owner),
  expires_at = IF(%[1]s.owner = ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, %[1]s.expires_at)`, t, database,
			"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))")
		acquire = func(ctx context.Context, name, owner string) (int64, error) {
			res, err := db.ExecContext(ctx, q, name, owner, int64(30e6), owner, owner, owner, owner, int64(30e6))
			if err != nil {
				return 0, err
			}
			return res.LastInsertId()
		}
		releaseQ = fmt.Sprintf("UPDATE %s SET holds = holds - 1, expires_at = IF(holds = 0, '1000-01-01 00:00:00', expires_at) WHERE name = ? AND owner = ? AND token = ? AND holds > 0", t)
	case "sqlite":
		if db, err = sqlite.Open(filepath.Join(b.TempDir(), "locks.db")); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		if d, err = sqlite.New(db); err != nil {
			b.Fatal(err)
		}
		q := SQLiteAcquire
		acquire = func(ctx context.Context, name, owner string) (int64, error) {
			var tok int64
			err := db.QueryRowContext(ctx, q, name, owner, int64(30e6)).Scan(&tok)
			return tok, err
		}
		releaseQ = `UPDATE sqllock_locks SET holds = holds - 1, expires_at = CASE WHEN holds = 1 THEN 0 ELSE expires_at END
WHERE name = ? AND owner = ? AND token = ? AND holds > 0`
	case "tidb":
		var database string
		db, database = dbtest.TiDB(b)
		if d, err = mysql.NewTiDB(db, mysql.WithDatabase(database)); err != nil {
			b.Fatal(err)
		}
		// TiDB's dialect: an upsert (its conditions read only the old
		// row, as TiDB evaluates them), then the read of the token; the
		// clock is the dialect's, which no session setting moves.
		const now = "(UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND)"
		t := fmt.Sprintf("`%s`.sqllock_locks", database)
		q := fmt.Sprintf(`INSERT INTO %[1]s (name, owner, token, holds, acquired_at, expires_at)
SELECT ?, ?, f.token + 1, 1, n.at, n.at + INTERVAL ? MICROSECOND
FROM `+"`%[2]s`"+`.sqllock_token_floor f JOIN (SELECT `+now+` AS at) AS n WHERE f.id = 1 FOR UPDATE
ON DUPLICATE KEY UPDATE
  token = IF(%[1]s.expires_at <= VALUES(acquired_at), %[1]s.token + 1, %[1]s.token),
  acquired_at = IF(%[1]s.expires_at <= VALUES(acquired_at), VALUES(acquired_at), %[1]s.acquired_at),
  holds = IF(%[1]s.expires_at <= VALUES(acquired_at), 1, IF(%[1]s.owner = VALUES(owner), %[1]s.holds + 1, %[1]s.holds)),
  owner = IF(%[1]s.expires_at <= VALUES(acquired_at), VALUES(owner), %[1]s.owner),
  expires_at = IF(%[1]s.expires_at <= VALUES(acquired_at) OR %[1]s.owner = VALUES(owner), VALUES(expires_at), %[1]s.expires_at)`,
			t, database)
		read := fmt.Sprintf(`SELECT token FROM %s WHERE name = ? AND owner = ? AND holds > 0 AND expires_at > %s`, t, now)
		acquire = func(ctx context.Context, name, owner string) (int64, error) {
			if _, err := db.ExecContext(ctx, q, name, owner, int64(30e6)); err != nil {
				return 0, err
			}
			var tok int64
			err := db.QueryRowContext(ctx, read, name, owner).Scan(&tok)
			return tok, err
		}
		releaseQ = fmt.Sprintf("UPDATE %s SET expires_at = IF(holds > 1, expires_at, '1000-01-01 00:00:00'), holds = holds - 1 WHERE name = ? AND owner = ? AND token = ? AND holds > 0", t)
	default:
		b.Fatalf("benchtest: unknown kind %q", kind)
	}
	if err := sqllock.Migrate(context.Background(), d); err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	raw := func(ctx context.Context, name string) error {
		owner := "raw-" + strconv.FormatInt(n.Add(1), 10)
		tok, err := acquire(ctx, name, owner)
		if err != nil || tok == 0 {
			return fmt.Errorf("raw acquire: %d, %v", tok, err)
		}
		_, err = db.ExecContext(ctx, releaseQ, name, owner, tok)
		return err
	}
	return db, d, raw
}

// PostgresAcquire is the acquire statement of the PostgreSQL lock table in
// schema, as a [sqllock.Table] issues it: $1 the name, $2 the owner, $3
// the TTL in microseconds; it returns the token. The fence (a shared
// advisory lock for the statement) is part of a correct acquire: without
// it, a reaper deleting the row while the insert waits could let a token
// go backwards. So is the timeline in the token's high bits: without it, a
// token could go backwards across a failover.
func PostgresAcquire(schema string) string {
	return fmt.Sprintf(`INSERT INTO "%[1]s".sqllock_locks AS l (name, owner, token, holds, acquired_at, expires_at)
SELECT $1, $2, fence.epoch + nextval('"%[1]s".sqllock_token_seq'), 1, now(), now() + $3::bigint * interval '1 microsecond'
FROM (SELECT pg_advisory_xact_lock_shared(1936813163, hashtext($1)),
  ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint << 44 AS epoch) AS fence
ON CONFLICT (name) DO UPDATE SET
  token = CASE WHEN l.expires_at <= now() THEN (EXCLUDED.token >> 44 << 44) + nextval('"%[1]s".sqllock_token_seq') ELSE l.token END,
  holds = CASE WHEN l.expires_at <= now() THEN 1 ELSE l.holds + 1 END,
  acquired_at = CASE WHEN l.expires_at <= now() THEN now() ELSE l.acquired_at END,
  owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
WHERE l.expires_at <= now() OR (l.owner = EXCLUDED.owner AND l.token >> 44 IN (0, EXCLUDED.token >> 44))
RETURNING token`, schema)
}

// SQLiteAcquire is the acquire statement of the SQLite lock table, as a
// [sqllock.Table] issues it: the name, the owner and the TTL in
// microseconds; it returns the token.
var SQLiteAcquire = fmt.Sprintf(`INSERT INTO sqllock_locks AS l (name, owner, token, holds, acquired_at, expires_at)
VALUES (?, ?, (SELECT token + 1 FROM sqllock_token_floor WHERE id = 1), 1, %[1]s, %[1]s + ?)
ON CONFLICT (name) DO UPDATE SET
  token = CASE WHEN l.expires_at <= %[1]s THEN l.token + 1 ELSE l.token END,
  holds = CASE WHEN l.expires_at <= %[1]s THEN 1 ELSE l.holds + 1 END,
  acquired_at = CASE WHEN l.expires_at <= %[1]s THEN %[1]s ELSE l.acquired_at END,
  owner = excluded.owner, expires_at = excluded.expires_at
WHERE l.expires_at <= %[1]s OR l.owner = excluded.owner
RETURNING token`, "(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)")

// Bind binds each op to ctx, as Alternate takes them.
func Bind(ctx context.Context, ops ...TryAcquireRelease) []func(name string) error {
	bound := make([]func(name string) error, len(ops))
	for i, op := range ops {
		bound[i] = func(name string) error { return op(ctx, name) }
	}
	return bound
}

// Table returns an uncontended TryAcquire and Release of locker.
func Table(locker *sqllock.Table) TryAcquireRelease {
	return func(ctx context.Context, name string) error {
		k, err := locker.TryAcquire(ctx, name)
		if err != nil {
			return err
		}
		return k.Release(ctx)
	}
}
