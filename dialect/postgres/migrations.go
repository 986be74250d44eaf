package postgres

import (
	"embed"
	"io/fs"

	"github.com/sqllock/sqllock/dialect/internal/sqlmigrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the PostgreSQL lock schema as golang-migrate files, at
// the root of the FS: what sqllock.Migrate applies (see Dialect.Migrations).
// They are plain golang-migrate files with unqualified table names:
// teams with a migration pipeline of their own can copy them from this
// package's migrations folder, or read them here. Version numbers are
// shared by the dialects, but each has only the migrations of what it
// supports (golang-migrate allows gaps).
func Migrations() fs.FS { return sqlmigrate.Files(migrationFiles, "migrations") }
