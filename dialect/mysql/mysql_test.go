package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"os"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/dialecttest"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/testutil"
)

func TestMain(m *testing.M) {
	// Killed sessions are part of the suite: the driver's log of each is
	// noise.
	_ = gomysql.SetLogger(log.New(io.Discard, "", 0))
	testutil.ChildMain(wakeChildEnv, wakeChild.run)
	os.Exit(dbtest.Finish(m.Run()))
}

// The dialect passes the conformance suite, on a database of each
// subtest's own.
func TestConformance(t *testing.T) {
	t.Parallel()
	dialecttest.Exercise(t, dialecttest.Harness{
		New: newEnv,
		WithNamespace: func(name string) error {
			db, err := sql.Open("mysql", "nobody@tcp(nowhere.invalid:3306)/none") // never connects
			if err != nil {
				return err
			}
			defer db.Close()
			_, err = mysql.New(db, mysql.WithDatabase(name))
			return err
		},
	})
}

// newEnv is the suite's dialect on a fresh, migrated database of the shared
// test server.
func newEnv(t *testing.T) *dialecttest.Env {
	db, database := dbtest.MySQL(t)
	return envOn(t, db, database, dbtest.MySQLDSN(t), func(db *sql.DB, database string) (dialect.Dialect, error) {
		return mysql.New(db, mysql.WithDatabase(database))
	})
}

// envOn is the suite's dialect, made by newDialect, on database, a fresh
// database of the server of db and dsn, migrated.
func envOn(t *testing.T, db *sql.DB, database, dsn string, newDialect func(db *sql.DB, database string) (dialect.Dialect, error)) *dialecttest.Env {
	d, err := newDialect(db, database)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	table := func(tb dialecttest.Table) string { return "`" + database + "`." + string(tb) }
	return &dialecttest.Env{
		Dialect: d,
		Open: func(t *testing.T, maxConns int) dialect.Dialect {
			db := dbtest.OpenMySQL(t, dsn)
			db.SetMaxOpenConns(maxConns)
			d, err := newDialect(db, database)
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Expire: func(ctx context.Context, tb dialecttest.Table, name string) error {
			res, err := db.ExecContext(ctx, "UPDATE "+table(tb)+" SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE name = ?", name)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				return fmt.Errorf("%q: %d rows changed (%v), want 1", name, n, err)
			}
			return nil
		},
		HoldRow: func(ctx context.Context, tb dialecttest.Table, name string) (func() error, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return nil, err
			}
			var one int
			if err := tx.QueryRowContext(ctx, "SELECT 1 FROM "+table(tb)+" WHERE name = ? FOR UPDATE", name).Scan(&one); err != nil {
				_ = tx.Rollback()
				return nil, fmt.Errorf("locking %q: %w", name, err)
			}
			done := false
			return func() error {
				if done {
					return nil
				}
				done = true
				return tx.Rollback()
			}, nil
		},
		// MariaDB lists a queued INSERT ... SELECT in the process list
		// but not in innodb_trx, so statements on the database's tables
		// are counted there; one lasts only while it waits.
		Waiting: func(ctx context.Context) (int, error) {
			var n int
			err := db.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND info LIKE ?",
				"%`"+database+"`.%").Scan(&n)
			return n, err
		},
		Kill: func(ctx context.Context, tx *sql.Tx) error {
			var id int64
			if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
				return err
			}
			_, err := db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
			return err
		},
	}
}
