package latch_test

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/latch"
	"github.com/sqllock/sqllock/tests/migrated"
)

// BenchmarkCountDown compares Latch.CountDown, on a latch whose count
// does not reach 0, with its statement sent by hand: what a program doing
// the same without sqllock would send.
func BenchmarkCountDown(b *testing.B) {
	type bed struct {
		kind string
		open func(b *testing.B) (dialect.Dialect, *sql.DB, string) // the dialect, its pool, the raw statement
	}
	beds := []bed{
		{"postgres", func(b *testing.B) (dialect.Dialect, *sql.DB, string) {
			db, schema := dbtest.Postgres(b)
			d, err := postgres.New(db, postgres.WithSchema(schema))
			if err != nil {
				b.Fatal(err)
			}
			migrated.CloseAtEnd(b, d)
			return d, db, fmt.Sprintf(`UPDATE %q.sqllock_latches SET remaining = remaining - 1 WHERE name = $1 AND remaining > 0 RETURNING remaining + 1`, schema)
		}},
		{"mysql", func(b *testing.B) (dialect.Dialect, *sql.DB, string) {
			db, database := dbtest.MySQL(b)
			d, err := mysql.New(db, mysql.WithDatabase(database))
			if err != nil {
				b.Fatal(err)
			}
			migrated.CloseAtEnd(b, d)
			return d, db, fmt.Sprintf("UPDATE `%s`.sqllock_latches SET remaining = LAST_INSERT_ID(remaining) - 1 WHERE name = ? AND remaining > 0", database)
		}},
		{"sqlite", func(b *testing.B) (dialect.Dialect, *sql.DB, string) {
			dbtest.SQLite(b)
			db, err := sqlite.Open(filepath.Join(b.TempDir(), "latches.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { db.Close() })
			d, err := sqlite.New(db)
			if err != nil {
				b.Fatal(err)
			}
			return d, db, `UPDATE sqllock_latches SET remaining = remaining - 1 WHERE name = ? AND remaining > 0 RETURNING remaining + 1`
		}},
	}
	for _, bd := range beds {
		b.Run(bd.kind, func(b *testing.B) {
			d, db, raw := bd.open(b)
			ctx := b.Context()
			if err := sqllock.Migrate(ctx, d); err != nil {
				b.Fatal(err)
			}
			l, err := latch.New(d, latch.Options{})
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Create(ctx, "bench", latch.MaxCount); err != nil {
				b.Fatal(err)
			}
			b.Run("Latch", func(b *testing.B) {
				for b.Loop() {
					if _, err := l.CountDown(ctx, "bench"); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("raw", func(b *testing.B) {
				for b.Loop() {
					var err error
					if bd.kind == "mysql" {
						_, err = db.ExecContext(ctx, raw, "bench")
					} else {
						var before int64
						err = db.QueryRowContext(ctx, raw, "bench").Scan(&before)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
