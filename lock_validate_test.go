package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/observe"
	"github.com/sqllock/sqllock/rowlock"
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
	for _, s := range append([]string{"", "a", "job:1", "\x00", "\xff", strings.Repeat("é", 200)}, hostileStrings...) {
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
	seeds := []string{"", "locks", "_x1", "1x", `a"b`, "a`b", "a b", "x;drop", strings.Repeat("a", 64)}
	seeds = append(append(append(seeds, hostileStrings...), identifierStrings...), reservedIdentifiers...)
	for _, s := range seeds {
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
		if _, err := sqllock.NewTable(d, sqllock.TableOptions{}); !errors.Is(err, sqllock.ErrNilDB) {
			t.Errorf("NewTable(%#v): %v", d, err)
		}
		if _, err := sqllock.NewOptimistic(d, sqllock.OptimisticOptions{}); !errors.Is(err, sqllock.ErrNilDB) {
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
	for _, lo := range []sqllock.LeaseOptions{
		{TTL: -time.Second},
		{TTL: time.Millisecond},
		{TTL: 3 * time.Second, RenewInterval: 2 * time.Second},
		{RenewInterval: -1},
		{MaxBackoff: -1},
	} {
		o := sqllock.TableOptions{LeaseOptions: lo}
		if _, err := sqllock.NewTable(d, o); !errors.Is(err, sqllock.ErrInvalidOptions) {
			t.Errorf("NewTable(%+v): %v, want ErrInvalidOptions", o, err)
		}
		if _, err := sqllock.NewOptimistic(d, optimisticOptions(o)); !errors.Is(err, sqllock.ErrInvalidOptions) {
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
	table, err := sqllock.NewTable(d, sqllock.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	optimistic, err := sqllock.NewOptimistic(d, sqllock.OptimisticOptions{})
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

// FuzzOptions feeds arbitrary durations and counts to every constructor
// and helper that takes options, on dialects whose pools never connect:
// each must accept exactly what the documentation allows, refuse the rest
// with an error wrapping ErrInvalidOptions, and never panic. The
// arguments are Options' TTL, RenewInterval and MaxBackoff,
// PessimisticOptions' KeepAlive, ReaperOptions' Interval and BatchSize,
// and RetryOptions' Attempts, MinBackoff and MaxBackoff.
func FuzzOptions(f *testing.F) {
	const (
		maxI = math.MaxInt64
		minI = math.MinInt64
		ms   = int64(time.Millisecond)
		sec  = int64(time.Second)
	)
	for _, seed := range [][9]int64{
		{},
		{30 * sec, 10 * sec, 500 * ms, sec, 60 * sec, 1000, 10, ms, 100 * ms},
		{3 * sec, sec, 0, ms, 1, 1, 1, 1, 1},
		{3 * sec, sec + 1, 0, ms - 1, 0, 0, 0, sec, ms},
		{10 * ms, 0, 1, 1, -1, -1, -1, -1, -1},
		{10*ms - 1, 0, 5*ms - 1, -1, 0, 0, 0, 0, 0},
		{-1, -1, -1, -1, -1, -1, -1, -1, -1},
		{maxI, 0, maxI, maxI, maxI, maxI, maxI, maxI, maxI},
		{maxI, maxI / 3, 0, 0, 0, 0, 0, maxI, 0},
		{30 * sec, maxI, 0, 0, 0, 0, 0, 0, 0},
		{30 * sec, maxI / 2, 0, 0, 0, 0, 0, 0, 0}, // 3 x RenewInterval overflows int64
		{minI, minI, minI, minI, minI, minI, minI, minI, minI},
		{0, 20 * sec, 0, 0, 0, 0, 0, 2 * sec, sec},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], seed[4], seed[5], seed[6], seed[7], seed[8])
	}
	pg, err := postgres.New(nonNilDB)
	if err != nil {
		f.Fatal(err)
	}
	my, err := mysql.New(nonNilDB)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ttl, renew, maxBackoff, keepAlive, interval, batch, attempts, minRetry, maxRetry int64) {
		opts := sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Duration(ttl), RenewInterval: time.Duration(renew), MaxBackoff: time.Duration(maxBackoff)}}
		popts := sqllock.PessimisticOptions{KeepAlive: time.Duration(keepAlive)}
		ropts := sqllock.ReaperOptions{Interval: time.Duration(interval), BatchSize: int(batch)}
		retry := rowlock.RetryOptions{Attempts: int(attempts), MinBackoff: time.Duration(minRetry), MaxBackoff: time.Duration(maxRetry)}
		for _, d := range []dialect.Dialect{pg, my} {
			_, err := sqllock.NewTable(d, opts)
			checkOptions(t, "NewTable", opts, err, lockerOptionsOK(opts))
			_, err = sqllock.NewOptimistic(d, optimisticOptions(opts))
			checkOptions(t, "NewOptimistic", opts, err, lockerOptionsOK(opts))
			_, err = sqllock.NewPessimistic(d, popts)
			checkOptions(t, "NewPessimistic", popts, err, popts.KeepAlive == 0 || popts.KeepAlive >= time.Millisecond)
			_, err = sqllock.NewReaper(d, ropts)
			checkOptions(t, "NewReaper", ropts, err, ropts.Interval >= 0 && ropts.BatchSize >= 0)
		}
		ran := 0
		err := rowlock.RetryOnConflict(context.Background(), retry, func(context.Context) error {
			ran++
			return nil
		})
		ok := retryOptionsOK(retry)
		checkOptions(t, "RetryOnConflict", retry, err, ok)
		if want := map[bool]int{true: 1, false: 0}[ok]; ran != want {
			t.Fatalf("RetryOnConflict(%+v) ran fn %d times, want %d", retry, ran, want)
		}
		if !ok {
			// Refused before a transaction is begun: the pool is never used.
			err := rowlock.InTx(context.Background(), pg, rowlock.TxOptions{Retry: retry}, func(context.Context, *sql.Tx) error {
				return errors.New("fn ran")
			})
			checkOptions(t, "InTx", retry, err, false)
		}
	})
}

