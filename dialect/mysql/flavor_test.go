package mysql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/internal/dbtest"
)

func TestIsTiDB(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"8.0.11-TiDB-v8.5.0-alpha-105-gec8b81b98e": true,
		"5.7.25-TiDB-v7.5.1":                       true,
		"10.11.6-MariaDB-0+deb12u1":                false,
		"8.0.36":                                   false,
		"8.4.0-tidb":                               false, // not how TiDB spells it
	} {
		if got := mysql.IsTiDB(v); got != want {
			t.Errorf("IsTiDB(%q) = %v, want %v", v, got, want)
		}
	}
}

// The migration lock's name stays within the 64 characters of GET_LOCK on
// MySQL 5.7+ and TiDB for the longest database name the dialect accepts,
// and migrating such a database works.
func TestMigrationLockNameLength(t *testing.T) {
	t.Parallel()
	db, short := dbtest.MySQL(t)
	checkMigrationLockName(t, db, short, dbtest.MySQLDSN(t), func(db *sql.DB, database string) (dialect.Dialect, error) {
		return mysql.New(db, mysql.WithDatabase(database))
	})
}

// TiDB, like MySQL 5.7+, refuses longer names (error 3057).
func TestMigrationLockNameLengthTiDB(t *testing.T) {
	t.Parallel()
	db, short := dbtest.TiDB(t)
	checkMigrationLockName(t, db, short, dbtest.TiDBDSN(t), newTiDB)
}

// checkMigrationLockName migrates a database named after short, as long
// as the dialect allows, on the server of db and dsn.
func checkMigrationLockName(t *testing.T, db *sql.DB, short, dsn string, newDialect func(*sql.DB, string) (dialect.Dialect, error)) {
	long := short + "_" + strings.Repeat("x", dialect.MaxIdentifierLen-len(short)-1)
	if err := dialect.ValidateIdentifier(long); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+long+"`"); err != nil {
			t.Errorf("drop %s: %v", long, err)
		}
	})
	d, err := newDialect(db, long)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatalf("migrate %s: %v", long, err)
	}
	// On a pool of its own whose default database is long's, so that
	// DATABASE() is long.
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = long
	conn := dbtest.OpenMySQL(t, cfg.FormatDSN())
	var n int
	if err := conn.QueryRowContext(ctx, "SELECT CHAR_LENGTH("+mysql.MigrationLockName+")").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > 64 {
		t.Errorf("the migration lock of database %s has a %d-character name: GET_LOCK takes at most 64", long, n)
	}
}
