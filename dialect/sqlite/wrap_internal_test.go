package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// The errors with which database/sql or the driver refuse a statement
// before running it — an argument of a type with no encoding, a missing
// argument — say that nothing was applied: wrap must not report them as
// ErrOutcomeUnknown (issue 28 item 4). The cases are produced by the real
// driver, so an upgrade that rewords them fails here.
func TestWrapRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	db, err := Open(filepath.Join(t.TempDir(), "wrap.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		name, query string
		args        []any
	}{
		{"unencodable argument", "SELECT ?", []any{struct{}{}}},
		{"missing argument", "SELECT ?2", []any{1}},
		{"missing named argument", "SELECT :a", []any{1}},
	} {
		_, err := db.ExecContext(ctx, c.query, c.args...)
		if err == nil {
			t.Fatalf("%s: no error", c.name)
		}
		got := wrap(err)
		if errors.Is(got, dialect.ErrOutcomeUnknown) {
			t.Errorf("%s: %v wraps ErrOutcomeUnknown, but nothing was run", c.name, got)
		}
		if !errors.Is(got, err) {
			t.Errorf("%s: %v does not wrap the driver's error", c.name, got)
		}
	}
	if got := wrap(context.Canceled); !errors.Is(got, dialect.ErrOutcomeUnknown) {
		t.Errorf("an interrupted statement: %v, want ErrOutcomeUnknown", got)
	}
}
