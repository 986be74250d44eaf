package dialecttest

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/internal/testutil"
)

// Schema and database names are plain identifiers (see
// dialect.ValidateIdentifier): anything else is refused by the constructor
// with ErrInvalidIdentifier, before it could reach SQL text.
func checkIdentifiers(t *testing.T, h Harness) {
	if h.WithNamespace == nil {
		t.Skip("the dialect has no schemas or databases to name")
	}
	for _, name := range []string{"sqllock", "_x", "Locks_2", strings.Repeat("s", dialect.MaxIdentifierLen)} {
		if err := h.WithNamespace(name); err != nil {
			t.Errorf("namespace %q: %v, want it accepted", name, err)
		}
	}
	for _, name := range []string{
		"", "1abc", "a-b", "a.b", "a b", `a"b`, "a`b", "a'b", "a;b", `a\b`, "é",
		"x\x00", strings.Repeat("s", dialect.MaxIdentifierLen+1),
	} {
		if err := h.WithNamespace(name); !errors.Is(err, dialect.ErrInvalidIdentifier) {
			t.Errorf("namespace %q: %v, want ErrInvalidIdentifier", name, err)
		}
	}
}

// The dialect names itself, and the version its migration driver finds
// recorded (by the harness's migration) is the newest of its migration
// files.
func checkMigrations(t *testing.T, e *env) {
	d := e.Dialect
	if d.Name() == "" || d.DB() == nil {
		t.Fatalf("Name %q, DB %v", d.Name(), d.DB())
	}
	newest := uint64(0)
	ups, downs := 0, 0
	err := fs.WalkDir(d.Migrations(), ".", func(path string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		v, rest, ok := strings.Cut(path, "_")
		n, verr := strconv.ParseUint(v, 10, 64)
		switch {
		case !ok || verr != nil || strings.Contains(path, "/"):
			t.Errorf("migration file %q is not named VERSION_TITLE.up.sql or .down.sql at the root", path)
		case strings.HasSuffix(rest, ".up.sql"):
			ups++
			newest = max(newest, n)
		case strings.HasSuffix(rest, ".down.sql"):
			downs++
		default:
			t.Errorf("migration file %q is neither .up.sql nor .down.sql", path)
		}
		return nil
	})
	e.must(err, "reading the migrations")
	if ups == 0 || ups != downs {
		t.Fatalf("%d up and %d down migrations", ups, downs)
	}
	conn, err := d.DB().Conn(e.ctx)
	e.must(err, "conn")
	drv, err := d.MigrationDriver(e.ctx, conn)
	e.must(err, "MigrationDriver")
	v, dirty, err := drv.Version()
	if cerr := drv.Close(); err == nil {
		err = cerr
	}
	e.must(err, "migration driver")
	if v < 0 || uint64(v) != newest || dirty {
		t.Fatalf("migration driver reads version %d (dirty %v), want %d, the newest file", v, dirty, newest)
	}
}

// The dialect never closes its pool: neither its Close, if it has one, nor
// a migration driver, whose Close (or failure to be made) closes the one
// connection it was given.
func checkPoolNotClosed(t *testing.T, e *env) {
	d := e.Open(t, 0)
	ping := func(what string) {
		t.Helper()
		if err := d.DB().PingContext(e.ctx); err != nil {
			t.Fatalf("the pool after %s: %v", what, err)
		}
	}
	connClosed := func(what string, conn *sql.Conn) {
		t.Helper()
		if err := conn.PingContext(e.ctx); !errors.Is(err, sql.ErrConnDone) {
			t.Fatalf("the connection after %s: %v, want it closed", what, err)
		}
	}

	conn, err := d.DB().Conn(e.ctx)
	e.must(err, "conn")
	drv, err := d.MigrationDriver(e.ctx, conn)
	e.must(err, "MigrationDriver")
	e.must(drv.Close(), "closing the migration driver")
	connClosed("closing the migration driver", conn)
	ping("closing a migration driver")

	cancelled, cancel := context.WithCancel(e.ctx)
	cancel()
	conn, err = d.DB().Conn(e.ctx)
	e.must(err, "conn")
	if drv, err := d.MigrationDriver(cancelled, conn); err == nil {
		e.must(drv.Close(), "closing the migration driver")
	}
	connClosed("a migration driver on a cancelled context", conn)
	ping("a migration driver on a cancelled context")

	tb := &table{name: Locks, stmts: e.tables(d).Locks}
	token, err := e.tables(d).Locks.Acquire(e.ctx, dialect.AcquireParams{Name: "pool", Owner: "o", TTL: long})
	e.must(err, "Acquire")
	e.release(tb, dialect.Lease{Name: "pool", Owner: "o", Token: token}, true)
	if c, ok := d.(interface{ Close(context.Context) error }); ok {
		e.must(c.Close(e.ctx), "Close")
		e.must(c.Close(e.ctx), "a second Close")
	}
	ping("the dialect was used and closed")
}

