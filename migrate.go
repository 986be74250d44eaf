package sqllock

import (
	"context"
	"errors"
	"fmt"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/sqllock/sqllock/dialect"
)

// Migrate brings d's lock schema up to date with golang-migrate and the
// embedded files of the migrations package. Versions are recorded in
// sqllock_schema_migrations, never in the application's schema_migrations.
// It is idempotent and safe to call from many processes at once (they
// serialise on a database lock); it uses one connection of d's pool and
// never closes the pool.
func Migrate(ctx context.Context, d dialect.Dialect) error {
	return withMigrate(ctx, d, (*migrate.Migrate).Up)
}

// MigrateDown reverts every sqllock migration, dropping the lock tables.
func MigrateDown(ctx context.Context, d dialect.Dialect) error {
	return withMigrate(ctx, d, (*migrate.Migrate).Down)
}

// MigrationVersion reports the applied schema version (0 when none) and
// whether a migration failed half-way (dirty), which needs an operator.
func MigrationVersion(ctx context.Context, d dialect.Dialect) (version uint, dirty bool, err error) {
	err = withMigrate(ctx, d, func(m *migrate.Migrate) error {
		version, dirty, err = m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			version, dirty, err = 0, false, nil
		}
		return err
	})
	return version, dirty, err
}

func withMigrate(ctx context.Context, d dialect.Dialect, fn func(*migrate.Migrate) error) error {
	if isNil(d) || d.DB() == nil {
		return ErrNilDB
	}
	src, err := iofs.New(d.Migrations(), ".")
	if err != nil {
		return fmt.Errorf("sqllock: migrate: %w", err)
	}
	conn, err := d.DB().Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqllock: migrate: %w", err)
	}
	drv, err := d.MigrationDriver(ctx, conn)
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("sqllock: migrate: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, d.Name(), drv)
	if err != nil {
		_ = drv.Close()
		return fmt.Errorf("sqllock: migrate: %w", err)
	}
	defer m.Close()
	stop := context.AfterFunc(ctx, func() {
		select {
		case m.GracefulStop <- true:
		default:
		}
	})
	defer stop()
	err = fn(m)
	if errors.Is(err, migrate.ErrNoChange) {
		err = nil
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("sqllock: migrate: %w", err)
	}
	return nil
}