// lockerOptionsOK is the documented rule for the lease options: no negative
// duration; TTL (default 30s) at least 10ms; TTL >= 3 x RenewInterval
// (default TTL/3); any MaxBackoff.
func lockerOptionsOK(o sqllock.TableOptions) bool {
	if o.TTL < 0 || o.RenewInterval < 0 || o.MaxBackoff < 0 {
		return false
	}
	ttl := o.TTL
	if ttl == 0 {
		ttl = 30 * time.Second
	}
	// TTL >= 3 x RenewInterval, computed without overflow.
	return ttl >= 10*time.Millisecond && o.RenewInterval <= ttl/3
}

// retryOptionsOK is the documented rule for RetryOptions: nothing
// negative, and MaxBackoff (default 100ms, or MinBackoff if larger) not
// below MinBackoff (default 1ms).
func retryOptionsOK(o rowlock.RetryOptions) bool {
	if o.Attempts < 0 || o.MinBackoff < 0 || o.MaxBackoff < 0 {
		return false
	}
	minBackoff := o.MinBackoff
	if minBackoff == 0 {
		minBackoff = time.Millisecond
	}
	return o.MaxBackoff == 0 || o.MaxBackoff >= minBackoff
}

// checkOptions fails t unless err is nil when ok, and wraps
// ErrInvalidOptions (and no other sentinel) when not.
func checkOptions(t *testing.T, what string, opts any, err error, ok bool) {
	t.Helper()
	switch {
	case ok && err != nil:
		t.Fatalf("%s(%+v) = %v, want success", what, opts, err)
	case !ok && !errors.Is(err, sqllock.ErrInvalidOptions):
		t.Fatalf("%s(%+v) = %v, want ErrInvalidOptions", what, opts, err)
	case !ok && (errors.Is(err, sqllock.ErrNilDB) || errors.Is(err, sqllock.ErrUnsupported)):
		t.Fatalf("%s(%+v) = %v: wraps another sentinel too", what, opts, err)
	}
}

// misspelt observes nothing: its method is named after no interface of
// package observe (AcquiredObserver's is Acquired).
type misspelt struct{}

func (misspelt) Aquired(context.Context, observe.AcquiredEvent) {}

// hears implements one interface of package observe.
type hears struct{}

func (hears) Acquired(context.Context, observe.AcquiredEvent) {}

// An observer that implements none of package observe's interfaces (a
// misspelt method) would hear nothing: every constructor that takes one
// refuses it, with errors wrapping ErrInvalidOptions and
// observe.ErrNoInterface; one that implements an interface is taken.
func TestObserverOfNoInterfaceRefused(t *testing.T) {
	t.Parallel()
	db, _ := openSQLite(t)
	d, err := sqlite.New(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		make func(obs observe.Observer) error
	}{
		{"NewTable", func(obs observe.Observer) error {
			_, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{Observer: obs}})
			return err
		}},
		{"NewOptimistic", func(obs observe.Observer) error {
			_, err := sqllock.NewOptimistic(d, sqllock.OptimisticOptions{LeaseOptions: sqllock.LeaseOptions{Observer: obs}})
			return err
		}},
		{"NewSemaphore", func(obs observe.Observer) error {
			_, err := sqllock.NewSemaphore(d, 2, sqllock.SemaphoreOptions{LeaseOptions: sqllock.LeaseOptions{Observer: obs}})
			return err
		}},
		{"NewRWLock", func(obs observe.Observer) error {
			_, err := sqllock.NewRWLock(d, sqllock.LeaseOptions{Observer: obs})
			return err
		}},
		{"NewElection", func(obs observe.Observer) error {
			_, err := sqllock.NewElection(d, sqllock.LeaseOptions{Observer: obs})
			return err
		}},
		{"NewReaper", func(obs observe.Observer) error {
			_, err := sqllock.NewReaper(d, sqllock.ReaperOptions{Observer: obs})
			return err
		}},
		{"rowlock.RetryOnConflict", func(obs observe.Observer) error {
			return rowlock.RetryOnConflict(ctxT(t), rowlock.RetryOptions{Observer: obs}, func(context.Context) error { return nil })
		}},
	} {
		if err := tc.make(misspelt{}); !errors.Is(err, sqllock.ErrInvalidOptions) || !errors.Is(err, observe.ErrNoInterface) {
			t.Errorf("%s with an observer of no interface: %v, want ErrInvalidOptions and observe.ErrNoInterface", tc.name, err)
		}
		if err := tc.make(hears{}); err != nil {
			t.Errorf("%s with an observer: %v", tc.name, err)
		}
	}
}
