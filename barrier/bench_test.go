package barrier_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/barrier"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/tests/benchtest"
	"github.com/sqllock/sqllock/tests/migrated"
)

// BenchmarkEnterLeave compares an Enter and Leave of a barrier of one
// member (a round that fills and empties at once) with the same
// statements sent by hand on the pool: the transaction that ends the last
// round and joins the next (head, lock, members, expire, resize, join,
// fill), then the leave, the read of the members, the announcement where
// the dialect announces, and the quit.
func BenchmarkEnterLeave(b *testing.B) {
	beds := []struct {
		kind string
		open func(b *testing.B) (dialect.Dialect, *sql.DB)
	}{
		{"postgres", func(b *testing.B) (dialect.Dialect, *sql.DB) {
			db, schema := dbtest.Postgres(b)
			d, err := postgres.New(db, postgres.WithSchema(schema))
			if err != nil {
				b.Fatal(err)
			}
			migrated.CloseAtEnd(b, d)
			return d, db
		}},
		{"mysql", func(b *testing.B) (dialect.Dialect, *sql.DB) {
			db, database := dbtest.MySQL(b)
			d, err := mysql.New(db, mysql.WithDatabase(database))
			if err != nil {
				b.Fatal(err)
			}
			migrated.CloseAtEnd(b, d)
			return d, db
		}},
		{"sqlite", func(b *testing.B) (dialect.Dialect, *sql.DB) {
			dbtest.SQLite(b)
			db, err := sqlite.Open(filepath.Join(b.TempDir(), "barriers.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { db.Close() })
			d, err := sqlite.New(db)
			if err != nil {
				b.Fatal(err)
			}
			return d, db
		}},
	}
	for _, bd := range beds {
		b.Run(bd.kind, func(b *testing.B) {
			d, db := bd.open(b)
			ctx := b.Context()
			if err := sqllock.Migrate(ctx, d); err != nil {
				b.Fatal(err)
			}
			bar, err := barrier.New(d, "bench", 1, barrier.Options{})
			if err != nil {
				b.Fatal(err)
			}
			raw := newRawBarrier(d, "bench-raw", "raw-owner")
			var ours, theirs time.Duration
			for range b.N {
				start := time.Now()
				m, err := bar.Enter(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := m.Leave(ctx); err != nil {
					b.Fatal(err)
				}
				ours += time.Since(start)
				start = time.Now()
				if err := raw.enterLeave(ctx, db); err != nil {
					b.Fatal(err)
				}
				theirs += time.Since(start)
			}
			benchtest.ReportRatio(b, theirs, ours)
		})
	}
}

// rawBarrier is a barrier of one, its statements the dialect's
// declarations with the parameters bound by position.
type rawBarrier struct {
	s     dialect.BarrierSQL
	style dialect.Style
	vals  map[string]any
}

func newRawBarrier(d dialect.Dialect, name, owner string) *rawBarrier {
	cat := d.Catalogue()
	s := *cat.Barriers
	return &rawBarrier{s: s, style: cat.Style, vals: map[string]any{
		"name": name, "owner": owner, "limit": 1, "ttl": (30 * time.Second).Microseconds(), "channel": s.Channel}}
}

// bind writes s's named parameters as the style's placeholders, and
// returns its arguments.
func (r *rawBarrier) bind(s dialect.SQL) (string, []any) {
	var (
		out  strings.Builder
		args []any
	)
	t := s.Text
	for i := 0; i < len(t); i++ {
		if t[i] != ':' || i+1 >= len(t) || t[i+1] < 'a' || t[i+1] > 'z' || (i > 0 && t[i-1] == ':') {
			out.WriteByte(t[i])
			continue
		}
		j := i + 1
		for j < len(t) && (t[j] >= 'a' && t[j] <= 'z' || t[j] == '_') {
			j++
		}
		args = append(args, r.vals[t[i+1:j]])
		if r.style == dialect.Dollar {
			out.WriteString("$" + strconv.Itoa(len(args)))
		} else {
			out.WriteByte('?')
		}
		i = j - 1
	}
	return out.String(), args
}

// enterLeave enters a round of one and leaves it, as Enter and Leave do
// once the last round is over.
func (r *rawBarrier) enterLeave(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, r.s.TxOptions)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	exec := func(q interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
	}, s dialect.SQL) error {
		text, args := r.bind(s)
		_, err := q.ExecContext(ctx, text, args...)
		return err
	}
	row := func(q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}, s dialect.SQL, dest ...any) error {
		text, args := r.bind(s)
		return q.QueryRowContext(ctx, text, args...).Scan(dest...)
	}
	var (
		size             int
		filled           bool
		in, dead, lv, mn int
	)
	if err := exec(tx, r.s.Head); err != nil {
		return err
	}
	if err := row(tx, r.s.LockHead, &size, &filled); err != nil {
		return err
	}
	if err := row(tx, r.s.Members, &in, &dead, &lv, &mn, &filled); err != nil {
		return err
	}
	for _, s := range []dialect.SQL{r.s.Expire, r.s.Resize, r.s.Join, r.s.Fill} {
		if err := exec(tx, s); err != nil {
			return err
		}
	}
	if r.s.Announce.Text != "" {
		var n int64
		if err := row(tx, r.s.Announce, &n); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if err := exec(db, r.s.Leave); err != nil {
		return err
	}
	if r.s.Announce.Text != "" {
		var n int64
		if err := row(db, r.s.Members, &in, &dead, &lv, &mn, &filled); err != nil {
			return err
		}
		if err := row(db, r.s.Announce, &n); err != nil {
			return err
		}
	}
	if err := row(db, r.s.Members, &in, &dead, &lv, &mn, &filled); err != nil {
		return err
	}
	return exec(db, r.s.Quit)
}
