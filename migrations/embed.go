// Package migrations holds sqllock's schema as golang-migrate files, one
// folder per dialect, embedded so that sqllock.Migrate needs no files on disk.
//
// Teams with their own migration pipeline can copy postgres/*.sql or
// mysql/*.sql into it (they are plain golang-migrate files with unqualified
// table names), or read them from Postgres and MySQL.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed postgres/*.sql mysql/*.sql
var files embed.FS

// Postgres returns the PostgreSQL migration files at the root of the FS.
func Postgres() fs.FS { return sub("postgres") }

// MySQL returns the MySQL/MariaDB migration files at the root of the FS.
func MySQL() fs.FS { return sub("mysql") }

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil { // cannot happen: dir is a constant embedded above
		panic(err)
	}
	return f
}
