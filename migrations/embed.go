// Package migrations holds sqllock's schema as golang-migrate files, one
// folder per dialect, embedded so that sqllock.Migrate needs no files on disk.
//
// Teams with their own migration pipeline can copy postgres/*.sql,
// mysql/*.sql, tidb/*.sql or sqlite/*.sql into it (they are plain golang-migrate files
// with unqualified table names), or read them from Postgres, MySQL and
// SQLite.
//
// Version numbers are shared across dialects, but a dialect has only the
// migrations of the strategies it supports: golang-migrate walks the files
// present in one folder and allows gaps, so a dialect may stop at a lower
// version, or skip one, without a placeholder file.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed postgres/*.sql mysql/*.sql tidb/*.sql sqlite/*.sql
var files embed.FS

// Postgres returns the PostgreSQL migration files at the root of the FS.
func Postgres() fs.FS { return sub("postgres") }

// MySQL returns the MySQL/MariaDB migration files at the root of the FS.
func MySQL() fs.FS { return sub("mysql") }

// TiDB returns the TiDB migration files at the root of the FS: MySQL's,
// with the token table's ids allocated in order across TiDB servers.
func TiDB() fs.FS { return sub("tidb") }

// SQLite returns the SQLite migration files at the root of the FS.
func SQLite() fs.FS { return sub("sqlite") }

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil { // cannot happen: dir is a constant embedded above
		panic(err)
	}
	return f
}
