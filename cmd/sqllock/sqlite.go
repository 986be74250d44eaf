package main

import (
	"database/sql"
	"os"
	"path/filepath"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/sqlite"
)

// openSQLite opens the embedded lock database at path, creating its
// directory if needed.
func openSQLite(path string) (*sql.DB, dialect.Dialect, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil, err
	}
	db, err := sqlite.Open(path)
	if err != nil {
		return nil, nil, err
	}
	d, err := sqlite.New(db)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, d, nil
}