// With every connection of the pool in use, each statement that needs one
// fails once its context ends, with an error wrapping ErrPoolExhausted and
// never ErrOutcomeUnknown: nothing was sent.
func checkPoolExhausted(t *testing.T, e *env) {
	d := e.Open(t, 1)
	conn, err := d.DB().Conn(e.ctx) // the pool's only connection
	e.must(err, "conn")
	defer conn.Close()

	const name, owner = "exhausted", "o"
	lease := []dialect.Lease{{Name: name, Owner: owner, Token: 1}}
	ap := dialect.AcquireParams{Name: name, Owner: owner, TTL: long}
	calls := map[string]func(context.Context) error{}
	addLease := func(prefix string, lt sqlrun.LeaseTable) {
		calls[prefix+"RenewMany"] = func(ctx context.Context) error {
			_, err := testutil.Renewed(lt.RenewMany(ctx, lease, long))
			return err
		}
		calls[prefix+"Release"] = func(ctx context.Context) error { _, err := lt.Release(ctx, lease[0], 0); return err }
		calls[prefix+"List"] = func(ctx context.Context) error { _, err := lt.List(ctx); return err }
	}
	lt := e.tables(d).Locks
	addLease("Locks.", lt)
	calls["Locks.Acquire"] = func(ctx context.Context) error { _, err := lt.Acquire(ctx, ap); return err }
	calls["Locks.Remaining"] = func(ctx context.Context) error { _, _, err := lt.Remaining(ctx, name); return err }
	calls["Reap"] = func(ctx context.Context) error { _, err := d.Reap(ctx, dialect.ReapParams{Limit: 10}); return err }
	if vt := e.tables(d).Versions; vt != nil {
		sp := dialect.SwapParams{Name: name, Owner: owner, TTL: long, Version: 1}
		addLease("Versions.", vt)
		calls["Versions.Read"] = func(ctx context.Context) error { _, _, err := vt.Read(ctx, name); return err }
		calls["Versions.Create"] = func(ctx context.Context) error { _, err := vt.Create(ctx, ap); return err }
		calls["Versions.Take"] = func(ctx context.Context) error { _, err := vt.Take(ctx, sp); return err }
		calls["Versions.Reenter"] = func(ctx context.Context) error { _, err := vt.Reenter(ctx, sp); return err }
	}
	if pd := d.Catalogue().Pessimistic; pd != nil && supportsPessimistic(t, e.Dialect) {
		for what, p := range map[string]dialect.RowLockParams{
			"LockRow":         {Name: name},
			"LockRow(Wait)":   {Name: name, Wait: true},
			"LockRow(Shared)": {Name: name, Shared: true},
		} {
			if p.Shared && d.Catalogue().NoSharedRowLock {
				continue
			}
			calls[what] = func(ctx context.Context) error {
				rl, err := pd.LockRow(ctx, p)
				if err == nil {
					_ = rl.Tx.Rollback()
					_ = rl.Close(ctx)
				}
				return err
			}
		}
		calls["BeginTx"] = func(ctx context.Context) error {
			rt, err := pd.BeginTx(ctx, nil, time.Second)
			if err == nil {
				_ = rt.Tx.Rollback()
				_ = rt.Close(ctx)
			}
			return err
		}
	}
	for what, call := range calls {
		ctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
		err := call(ctx)
		cancel()
		notSentErr(t, what, err)
	}
}
