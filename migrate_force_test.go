package sqllock_test

import (
	"errors"
	"testing"

	"github.com/sqllock/sqllock"
)

// MigrateForce clears a dirty flag at the version given, and Migrate then
// applies nothing twice: the migrations tolerate their own objects.
func TestMigrateForce(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		v, dirty, err := sqllock.MigrationVersion(ctx, e.d)
		if err != nil || dirty || v == 0 {
			t.Fatalf("version %d dirty %v: %v", v, dirty, err)
		}
		if _, err := e.db.ExecContext(ctx, e.q("UPDATE {sqllock_schema_migrations} SET dirty = true")); err != nil {
			t.Fatal(err)
		}
		if _, dirty, err := sqllock.MigrationVersion(ctx, e.d); err != nil || !dirty {
			t.Fatalf("not dirty after the update: %v", err)
		}
		if err := sqllock.Migrate(ctx, e.d); err == nil {
			t.Fatal("Migrate on a dirty schema succeeded")
		}
		if err := sqllock.MigrateForce(ctx, e.d, -2); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Fatalf("MigrateForce(-2): %v", err)
		}
		// Forced back to version 2 (every dialect has it): Migrate runs the
		// later migrations again, over objects that exist.
		if err := sqllock.MigrateForce(ctx, e.d, 2); err != nil {
			t.Fatal(err)
		}
		got, dirty, err := sqllock.MigrationVersion(ctx, e.d)
		if err != nil || dirty || got != 2 {
			t.Fatalf("after force 2: version %d dirty %v: %v", got, dirty, err)
		}
		if err := sqllock.Migrate(ctx, e.d); err != nil {
			t.Fatalf("Migrate over existing objects: %v", err)
		}
		if got, dirty, err := sqllock.MigrationVersion(ctx, e.d); err != nil || dirty || got != v {
			t.Fatalf("after Migrate: version %d dirty %v: %v", got, dirty, err)
		}
	})
}
