package sqllock_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
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

// semRaw are the statements of a semaphore acquire, written out by hand,
// and of its release: what a program doing the same without sqllock would
// send. An acquire is grant alone, or a transaction: draw (the token),
// expire, take.
type semRaw struct {
	grant                       string
	iso                         sql.IsolationLevel
	draw, expire, take, release string
	drawByID, takeByID          bool // the statement's number is its insert id
	// takeArgs are take's arguments, in the order of its placeholders.
	takeArgs func(name, owner string, tok, ttl int64, limit int) []any
}

// acquire runs the acquire for a name without holders, as the
// benchmark's names are, and returns the token.
func (r *semRaw) acquire(ctx context.Context, db *sql.DB, name, owner string, limit int) (int64, error) {
	const ttl = int64(30e6)
	var tok, lim int64
	if r.grant != "" {
		if err := db.QueryRowContext(ctx, r.grant, name, owner, limit, ttl).Scan(&tok, &lim); err != nil {
			return 0, err
		}
		if tok <= 0 {
			return 0, fmt.Errorf("raw: refused (%d, limit %d)", tok, lim)
		}
		return tok, nil
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: r.iso})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	num := func(q string, byID bool, args ...any) (int64, error) {
		if !byID {
			var n int64
			return n, tx.QueryRowContext(ctx, q, args...).Scan(&n)
		}
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	}
	if tok, err = num(r.draw, r.drawByID, name, limit); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, r.expire, name); err != nil {
		return 0, err
	}
	got, err := num(r.take, r.takeByID, r.takeArgs(name, owner, tok, ttl, limit)...)
	if err != nil {
		return 0, err
	}
	if got != tok {
		return 0, fmt.Errorf("raw: refused")
	}
	return tok, tx.Commit()
}

