package sqllock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
)

func TestValidateName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"job:nightly-report", true},
		{"ünïcødé ✓", true},
		{strings.Repeat("a", sqllock.MaxNameLen), true},
		{"'; DROP TABLE sqllock_locks; --", true}, // names are bind parameters
		{"", false},
		{strings.Repeat("a", sqllock.MaxNameLen+1), false},
		{"bad\xffutf8", false},
		{"nul\x00byte", false},
	} {
		err := sqllock.ValidateName(tc.name)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, sqllock.ErrInvalidName)) {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"", "a", "job:1", "\x00", "\xff", strings.Repeat("é", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := sqllock.ValidateName(s)
		want := s != "" && len(s) <= sqllock.MaxNameLen && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
		if (err == nil) != want {
			t.Fatalf("ValidateName(%q) = %v, want ok=%v", s, err, want)
		}
		if err != nil && !errors.Is(err, sqllock.ErrInvalidName) {
			t.Fatalf("error %v does not wrap ErrInvalidName", err)
		}
	})
}

func FuzzValidateIdentifier(f *testing.F) {
	for _, s := range []string{"", "locks", "_x1", "1x", `a"b`, "a`b", "a b", "x;drop", strings.Repeat("a", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := dialect.ValidateIdentifier(s)
		if err != nil {
			if !errors.Is(err, dialect.ErrInvalidIdentifier) {
				t.Fatalf("error %v does not wrap ErrInvalidIdentifier", err)
			}
			return
		}
		// Accepted identifiers are quoted by simple wrapping, so they must
		// not contain anything that could close a quote or start a comment.
		if len(s) == 0 || len(s) > dialect.MaxIdentifierLen || s[0] >= '0' && s[0] <= '9' {
			t.Fatalf("accepted %q", s)
		}
		for _, c := range []byte(s) {
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				t.Fatalf("accepted %q with byte %q", s, c)
			}
		}
		// And the dialects accept what the validator accepts.
		if _, err := postgres.New(nonNilDB, postgres.WithSchema(s)); err != nil {
			t.Fatal(err)
		}
		if _, err := mysql.New(nonNilDB, mysql.WithDatabase(s)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestBadInputIsTypedErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := postgres.New(nil); !errors.Is(err, sqllock.ErrNilDB) {
		t.Errorf("postgres.New(nil): %v", err)
	}
	if _, err := postgres.NewFromPool(nil); !errors.Is(err, sqllock.ErrNilDB) {
		t.Errorf("postgres.NewFromPool(nil): %v", err)
	}
	if _, err := mysql.New(nil); !errors.Is(err, sqllock.ErrNilDB) {
		t.Errorf("mysql.New(nil): %v", err)
	}
	for _, bad := range []string{"", "x; DROP TABLE t", `a"b`, "a`b", "1abc", strings.Repeat("s", 64), "schéma"} {
		if _, err := postgres.New(nonNilDB, postgres.WithSchema(bad)); !errors.Is(err, sqllock.ErrInvalidIdentifier) {
			t.Errorf("postgres.WithSchema(%q): %v", bad, err)
		}
		if _, err := mysql.New(nonNilDB, mysql.WithDatabase(bad)); !errors.Is(err, sqllock.ErrInvalidIdentifier) {
			t.Errorf("mysql.WithDatabase(%q): %v", bad, err)
		}
	}
	var nilPG *postgres.Dialect
	for _, d := range []dialect.Dialect{nil, nilPG} {
		if _, err := sqllock.NewTable(d, sqllock.Options{}); !errors.Is(err, sqllock.ErrNilDB) {
			t.Errorf("NewTable(%#v): %v", d, err)
		}
		if _, err := sqllock.NewOptimistic(d, sqllock.Options{}); !errors.Is(err, sqllock.ErrNilDB) {
			t.Errorf("NewOptimistic(%#v): %v", d, err)
		}
		if _, err := sqllock.NewReaper(d, sqllock.ReaperOptions{}); !errors.Is(err, sqllock.ErrNilDB) {
			t.Errorf("NewReaper(%#v): %v", d, err)
		}
		if err := sqllock.Migrate(ctx, d); !errors.Is(err, sqllock.ErrNilDB) {
			t.Errorf("Migrate(%#v): %v", d, err)
		}
	}
	d, err := postgres.New(nonNilDB)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []sqllock.Options{
		{TTL: -time.Second},
		{TTL: time.Millisecond},
		{TTL: 3 * time.Second, RenewInterval: 2 * time.Second},
		{RenewInterval: -1},
		{MaxBackoff: -1},
	} {
		if _, err := sqllock.NewTable(d, o); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Errorf("NewTable(%+v): %v, want ErrInvalidOptions", o, err)
		}
		if _, err := sqllock.NewOptimistic(d, o); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Errorf("NewOptimistic(%+v): %v, want ErrInvalidOptions", o, err)
		}
	}
	for _, o := range []sqllock.ReaperOptions{{Interval: -1}, {BatchSize: -1}} {
		if _, err := sqllock.NewReaper(d, o); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Errorf("NewReaper(%+v): %v, want ErrInvalidOptions", o, err)
		}
	}
	// Names and owners are checked before any statement is sent: this
	// locker's pool points nowhere.
	table, err := sqllock.NewTable(d, sqllock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	optimistic, err := sqllock.NewOptimistic(d, sqllock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []sqllock.Locker{table, optimistic} {
		checkNames(t, ctx, l)
	}
}

func checkNames(t *testing.T, ctx context.Context, l sqllock.Locker) {
	t.Helper()
	for _, name := range []string{"", "a\x00b", "\xc3\x28", strings.Repeat("n", 256)} {
		if _, err := l.TryAcquire(ctx, name); !errors.Is(err, sqllock.ErrInvalidName) {
			t.Errorf("TryAcquire(%q): %v", name, err)
		}
		if _, err := l.Acquire(ctx, name); !errors.Is(err, sqllock.ErrInvalidName) {
			t.Errorf("Acquire(%q): %v", name, err)
		}
		if _, err := l.TryAcquire(sqllock.WithOwner(ctx, name), "ok"); !errors.Is(err, sqllock.ErrInvalidOwner) {
			t.Errorf("TryAcquire with owner %q: %v", name, err)
		}
	}
}
