package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/dialecttest"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
)

func TestMain(m *testing.M) {
	os.Exit(dbtest.Finish(m.Run()))
}

// The dialect passes the conformance suite, on a schema of each subtest's
// own.
func TestConformance(t *testing.T) {
	t.Parallel()
	dialecttest.Exercise(t, dialecttest.Harness{
		New: newEnv,
		WithNamespace: func(name string) error {
			db, err := sql.Open("pgx", "postgres://nowhere.invalid/none") // never connects
			if err != nil {
				return err
			}
			defer db.Close()
			d, err := postgres.New(db, postgres.WithSchema(name))
			if err == nil {
				err = d.Close(context.Background())
			}
			return err
		},
	})
}

// newEnv is the suite's dialect on a fresh, migrated schema of the shared
// test server.
func newEnv(t *testing.T) *dialecttest.Env {
	db, schema := dbtest.Postgres(t)
	return envOn(t, db, db, schema, func(t *testing.T) *sql.DB { return dbtest.OpenPostgres(t, dbtest.PostgresURL(t)) })
}

// envOn is the suite's dialect on schema, migrated, on pool; open opens
// the pools of Env.Open; db is a pool on the server itself, for the hooks.
func envOn(t *testing.T, db, pool *sql.DB, schema string, open func(t *testing.T) *sql.DB, opts ...postgres.Option) *dialecttest.Env {
	d := dialectOn(t, pool, schema, opts...)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	table := func(tb dialecttest.Table) string { return `"` + schema + `".` + string(tb) }
	return &dialecttest.Env{
		Dialect: d,
		Open: func(t *testing.T, maxConns int) dialect.Dialect {
			db := open(t)
			db.SetMaxOpenConns(maxConns)
			return dialectOn(t, db, schema, opts...)
		},
		Expire: func(ctx context.Context, tb dialecttest.Table, name string) error {
			res, err := db.ExecContext(ctx, `UPDATE `+table(tb)+` SET expires_at = now() - interval '1 second' WHERE name = $1`, name)
			return oneRow(res, err, name)
		},
		HoldRow: func(ctx context.Context, tb dialecttest.Table, name string) (func() error, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return nil, err
			}
			var one int
			if err := tx.QueryRowContext(ctx, `SELECT 1 FROM `+table(tb)+` WHERE name = $1 FOR UPDATE`, name).Scan(&one); err != nil {
				_ = tx.Rollback()
				return nil, fmt.Errorf("locking %q: %w", name, err)
			}
			return rollback(tx), nil
		},
		Waiting: func(ctx context.Context) (int, error) {
			var n int
			err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND query LIKE '%"`+schema+`".%'`).Scan(&n)
			return n, err
		},
		Kill: func(ctx context.Context, tx *sql.Tx) error {
			var pid int64
			if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return err
			}
			_, err := db.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid)
			return err
		},
	}
}

// dialectOn returns the dialect for schema on db, closed when t ends.
func dialectOn(t *testing.T, db *sql.DB, schema string, opts ...postgres.Option) *postgres.Dialect {
	d, err := postgres.New(db, append([]postgres.Option{postgres.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Errorf("closing the dialect: %v", err)
		}
	})
	return d
}

// oneRow checks that an update changed name's row.
func oneRow(res sql.Result, err error, name string) error {
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("%q: %d rows changed (%v), want 1", name, n, err)
	}
	return nil
}

// rollback returns a function that rolls tx back, once.
func rollback(tx *sql.Tx) func() error {
	done := false
	return func() error {
		if done {
			return nil
		}
		done = true
		return tx.Rollback()
	}
}

// The conformance suite through PgBouncer (scripts/test.sh starts one in
// each pool mode), with pgx's default statement cache and with its simple
// protocol: in transaction pooling the former needs WithPooler.
// Announcements come through a direct listening connection where the pool
// cannot carry them (WithListenDSN).
func TestConformanceThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		mode  dbtest.PoolMode
		param string // added to the URL
		opts  func(t *testing.T) []postgres.Option
	}{
		{"transaction/WithPooler", dbtest.Transaction, "", func(t *testing.T) []postgres.Option {
			return []postgres.Option{postgres.WithPooler(), postgres.WithListenDSN(dbtest.PostgresURL(t))}
		}},
		{"transaction/simple_protocol", dbtest.Transaction, "default_query_exec_mode=simple_protocol", func(t *testing.T) []postgres.Option {
			return []postgres.Option{postgres.WithListenDSN(dbtest.PostgresURL(t))}
		}},
		{"session/cache_statement", dbtest.Session, "", func(*testing.T) []postgres.Option { return nil }},
		{"session/simple_protocol", dbtest.Session, "default_query_exec_mode=simple_protocol", func(*testing.T) []postgres.Option { return nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := withParam(dbtest.PgBouncerURL(t, c.mode), c.param)
			open := func(t *testing.T) *sql.DB { return dbtest.OpenPostgres(t, url) }
			dialecttest.Exercise(t, dialecttest.Harness{
				New: func(t *testing.T) *dialecttest.Env {
					db, schema := dbtest.Postgres(t)
					pool := open(t)
					pool.SetMaxOpenConns(dbtest.MaxOpenConns)
					pool.SetMaxIdleConns(dbtest.MaxOpenConns)
					return envOn(t, db, pool, schema, open, c.opts(t)...)
				},
			})
		})
	}
}

// withParam adds a query parameter ("key=value") to a URL; "" adds none.
func withParam(url, param string) string {
	switch {
	case param == "":
		return url
	case strings.Contains(url, "?"):
		return url + "&" + param
	}
	return url + "?" + param
}