// BenchmarkSemaphoreAcquireRelease measures an uncontended semaphore
// TryAcquire+Release (limit 4) on distinct names with 1 and 8 concurrent
// clients, next to the same statements issued raw on the same pool and
// the lock table's TryAcquire+Release, taking turns of one operation per
// client. It reports sqllock-ns/op, raw-ns/op and ratio = raw time / sqllock
// time (the target is >= 0.9), and table-ns/op and table-ratio = the
// table's time / sqllock's. Run:
//
//	go test -run '^$' -bench SemaphoreAcquireRelease -benchtime 300x -count 5 .
func BenchmarkSemaphoreAcquireRelease(b *testing.B) {
	const limit = 4
	for _, kind := range []string{"postgres", "mysql", "sqlite"} {
		var (
			db  *sql.DB
			d   dialect.Dialect
			raw semRaw
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
			s, h := `"`+schema+`".sqllock_semaphores`, `"`+schema+`".sqllock_semaphore_holders`
			const timeline = `('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint`
			const live = `expires_at > now() AND token >> 44 IN (0, (SELECT ` + timeline + `))`
			raw = semRaw{
				grant: `WITH h AS (
  SELECT owner, holds, ` + live + ` AS live FROM ` + h + ` WHERE name = $1
), s AS (
  SELECT xmin AS version, lim FROM ` + s + ` WHERE name = $1
), v AS (
  SELECT (SELECT count(*) FROM h WHERE h.live) AS n, (SELECT s.lim FROM s) AS lim,
    EXISTS (SELECT 1 FROM h WHERE h.owner = $2 AND h.live) AS mine
), head AS (
  INSERT INTO ` + s + ` AS x (name, lim)
  SELECT $1, $3::integer FROM v WHERE NOT v.mine AND v.n < $3::integer AND (v.n = 0 OR v.lim = $3::integer)
  ON CONFLICT (name) DO UPDATE SET lim = EXCLUDED.lim WHERE x.xmin = (SELECT s.version FROM s)
  RETURNING name
), gone AS (
  DELETE FROM ` + h + ` WHERE name = (SELECT name FROM head) AND owner <> $2 AND NOT (` + live + `)
), ins AS (
  INSERT INTO ` + h + ` AS y (name, owner, token, holds, acquired_at, expires_at)
  SELECT head.name, $2, (` + timeline + ` << 44) + nextval('"` + schema + `".sqllock_semaphore_token_seq'), 1, now(),
    now() + $4::bigint * interval '1 microsecond' FROM head
  ON CONFLICT (name, owner) DO UPDATE SET token = EXCLUDED.token, holds = 1,
    acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
  RETURNING token
)
SELECT coalesce((SELECT token FROM ins), 0), coalesce(v.lim, $3) FROM v`,
				// The release announces a freed permit of a name someone
				// waited for: part of a correct release.
				release: `WITH r AS (
  UPDATE ` + h + ` SET holds = holds - 1, expires_at = CASE WHEN holds > 1 THEN expires_at ELSE '-infinity' END
  WHERE name = $1 AND owner = $2 AND token = $3 AND holds > 0
  RETURNING name, holds = 0 AND expires_at <= now() AS freed
)
SELECT count(*) FROM r LEFT JOIN LATERAL (
  SELECT pg_notify('sqllock:` + schema + `', r.name) FROM ` + s + ` s WHERE s.name = r.name AND s.waiters AND r.freed
) n ON true`}
		case "mysql":
			var database string
			db, database = dbtest.MySQL(b)
			md, err := mysql.New(db, mysql.WithDatabase(database))
			if err != nil {
				b.Fatal(err)
			}
			closeAtEnd(b, md)
			d = md
			s, h := "`"+database+"`.sqllock_semaphores", "`"+database+"`.sqllock_semaphore_holders"
			// The dialect's clock: the real one, which no session setting moves.
			const now = "(UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND)"
			ended := "`" + database + "`.sqllock_semaphore_holders.expires_at <= VALUES(acquired_at)"
			raw = semRaw{iso: sql.LevelReadCommitted, drawByID: true, takeByID: true,
				draw: `INSERT INTO ` + s + ` (name, lim, token) VALUES (?, ?, LAST_INSERT_ID(GREATEST(1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + now + `))))
ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(GREATEST(token + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + now + `)))`,
				expire: `DELETE FROM ` + h + ` WHERE name = ? AND expires_at <= ` + now,
				take: `INSERT INTO ` + h + ` (name, owner, token, holds, acquired_at, expires_at, waiters)
SELECT ?, ?, LAST_INSERT_ID(?), 1, t.at, t.at + INTERVAL ? MICROSECOND, s.waiters
FROM (SELECT ` + now + ` AS at) AS t JOIN ` + s + ` s ON s.name = ?
  JOIN (SELECT COUNT(*) AS n FROM ` + h + ` h WHERE h.name = ? AND h.expires_at > ` + now + `) AS c
WHERE s.lim = ? AND c.n < ?
ON DUPLICATE KEY UPDATE token = IF(` + ended + `, LAST_INSERT_ID(VALUES(token)), 0), holds = 1,
  acquired_at = VALUES(acquired_at), waiters = VALUES(waiters), expires_at = VALUES(expires_at)`,
				takeArgs: func(name, owner string, tok, ttl int64, limit int) []any {
					return []any{name, owner, tok, ttl, name, name, limit, limit}
				},
				release: `UPDATE ` + h + ` SET holds = holds - 1, expires_at = IF(holds > 0, expires_at, '1000-01-01 00:00:00')
WHERE name = ? AND owner = ? AND token = ? AND holds > 0`}
		case "sqlite":
			db, _ = openSQLite(b)
			sd, err := sqlite.New(db)
			if err != nil {
				b.Fatal(err)
			}
			d = sd
			const now = "(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)"
			raw = semRaw{
				draw:   `INSERT INTO sqllock_semaphores (name, lim, token) VALUES (?, ?, 1) ON CONFLICT (name) DO UPDATE SET token = token + 1 RETURNING token`,
				expire: `DELETE FROM sqllock_semaphore_holders WHERE name = ? AND expires_at <= ` + now,
				take: `INSERT INTO sqllock_semaphore_holders AS x (name, owner, token, holds, acquired_at, expires_at)
SELECT ?, ?, ?, 1, t.at, t.at + ? FROM (SELECT ` + now + ` AS at) AS t JOIN sqllock_semaphores s ON s.name = ?
WHERE s.lim = ? AND (SELECT count(*) FROM sqllock_semaphore_holders h WHERE h.name = ? AND h.expires_at > t.at) < ?
ON CONFLICT (name, owner) DO UPDATE SET token = excluded.token, holds = 1, acquired_at = excluded.acquired_at,
  expires_at = excluded.expires_at WHERE x.expires_at <= excluded.acquired_at
RETURNING token`,
				takeArgs: func(name, owner string, tok, ttl int64, limit int) []any {
					return []any{name, owner, tok, ttl, name, limit, name, limit}
				},
				release: `UPDATE sqllock_semaphore_holders SET holds = holds - 1, expires_at = CASE WHEN holds > 1 THEN expires_at ELSE 0 END
WHERE name = ? AND owner = ? AND token = ? AND holds > 0`}
		}
		if err := sqllock.Migrate(context.Background(), d); err != nil {
			b.Fatal(err)
		}
		sem, err := sqllock.NewSemaphore(d, limit, sqllock.SemaphoreOptions{})
		if err != nil {
			b.Fatal(err)
		}
		table, err := sqllock.NewTable(d, sqllock.TableOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for _, run := range benchtest.Runs(b) {
			ctx, clients := run.Ctx, run.Clients
			ours := func(name string) error {
				k, err := sem.TryAcquire(ctx, name)
				if err != nil {
					return err
				}
				return k.Release(ctx)
			}
			var n atomic.Int64
			rawOp := func(name string) error {
				owner := "raw-" + strconv.FormatInt(n.Add(1), 10)
				tok, err := raw.acquire(ctx, db, name, owner, limit)
				if err != nil {
					return err
				}
				_, err = db.ExecContext(ctx, raw.release, name, owner, tok)
				return err
			}
			b.Run(kind+"/"+run.Name, func(b *testing.B) {
				db.SetMaxIdleConns(clients + 2)
				tableOp := func(name string) error { return benchtest.Table(table)(ctx, name+"-t") }
				// Turns of one operation per client: on a loaded machine,
				// longer turns measure the load's swings more than the sides.
				t := benchtest.Alternate(b, clients, clients, rawOp, ours, tableOp)
				benchtest.ReportRatio(b, t[0], t[1])
				b.ReportMetric(float64(t[2].Nanoseconds())/float64(b.N), "table-ns/op")
				b.ReportMetric(t[2].Seconds()/t[1].Seconds(), "table-ratio")
			})
		}
	}
}
