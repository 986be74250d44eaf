package mysql

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// The errors with which database/sql or the driver refuse a statement
// before sending it — an argument of a type with no encoding, a wrong
// number of arguments, a packet over maxAllowedPacket — say that nothing
// was applied: wrap must not report them as ErrOutcomeUnknown (issue 28
// item 4). The cases are produced by the real driver, so an upgrade that
// rewords them fails here.
func TestWrapRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	db, _ := dbtest.MySQL(t)
	c, err := mysql.ParseDSN(dbtest.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	c.MaxAllowedPacket = 1024
	small := dbtest.OpenMySQL(t, c.FormatDSN())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cases := []struct {
		name, query string
		args        []any
		small       bool
	}{
		{"argument count", "SELECT ? + ?", []any{1}, false},
		{"unencodable argument", "SELECT ?", []any{struct{}{}}, false},
		{"packet too large", "SELECT '" + strings.Repeat("x", 2048) + "'", nil, true},
		{"prepared packet too large", "SELECT ?, '" + strings.Repeat("x", 2048) + "'", []any{1}, true},
	}
	for _, c := range cases {
		on := db
		if c.small {
			on = small
		}
		_, err := on.ExecContext(ctx, c.query, c.args...)
		if err == nil {
			t.Fatalf("%s: no error", c.name)
		}
		got := wrap(err)
		if errors.Is(got, dialect.ErrOutcomeUnknown) {
			t.Errorf("%s: %v wraps ErrOutcomeUnknown, but nothing was sent", c.name, got)
		}
		if !errors.Is(got, err) {
			t.Errorf("%s: %v does not wrap the driver's error", c.name, got)
		}
	}
	if got := wrap(mysql.ErrInvalidConn); !errors.Is(got, dialect.ErrOutcomeUnknown) {
		t.Errorf("a connection that failed mid-statement: %v, want ErrOutcomeUnknown", got)
	}
}
