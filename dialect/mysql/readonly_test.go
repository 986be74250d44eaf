package mysql_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// Sessions whose transactions are read-only, as every session is on a
// server under read_only (for accounts without SUPER) or
// innodb_read_only, get ErrReadOnly from every grant.
func TestReadOnlySessionRefusesGrants(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	db, database := dbtest.MySQL(t)
	d, err := mysql.New(db, mysql.WithDatabase(database))
	if err != nil {
		t.Fatal(err)
	}
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	var version string
	if err := db.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	param := "transaction_read_only" // MySQL 8
	if strings.Contains(version, "MariaDB") {
		param = "tx_read_only"
	}
	dsn, sep := dbtest.MySQLDSN(t), "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	ro := dbtest.OpenMySQL(t, dsn+sep+param+"=1")
	rd, err := mysql.New(ro, mysql.WithDatabase(database))
	if err != nil {
		t.Fatal(err)
	}
	table, err := sqllock.NewTable(rd, sqllock.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := table.TryAcquire(ctx, "ro"); !errors.Is(err, sqllock.ErrReadOnly) {
		t.Fatalf("acquire in read-only sessions: %v, want ErrReadOnly", err)
	}
	opt, err := sqllock.NewOptimistic(rd, sqllock.OptimisticOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := opt.TryAcquire(ctx, "ro"); !errors.Is(err, sqllock.ErrReadOnly) {
		t.Fatalf("optimistic acquire in read-only sessions: %v, want ErrReadOnly", err)
	}
}
