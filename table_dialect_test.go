package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/rowlock"
)

// The MySQL dialect must not depend on DSN settings that change how results
// are counted or decoded, or on the session time zone.
func TestMySQLWhateverTheDSN(t *testing.T) {
	t.Parallel()
	base, err := gomysql.ParseDSN(dbtest.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	_, database := dbtest.MySQL(t)
	variants := map[string]func(c *gomysql.Config){
		"plain":           func(*gomysql.Config) {},
		"parseTime":       func(c *gomysql.Config) { c.ParseTime = true },
		"clientFoundRows": func(c *gomysql.Config) { c.ClientFoundRows = true },
		"interpolate+tz": func(c *gomysql.Config) {
			c.InterpolateParams = true
			c.Params = map[string]string{"time_zone": "'+09:30'"}
		},
	}
	// Lockers on every variant share one lock table and must agree; so must
	// version-checked updates of users' rows.
	const ttl = 30 * time.Second
	lockers := map[string]map[string]locker{}
	dbs := map[string]*sql.DB{}
	for name, mod := range variants {
		c := base.Clone()
		mod(c)
		db := dbtest.OpenMySQL(t, c.FormatDSN())
		dbs[name] = db
		d, err := mysql.New(db, mysql.WithDatabase(database))
		if err != nil {
			t.Fatal(err)
		}
		closeAtEnd(t, d)
		if err := sqllock.Migrate(ctxT(t), d); err != nil {
			t.Fatalf("%s: migrate: %v", name, err)
		}
		for _, s := range leaseStrategies {
			if lockers[s.name] == nil {
				lockers[s.name] = map[string]locker{}
			}
			if lockers[s.name][name], err = s.new(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx := ctxT(t)
	for strategy, lockers := range lockers {
		for name, l := range lockers {
			start := time.Now()
			k, err := l.TryAcquire(sqllock.WithOwner(ctx, name), "shared")
			if err != nil {
				t.Fatalf("%s/%s: %v", strategy, name, err)
			}
			again, err := l.TryAcquire(sqllock.WithOwner(ctx, name), "shared")
			if err != nil || again.Token() != k.Token() {
				t.Fatalf("%s/%s: re-entry: %v", strategy, name, err)
			}
			for other, ol := range lockers {
				if _, err := ol.TryAcquire(ctx, "shared"); !errors.Is(err, sqllock.ErrLocked) {
					t.Fatalf("%s: %s holds, %s got %v", strategy, name, other, err)
				}
			}
			infos, err := l.List(ctx)
			// The lease was granted, re-entered or renewed at most this
			// long ago: it has at least the TTL less that left, up to a
			// millisecond for the clock's resolution.
			since := time.Since(start)
			if err != nil || len(infos) != 1 || infos[0].Holds != 2 || infos[0].ExpiresIn < ttl-since-time.Millisecond || infos[0].ExpiresIn > ttl {
				t.Fatalf("%s/%s: List %+v %v, want ExpiresIn within %v of the TTL %v", strategy, name, infos, err, since, ttl)
			}
			if skew := time.Since(infos[0].AcquiredAt); skew < -time.Minute || skew > time.Minute {
				t.Fatalf("%s/%s: AcquiredAt %v is not UTC now", strategy, name, infos[0].AcquiredAt)
			}
			for _, h := range []*sqllock.Lock{again, k} {
				if err := h.Release(ctx); err != nil {
					t.Fatalf("%s/%s: release: %v", strategy, name, err)
				}
			}
		}
	}
	items := "`" + database + "`.items"
	if _, err := dbs["plain"].ExecContext(ctx, "CREATE TABLE "+items+" (id INT PRIMARY KEY, stock INT NOT NULL, version BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := dbs["plain"].ExecContext(ctx, "INSERT INTO "+items+" VALUES (1, 5, 1)"); err != nil {
		t.Fatal(err)
	}
	version := int64(1)
	for name, db := range dbs {
		// A write that leaves stock as it is still matches and changes the
		// row, through the version; a stale version matches nothing.
		upd := "UPDATE " + items + " SET stock = stock - ?, version = version + 1 WHERE id = 1 AND version = ?"
		if err := rowlock.CheckUpdate(db.ExecContext(ctx, upd, 0, version)); err != nil {
			t.Fatalf("%s: no-op write at the current version: %v", name, err)
		}
		if err := rowlock.CheckUpdate(db.ExecContext(ctx, upd, 1, version)); !errors.Is(err, rowlock.ErrConflict) {
			t.Fatalf("%s: write at a stale version: %v, want ErrConflict", name, err)
		}
		version++
	}
}

// A *pgxpool.Pool works directly, borrowing its connections.
func TestPostgresFromPgxPool(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.PostgresPool(t)
	d, err := postgres.NewFromPool(pool, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	defer func() {
		if err := d.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := pool.Ping(context.Background()); err != nil {
			t.Fatalf("closing the dialect closed the pgx pool: %v", err)
		}
	}()
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	l, err := sqllock.NewTable(d, sqllock.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := pool.Stat().AcquireCount()
	k, err := l.TryAcquire(ctx, "pooled")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if pool.Stat().AcquireCount() < before+2 {
		t.Fatalf("statements did not run on the pgx pool (acquires %d -> %d)", before, pool.Stat().AcquireCount())
	}
	if _, err := l.List(context.WithoutCancel(ctx)); err != nil {
		t.Fatal(err)
	}
}
