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
	"github.com/sqllock/sqllock/internal/benchtest"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// semRaw are the statements of a semaphore acquire, written out by hand,
// and of its release: what a program doing the same without sqllock would
// send.
type semRaw struct {
	iso                                         sql.IsolationLevel
	head                                        []string
	expire, mine, count, token, insert, release string
	tokenByID                                   bool // token's number is its insert id
}

// acquire runs the acquire transaction for a name without holders, as the
// benchmark's names are, and returns the token.
func (r *semRaw) acquire(ctx context.Context, db *sql.DB, name, owner string, limit int) (int64, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: r.iso})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var lim int64
	for i, q := range r.head {
		if i < len(r.head)-1 {
			if _, err := tx.ExecContext(ctx, q, name, limit); err != nil {
				return 0, err
			}
			continue
		}
		args := []any{name, limit}
		if len(r.head) > 1 {
			args = args[:1]
		}
		if err := tx.QueryRowContext(ctx, q, args...).Scan(&lim); err != nil {
			return 0, err
		}
	}
	if _, err := tx.ExecContext(ctx, r.expire, name); err != nil {
		return 0, err
	}
	var holds, tok, n int64
	if err := tx.QueryRowContext(ctx, r.mine, name, owner).Scan(&holds, &tok); err != sql.ErrNoRows {
		return 0, fmt.Errorf("raw: the owner holds a permit already: %v", err)
	}
	if err := tx.QueryRowContext(ctx, r.count, name).Scan(&n); err != nil {
		return 0, err
	}
	if lim != int64(limit) || n >= int64(limit) {
		return 0, fmt.Errorf("raw: limit %d, %d holders", lim, n)
	}
	if r.tokenByID {
		res, err := tx.ExecContext(ctx, r.token, name)
		if err != nil {
			return 0, err
		}
		if tok, err = res.LastInsertId(); err != nil {
			return 0, err
		}
	} else if err := tx.QueryRowContext(ctx, r.token, name).Scan(&tok); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, r.insert, name, owner, tok, int64(30e6)); err != nil {
		return 0, err
	}
	return tok, tx.Commit()
}

// BenchmarkSemaphoreAcquireRelease measures an uncontended semaphore
// TryAcquire+Release (limit 4) on distinct names with 1 and 8 concurrent
// clients, next to the same statements issued raw on the same pool,
// interleaved in one run. It reports sqllock-ns/op, raw-ns/op and ratio =
// raw time / sqllock time (the target is >= 0.9). Run:
//
//	go test -run '^$' -bench SemaphoreAcquireRelease -benchtime 3s .
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
			raw = semRaw{iso: sql.LevelReadCommitted,
				head: []string{`INSERT INTO ` + s + ` AS s (name, lim) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET lim = s.lim RETURNING lim`},
				expire: `DELETE FROM ` + h + ` WHERE name = $1 AND (expires_at <= now()
  OR NOT token >> 44 IN (0, (SELECT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint)))`,
				mine:  `SELECT holds, token FROM ` + h + ` WHERE name = $1 AND owner = $2`,
				count: `SELECT count(*) FROM ` + h + ` WHERE name = $1`,
				token: `SELECT (('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint << 44) + nextval('"` + schema + `".sqllock_semaphore_token_seq') WHERE $1::text IS NOT NULL`,
				insert: `INSERT INTO ` + h + ` (name, owner, token, holds, acquired_at, expires_at)
VALUES ($1, $2, $3, 1, now(), now() + $4::bigint * interval '1 microsecond')`,
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
			raw = semRaw{iso: sql.LevelReadCommitted, tokenByID: true,
				head: []string{`INSERT INTO ` + s + ` (name, lim, token) VALUES (?, ?, 0) ON DUPLICATE KEY UPDATE lim = lim`,
					`SELECT lim FROM ` + s + ` WHERE name = ? FOR UPDATE`},
				expire: `DELETE FROM ` + h + ` WHERE name = ? AND expires_at <= ` + now,
				mine:   `SELECT holds, token FROM ` + h + ` WHERE name = ? AND owner = ? FOR UPDATE`,
				count:  `SELECT COUNT(*) FROM ` + h + ` WHERE name = ?`,
				token:  `UPDATE ` + s + ` SET token = LAST_INSERT_ID(GREATEST(token + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + now + `))) WHERE name = ?`,
				insert: `INSERT INTO ` + h + ` (name, owner, token, holds, acquired_at, expires_at)
VALUES (?, ?, ?, 1, ` + now + `, ` + now + ` + INTERVAL ? MICROSECOND)`,
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
				head:   []string{`INSERT INTO sqllock_semaphores (name, lim, token) VALUES (?, ?, 0) ON CONFLICT (name) DO UPDATE SET lim = lim RETURNING lim`},
				expire: `DELETE FROM sqllock_semaphore_holders WHERE name = ? AND expires_at <= ` + now,
				mine:   `SELECT holds, token FROM sqllock_semaphore_holders WHERE name = ? AND owner = ?`,
				count:  `SELECT count(*) FROM sqllock_semaphore_holders WHERE name = ?`,
				token:  `UPDATE sqllock_semaphores SET token = token + 1 WHERE name = ? RETURNING token`,
				insert: `INSERT INTO sqllock_semaphore_holders (name, owner, token, holds, acquired_at, expires_at)
VALUES (?, ?, ?, 1, ` + now + `, ` + now + ` + ?)`,
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
				t := benchtest.Alternate(b, benchtest.Chunk, clients, rawOp, ours)
				benchtest.ReportRatio(b, t[0], t[1])
			})
		}
	}
}
