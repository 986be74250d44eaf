package sqllock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
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
	// Lockers on every variant share one lock table and must agree.
	lockers := map[string]*sqllock.Table{}
	for name, mod := range variants {
		c := base.Clone()
		mod(c)
		db := dbtest.OpenMySQL(t, c.FormatDSN())
		d, err := mysql.New(db, mysql.WithDatabase(database))
		if err != nil {
			t.Fatal(err)
		}
		if err := sqllock.Migrate(ctxT(t), d); err != nil {
			t.Fatalf("%s: migrate: %v", name, err)
		}
		if lockers[name], err = sqllock.NewTable(d, sqllock.Options{TTL: 5 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := ctxT(t)
	for name, l := range lockers {
		k, err := l.TryAcquire(sqllock.WithOwner(ctx, name), "shared")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		again, err := l.TryAcquire(sqllock.WithOwner(ctx, name), "shared")
		if err != nil || again.Token() != k.Token() {
			t.Fatalf("%s: re-entry: %v", name, err)
		}
		for other, ol := range lockers {
			if _, err := ol.TryAcquire(ctx, "shared"); !errors.Is(err, sqllock.ErrLocked) {
				t.Fatalf("%s holds, %s got %v", name, other, err)
			}
		}
		infos, err := l.List(ctx)
		if err != nil || len(infos) != 1 || infos[0].Holds != 2 || infos[0].ExpiresIn < 4*time.Second || infos[0].ExpiresIn > 5*time.Second {
			t.Fatalf("%s: List %+v %v", name, infos, err)
		}
		if skew := time.Since(infos[0].AcquiredAt); skew < -time.Minute || skew > time.Minute {
			t.Fatalf("%s: AcquiredAt %v is not UTC now", name, infos[0].AcquiredAt)
		}
		for _, h := range []*sqllock.Lock{again, k} {
			if err := h.Release(ctx); err != nil {
				t.Fatalf("%s: release: %v", name, err)
			}
		}
	}
}

// Only the database clock decides expiry: a session whose server clock is an
// hour ahead sees every lease as expired, whatever the client's clock says.
func TestMySQLExpiryUsesDatabaseClock(t *testing.T) {
	t.Parallel()
	_, database := dbtest.MySQL(t)
	c, err := gomysql.ParseDSN(dbtest.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	now := time.Now()
	mk := func(shift time.Duration) *sqllock.Table {
		c := c.Clone()
		// go-sql-driver sends unknown DSN parameters as SET statements.
		ts := now.Add(shift)
		c.Params = map[string]string{"timestamp": fmt.Sprintf("%d.%06d", ts.Unix(), ts.Nanosecond()/1000)}
		d, err := mysql.New(dbtest.OpenMySQL(t, c.FormatDSN()), mysql.WithDatabase(database))
		if err != nil {
			t.Fatal(err)
		}
		if err := sqllock.Migrate(ctx, d); err != nil {
			t.Fatal(err)
		}
		l, err := sqllock.NewTable(d, sqllock.Options{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	present, future := mk(0), mk(time.Hour)
	k, err := present.TryAcquire(ctx, "clock")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(ctx)
	if _, err := present.TryAcquire(ctx, "clock"); !errors.Is(err, sqllock.ErrLocked) {
		t.Fatalf("same clock: %v, want ErrLocked", err)
	}
	f, err := future.TryAcquire(ctx, "clock")
	if err != nil {
		t.Fatalf("a server clock one hour ahead must see the 30s lease expired: %v", err)
	}
	if f.Token() <= k.Token() {
		t.Fatalf("token %d, want > %d", f.Token(), k.Token())
	}
	_ = f.Release(ctx)
}

// A *pgxpool.Pool works directly, borrowing its connections.
func TestPostgresFromPgxPool(t *testing.T) {
	t.Parallel()
	pool, schema := dbtest.PostgresPool(t)
	d, err := postgres.NewFromPool(pool, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if err := pool.Ping(context.Background()); err != nil {
			t.Fatalf("closing the dialect closed the pgx pool: %v", err)
		}
	}()
	ctx := ctxT(t)
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	l, err := sqllock.NewTable(d, sqllock.Options{})
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
