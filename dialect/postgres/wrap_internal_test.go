package postgres

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// The errors with which pgx refuses a statement before executing it — an
// argument its parameter's type cannot hold, a wrong number of arguments,
// too many parameters — say that nothing was applied: wrap must not report
// them as ErrOutcomeUnknown (issue 28 item 4: a semaphore limit of 2^31
// was "outcome unknown" although pgx had sent nothing). The cases are
// produced by the real driver, so an upgrade that rewords them fails here.
func TestWrapRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	db, _ := dbtest.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const n = math.MaxUint16 + 1
	var in strings.Builder
	many := make([]any, n)
	for i := range n {
		if i > 0 {
			in.WriteByte(',')
		}
		in.WriteString("$" + strconv.Itoa(i+1))
		many[i] = i
	}
	for _, c := range []struct {
		name, query string
		args        []any
	}{
		{"int4 out of range", "SELECT $1::int4", []any{int64(math.MaxInt32) + 1}},
		{"argument count", "SELECT $1::int4, $2::int4", []any{1}},
		{"unencodable argument", "SELECT $1::int4", []any{struct{}{}}},
		{"too many parameters", "SELECT 1 WHERE 1 IN (" + in.String() + ")", many},
	} {
		_, err := db.ExecContext(ctx, c.query, c.args...)
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
	// A connection cut off mid-statement is still reported as such.
	if got := wrap(errors.New("unexpected EOF")); !errors.Is(got, dialect.ErrOutcomeUnknown) {
		t.Errorf("a lost reply: %v, want ErrOutcomeUnknown", got)
	}
}
