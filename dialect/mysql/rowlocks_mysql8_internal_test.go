package mysql

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/DATA-DOG/go-sqlmock"
	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock/dialect"
)

// On MySQL 8, which has no information_schema.INNODB_LOCKS (error 1109),
// the pessimistic locks are read from performance_schema.data_locks: every
// granted record lock of the row-lock table, its mode, holder and waiters.
// No MySQL 8 server runs here: the queries and the parsing of their answer
// are checked against go-sqlmock, with rows shaped as MySQL 8.0 returns
// them.
func TestMySQL8DataLocks(t *testing.T) {
	t.Parallel()
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherFunc(func(want, got string) error {
		if !strings.Contains(got, want) {
			return errors.New("not " + want)
		}
		return nil
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mock.ExpectQuery("FROM information_schema.INNODB_LOCKS l").WithArgs("`shop`.`sqllock_rowlocks`").
		WillReturnError(&gomysql.MySQLError{Number: 1109, Message: "Unknown table 'INNODB_LOCKS' in information_schema"})
	mock.ExpectQuery("FROM performance_schema.data_locks l").WithArgs("shop").
		WillReturnRows(sqlmock.NewRows([]string{"LOCK_DATA", "LOCK_MODE", "trx_mysql_thread_id", "HOST", "held_us", "waiters"}).
			AddRow("'nightly'", "X,REC_NOT_GAP", 41, "10.0.0.7:51234", 2_500_000, 2).
			AddRow("0x7265706f7274", "S,REC_NOT_GAP", 42, "", 1_000, 0).
			AddRow("supremum pseudo-record", "X", 43, "", 10, 0))
	rows, err := listRowLocks(context.Background(), db, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("rows %+v, want nightly and report (the pseudo-record skipped)", rows)
	}
	n, r := rows[0], rows[1]
	if n.Name != "nightly" || n.Mode != "exclusive" || n.Owner != "connection 41 from 10.0.0.7:51234" || n.HeldFor != 2500*time.Millisecond || n.Waiters != 2 {
		t.Errorf("nightly: %+v", n)
	}
	if r.Name != "report" || r.Mode != "shared" || r.Owner != "connection 42" || r.Primitive != "pessimistic" || r.Holds != 1 {
		t.Errorf("report: %+v", r)
	}

	// Without the right to read them, the view is missing, not an error.
	mock.ExpectQuery("FROM information_schema.INNODB_LOCKS l").
		WillReturnError(&gomysql.MySQLError{Number: 1109, Message: "Unknown table 'INNODB_LOCKS' in information_schema"})
	mock.ExpectQuery("FROM performance_schema.data_locks l").WithArgs(nil).
		WillReturnError(&gomysql.MySQLError{Number: 1142, Message: "SELECT command denied to user 'app'@'%' for table 'data_locks'"})
	if _, err := listRowLocks(context.Background(), db, ""); !errors.Is(err, dialect.ErrUnsupported) || !strings.Contains(err.Error(), "data_locks") {
		t.Fatalf("data_locks denied: %v, want dialect.ErrUnsupported naming data_locks", err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}
