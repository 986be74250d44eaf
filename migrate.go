package sqllock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// Migrate brings d's lock schema up to date with golang-migrate and the
// dialect's embedded migration files (d.Migrations()). Versions are recorded in
// sqllock_schema_migrations, never in the application's schema_migrations.
// It is idempotent and safe to call from many processes at once: they
// serialise on a database lock of the schema (PostgreSQL), database (MySQL)
// or file (SQLite) the migrations write to, waited for as long as ctx
// allows. It uses one connection of d's pool, which it closes afterwards
// instead of returning it to the pool, and never closes the pool.
//
// On PostgreSQL and SQLite a run is one transaction: if it fails or ctx
// ends, none of it is applied. On MySQL, whose DDL is not transactional,
// the migrations completed before a failure stay applied, and one cut off
// half-way is recorded as dirty (see MigrationVersion). If ctx ended, the
// error wraps ctx's error.
//
// On a schema that is up to date, Migrate only reads the recorded version:
// it needs no privilege to create, alter or drop anything, so a service
// whose database role may only read and write sqllock's tables can call it
// at start-up (see "Least privilege" in docs/databases.md). Otherwise it
// first creates the version table if missing, and a role without the
// privilege fails there, before anything is written.
func Migrate(ctx context.Context, d dialect.Dialect) error {
	return withMigrate(ctx, d, migrateUp, (*migrate.Migrate).Up)
}

// MigrateDown reverts every sqllock migration, dropping the lock tables.
// A role without the privilege to drop them fails before anything is
// changed, leaving the schema as it was.
func MigrateDown(ctx context.Context, d dialect.Dialect) error {
	return withMigrate(ctx, d, migrateWrites, (*migrate.Migrate).Down)
}

// MigrateForce records version as d's applied schema version and clears
// the dirty flag, without running any migration: the repair after a
// migration failed half-way (see MigrationVersion) and the schema was
// brought by hand to the state of version, whose migrations are then all
// applied. Version -1 records that none is applied. It waits for the
// migration lock as Migrate does.
func MigrateForce(ctx context.Context, d dialect.Dialect, version int) error {
	if version < -1 {
		return fmt.Errorf("sqllock: migrate force %d: %w", version, ErrInvalidOptions)
	}
	return withMigrate(ctx, d, migrateWrites, func(m *migrate.Migrate) error { return m.Force(version) })
}

// MigrationVersion reports the applied schema version (0 when none) and
// whether a migration failed half-way (dirty), which needs an operator.
func MigrationVersion(ctx context.Context, d dialect.Dialect) (version uint, dirty bool, err error) {
	err = withMigrate(ctx, d, migrateReads, func(m *migrate.Migrate) error {
		version, dirty, err = m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			version, dirty, err = 0, false, nil
		}
		return err
	})
	return version, dirty, err
}

// ctxErr returns ctx's error, also when its deadline passed before its
// timer fired: a connection attempt that ran into the deadline can return
// first, with an error of its own.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// What a migration operation does to the schema (see withMigrate).
type migrateMode int

const (
	migrateReads  migrateMode = iota // reads the version only
	migrateWrites                    // writes version records
	migrateUp                        // writes version records unless the schema is up to date
)

// tableEnsurer is a migration driver that creates its version table only
// when asked, or before its first version record (the dialects' own).
type tableEnsurer interface{ EnsureTable() error }

// withMigrate runs fn on a golang-migrate instance over one connection of
// d's pool. The connection never goes back to the pool (the driver discards
// it), so nothing of a failed or cancelled run can stay behind on it. If ctx
// ended, the error wraps ctx's error, whatever else went wrong.
//
// Before an operation that writes version records, the driver's version
// table is ensured, which needs the privilege to create it even when it
// exists: a role without it fails there, before golang-migrate starts, and
// nothing is written. For migrateUp the recorded version is read first,
// under the migration lock: if it is the newest migration's and clean, the
// schema is up to date, and nothing else runs.
func withMigrate(ctx context.Context, d dialect.Dialect, mode migrateMode, fn func(*migrate.Migrate) error) (err error) {
	if isNil(d) || d.DB() == nil {
		return ErrNilDB
	}
	defer func() {
		if err == nil {
			return
		}
		if cerr := ctxErr(ctx); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w: %w", cerr, err)
		}
		err = fmt.Errorf("sqllock: migrate: %w", err)
	}()
	src, err := iofs.New(d.Migrations(), ".")
	if err != nil {
		return err
	}
	// Connecting is bounded by the dialect's statement timeout; the wait
	// for another migrator and the migrations last as long as ctx.
	run := sqlrun.Runner{DB: d.DB(), Hooks: d.Catalogue().Hooks}
	conn, err := run.Pin(ctx)
	if err != nil {
		return err
	}
	drv, err := d.MigrationDriver(ctx, conn)
	if err != nil {
		// The connection's state is unknown: whatever the dialect left
		// undone, it does not go back to the pool.
		_ = dialect.Discard(conn)
		return err
	}
	if mode == migrateUp && upToDate(src, drv) {
		return drv.Close()
	}
	if e, ok := drv.(tableEnsurer); ok && mode != migrateReads {
		if err := e.EnsureTable(); err != nil {
			_ = drv.Close()
			if ctxErr(ctx) != nil {
				return err
			}
			return fmt.Errorf("ensuring the version table (migrating needs a role that may create, "+
				"alter and drop tables: the schema's owner; see docs/databases.md): %w", err)
		}
	}
	m, err := migrate.NewWithInstance("iofs", src, d.Name(), drv)
	if err != nil {
		_ = drv.Close()
		return err
	}
	defer m.Close()
	// The driver waits for the migration lock for as long as ctx allows.
	// golang-migrate's own timeout would return while the driver's Lock
	// still ran on the connection.
	m.LockTimeout = math.MaxInt64
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
		// GracefulStop ends a run early without an error.
		err = ctx.Err()
	}
	return err
}

// upToDate reports whether drv records the newest migration of src as
// applied, clean, reading the version under the migration lock: a migrator
// still at work is waited for. A version it cannot read is not up to date:
// the run that follows reports why.
func upToDate(src source.Driver, drv database.Driver) bool {
	newest, err := src.First()
	if err != nil {
		return false // no migrations: golang-migrate says so
	}
	for {
		next, err := src.Next(newest)
		if err != nil {
			break
		}
		newest = next
	}
	if drv.Lock() != nil {
		return false
	}
	v, dirty, err := drv.Version()
	if uerr := drv.Unlock(); err == nil {
		err = uerr
	}
	return err == nil && !dirty && v >= 0 && uint(v) == newest
}
