package mysql

import (
	"embed"
	"io/fs"

	"github.com/sqllock/sqllock/dialect/internal/sqlmigrate"
)

//go:embed migrations/*.sql tidb_migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the MySQL/MariaDB lock schema as golang-migrate files,
// at the root of the FS: what sqllock.Migrate applies (see
// Dialect.Migrations).
// They are plain golang-migrate files with unqualified table names:
// teams with a migration pipeline of their own can copy them from this
// package's migrations folder, or read them here. Version numbers are
// shared by the dialects, but each has only the migrations of what it
// supports (golang-migrate allows gaps).
func Migrations() fs.FS { return sqlmigrate.Files(migrationFiles, "migrations") }

// TiDBMigrations returns the TiDB lock schema (NewTiDB) as golang-migrate
// files, at the root of the FS: MySQL's first migrations, with the token
// table's ids allocated in order across TiDB servers (AUTO_ID_CACHE 1).
func TiDBMigrations() fs.FS { return sqlmigrate.Files(migrationFiles, "tidb_migrations") }
