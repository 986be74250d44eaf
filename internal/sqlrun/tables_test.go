package sqlrun

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"testing"

	"github.com/golang-migrate/migrate/v4/database"

	"github.com/sqllock/sqllock/dialect"
)

// fakeDialect is a catalogue alone; its pool is never used.
type fakeDialect struct {
	db  *sql.DB
	cat dialect.Catalogue
}

func (d *fakeDialect) Name() string                                          { return "fake" }
func (d *fakeDialect) DB() *sql.DB                                           { return d.db }
func (d *fakeDialect) Migrations() fs.FS                                     { return nil }
func (d *fakeDialect) Catalogue() dialect.Catalogue                          { return d.cat }
func (d *fakeDialect) Reap(context.Context, dialect.ReapParams) (int, error) { return 0, nil }
func (d *fakeDialect) MigrationDriver(context.Context, *sql.Conn) (database.Driver, error) {
	return nil, dialect.ErrUnsupported
}

func fakeCatalogue() dialect.Catalogue {
	return dialect.Catalogue{
		Locks: &dialect.LockSQL{Acquire: dialect.Q(`SELECT :name, :owner, :ttl`),
			Leader: dialect.Q(`SELECT :name`)},
		Versions: &dialect.VersionSQL{Create: dialect.Q(`SELECT :name`)},
		Hooks:    dialect.Hooks{Wrap: func(err error) error { return err }},
		Cache:    new(dialect.Cache),
	}
}

// Open builds a catalogue's tables once, hands each caller a copy of its
// own, and builds anew for a copy of the catalogue whose declarations
// differ.
func TestOpenBuildsOnce(t *testing.T) {
	d := &fakeDialect{db: &sql.DB{}, cat: fakeCatalogue()}
	a, err := Open(d)
	if err != nil {
		t.Fatal(err)
	}
	if a.Locks == nil || a.Versions == nil || a.Elections == nil || a.Multi != nil || a.Semaphores != nil {
		t.Fatalf("tables %+v: want Locks, Versions and Elections alone", a)
	}
	a.Locks = nil // the caller's copy
	b, err := Open(d)
	if err != nil {
		t.Fatal(err)
	}
	if b.Versions != a.Versions || b.Locks == nil {
		t.Fatalf("second Open: %+v, want the first's tables", b)
	}

	wrapped := &fakeDialect{db: d.db, cat: d.cat}
	wrapped.cat.Versions = nil // a wrapper hiding a primitive
	c, err := Open(wrapped)
	if err != nil {
		t.Fatal(err)
	}
	if c.Versions != nil || c.Locks == b.Locks {
		t.Fatalf("Open of a changed catalogue: %+v, want tables of its own without Versions", c)
	}
	if again, err := Open(d); err != nil || again.Versions != b.Versions {
		t.Fatal("the changed catalogue's tables replaced the dialect's")
	}
}

// A catalogue the runner cannot build is refused, with the reason.
func TestBuildRefuses(t *testing.T) {
	cat := fakeCatalogue()
	cat.Wrap = nil
	if _, err := Build(&sql.DB{}, cat); !errors.Is(err, dialect.ErrInvalidOptions) {
		t.Errorf("no Wrap: %v, want ErrInvalidOptions", err)
	}
	cat = fakeCatalogue()
	cat.Versions.Read = dialect.Q(`SELECT :nope`)
	if _, err := Build(&sql.DB{}, cat); err == nil {
		t.Error("a statement with an unknown parameter was built")
	}
}
