package mysql

import (
	"context"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"
	"github.com/go-sql-driver/mysql"
)

// A ring's count that the server rolls back to break a deadlock (with a
// reaping statement locking the same rows in another order) is run again,
// up to ringTries times: a lost count would leave a waiter asleep until
// the released lease would have ended. A real server does not produce
// that deadlock on demand.
func TestRingCountRetriesDeadlocks(t *testing.T) {
	t.Parallel()
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
	for _, tc := range []struct {
		name      string
		deadlocks int
		wantErr   bool
	}{
		{"one deadlock", 1, false},
		{"deadlocks up to the last try", ringTries - 1, false},
		{"a deadlock at every try", ringTries, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			const query = "UPDATE t SET rung = rung + 1"
			for range tc.deadlocks {
				mock.ExpectExec(query).WillReturnError(deadlock)
			}
			if !tc.wantErr {
				mock.ExpectExec(query).WillReturnResult(sqlmock.NewResult(0, 1))
			}
			b := &bells{db: db}
			err = b.count(context.Background(), query)
			if (err != nil) != tc.wantErr {
				t.Fatalf("count: %v, want an error: %v", err, tc.wantErr)
			}
			if err := mock.ExpectationsWereMet(); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Another error is not tried again.
	db, mock, err := sqlmock.New(sqlmock.QueryMatcherOption(sqlmock.QueryMatcherEqual))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mock.ExpectExec("UPDATE t").WillReturnError(&mysql.MySQLError{Number: 1146, Message: "Table doesn't exist"})
	if err := (&bells{db: db}).count(context.Background(), "UPDATE t"); err == nil {
		t.Fatal("count: no error for a missing table")
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}
