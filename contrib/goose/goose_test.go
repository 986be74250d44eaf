package sqllockgoose_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/tests/migrated"

	sqllockgoose "github.com/sqllock/sqllock/contrib/goose"
)

// migrations fail if run twice (CREATE TABLE without IF NOT EXISTS), and
// count their runs in the table applied.
var migrations = fstest.MapFS{
	"1_applied.sql": {Data: []byte("-- +goose Up\nCREATE TABLE applied (version integer NOT NULL);\nINSERT INTO applied VALUES (1);\n")},
	"2_items.sql":   {Data: []byte("-- +goose Up\nCREATE TABLE items (id integer NOT NULL PRIMARY KEY);\nINSERT INTO applied VALUES (2);\n")},
	"3_stock.sql":   {Data: []byte("-- +goose Up\nALTER TABLE items ADD COLUMN stock integer NOT NULL DEFAULT 0;\nINSERT INTO applied VALUES (3);\n")},
}

// replicas is how many providers run Up at once.
const replicas = 8

// testUpOnce runs Up on replicas providers at once, each with a pool and a
// dialect of its own as separate processes would have, and checks that
// all succeed and every migration ran exactly once.
func testUpOnce(t *testing.T, gd goose.Dialect, open func(t *testing.T) (*sql.DB, dialect.Dialect)) {
	db, d := open(t)
	if err := sqllock.Migrate(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, replicas)
	for i := range replicas {
		db, d := open(t)
		locker, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 10 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		p, err := goose.NewProvider(gd, db, migrations, goose.WithLocker(sqllockgoose.NewLocker(locker, "goose")))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			_, errs[i] = p.Up(ctx)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: Up: %v", i, err)
		}
	}
	rows, err := db.QueryContext(ctx, "SELECT version, COUNT(*) FROM applied GROUP BY version ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var runs []int
	for rows.Next() {
		var version, n int
		if err := rows.Scan(&version, &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("migration %d ran %d times, want once", version, n)
		}
		runs = append(runs, version)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(runs) != len(migrations) {
		t.Errorf("migrations run: %v, want each of %d once", runs, len(migrations))
	}
}

func TestUpOncePostgres(t *testing.T) {
	t.Parallel()
	tg := dbtest.NewTarget(t, "postgres")
	testUpOnce(t, goose.DialectPostgres, func(t *testing.T) (*sql.DB, dialect.Dialect) { return migrated.Connect(t, tg) })
}

func TestUpOnceMySQL(t *testing.T) {
	t.Parallel()
	tg := dbtest.NewTarget(t, "mysql")
	testUpOnce(t, goose.DialectMySQL, func(t *testing.T) (*sql.DB, dialect.Dialect) { return migrated.Connect(t, tg) })
}

// TestUpOncePgBouncer is TestUpOncePostgres through PgBouncer in
// transaction pooling, which breaks goose's own session advisory lock.
func TestUpOncePgBouncer(t *testing.T) {
	t.Parallel()
	dsn, _ := dbtest.PgBouncerDatabase(t, dbtest.Transaction)
	testUpOnce(t, goose.DialectPostgres, func(t *testing.T) (*sql.DB, dialect.Dialect) {
		db := dbtest.OpenPostgres(t, dsn)
		d, err := postgres.New(db, postgres.WithPooler())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close(context.Background()) })
		return db, d
	})
}
