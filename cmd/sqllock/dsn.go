package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	dsnpkg "github.com/sqllock/sqllock/dsn"
)

// target is an opened database: its pool and dialect.
type target struct {
	db       *sql.DB
	d        dialect.Dialect
	dsn      string // as given, for messages (password redacted)
	schema   string // --schema, for messages ("" if not given)
	embedded bool   // a local SQLite file: migrated on first use
}

// Close stops what the dialect runs in the background (PostgreSQL's
// listening connection) and closes the pool.
func (t *target) Close() error {
	var err error
	if c, ok := t.d.(interface{ Close(context.Context) error }); ok {
		err = c.Close(context.Background())
	}
	return errors.Join(err, t.db.Close())
}

// defaultDSN is where the lock database lives when neither --dsn nor
// SQLLOCK_DSN says: an SQLite file in the user's state directory.
func defaultDSN() string {
	return "sqlite:" + filepath.Join(stateDir(), "sqllock", "sqllock.db")
}

// stateDir is $XDG_STATE_HOME, else ~/.local/state, else the temporary
// directory.
func stateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return d
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state")
	}
	return os.TempDir()
}

// unavailableError is a database that cannot be reached or has no schema
// (exit status 69).
type unavailableError struct{ msg string }

func (e unavailableError) Error() string { return e.msg }

func unavailable(format string, args ...any) error {
	return unavailableError{fmt.Sprintf(format, args...)}
}

// openTarget parses dsn, opens its pool and checks that the server answers.
// schema, if not "", is where sqllock's tables are (--schema). A DSN that
// cannot be parsed is a usage error; one that parses but whose server does
// not answer makes the database unavailable.
func openTarget(ctx context.Context, dsn, schema string) (*target, error) {
	if dsn == "" {
		return nil, usageError{msg: "no database: give --dsn DSN or set SQLLOCK_DSN (sqlite:PATH for locks of this host only)"}
	}
	if dsn == defaultDSN() {
		// demo and bench's own file (localDSNFlag): its directory is
		// made for it.
		if err := os.MkdirAll(filepath.Dir(strings.TrimPrefix(dsn, "sqlite:")), 0o700); err != nil {
			return nil, unavailable("%s: %v", dsn, err)
		}
	}
	cfg, err := dsnpkg.Parse(dsn)
	if err != nil {
		return nil, usageFrom(err)
	}
	if schema != "" {
		if err := dialect.ValidateIdentifier(schema); err != nil {
			return nil, usageError{msg: fmt.Sprintf("--schema %q: %v", schema, err)}
		}
	}
	if cfg.Driver == "postgres" {
		// Unnamed statements, one round trip each: nothing relies on a
		// server-side prepared statement, so a plain DSN works through
		// PgBouncer in any pool mode. The command runs few statements;
		// the parse and plan each costs the server do not matter.
		cfg.Postgres.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	t := &target{dsn: cfg.String(), schema: schema, embedded: cfg.Driver == "sqlite"}
	t.db, t.d, err = cfg.Open(schema)
	if err != nil {
		var de *dsnpkg.Error
		if errors.As(err, &de) || errors.Is(err, dialect.ErrInvalidIdentifier) {
			return nil, usageError{msg: fmt.Sprintf("%s: %v", t.dsn, err)}
		}
		return nil, unavailable("%s: %v", t.dsn, err)
	}
	// The dialect bounds each of its statements by the same timeout (its
	// WithStatementTimeout, left at the default).
	pctx, cancel := context.WithTimeout(ctx, dialect.DefaultStatementTimeout)
	defer cancel()
	if err := t.db.PingContext(pctx); err != nil {
		t.Close()
		return nil, unavailable("cannot reach %s: %v", t.dsn, err)
	}
	return t, nil
}

// usageFrom turns a DSN that cannot be read into a usage error.
func usageFrom(err error) error {
	var de *dsnpkg.Error
	if errors.As(err, &de) {
		return usageError{msg: de.Error()}
	}
	return err
}

// redact hides a DSN's passwords, for messages.
func redact(dsn string) string { return dsnpkg.Redact(dsn) }

// mysqlConfig turns a mysql:// DSN into the go-sql-driver/mysql DSN that
// says the same.
func mysqlConfig(dsn string) (string, error) {
	c, err := dsnpkg.Parse(dsn)
	if err != nil {
		return "", usageFrom(err)
	}
	if c.Driver != "mysql" {
		return "", usageError{msg: fmt.Sprintf("%s is not a MySQL DSN", c)}
	}
	return c.MySQL.FormatDSN(), nil
}

// schemaFlag adds --schema.
func schemaFlag(fs *flag.FlagSet) *string {
	return fs.String("schema", "", "PostgreSQL `schema` (MySQL: database) of the sqllock tables, instead of the DSN's schema parameter or the connection's default; read by sqllock, never sent to the server")
}

// timeout makes err, of a command that ran into its --timeout d, say so.
func (t *target) timeout(ctx context.Context, d time.Duration, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return unavailable("gave up after --timeout %v: %s", d, message(err))
	}
	return err
}

// openReady is openTarget followed by ready: the target of a command that
// uses the locks' tables. On an error the target is closed.
func openReady(ctx context.Context, dsn, schema string) (*target, error) {
	t, err := openTarget(ctx, dsn, schema)
	if err != nil {
		return nil, err
	}
	if err := t.ready(ctx); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// hasSchema returns an error wrapping sqllock.ErrSchemaMissing when the
// lock table is missing (t.fail turns it into the command that fixes it).
func (t *target) hasSchema(ctx context.Context) error {
	l, err := sqllock.NewTable(t.d, sqllock.TableOptions{})
	if err == nil {
		_, err = l.List(ctx)
	}
	return err
}

// ready migrates an embedded database on first use. A server's schema is
// the operator's to create (sqllock migrate up); its absence surfaces as
// sqllock.ErrSchemaMissing, which fail turns into the command that fixes it.
func (t *target) ready(ctx context.Context) error {
	// A dirty schema (a migration failed half-way) needs an operator:
	// the statements may meet tables in any state.
	if v, dirty := t.dirty(ctx); dirty {
		return dirtyError(t, v)
	}
	if !t.embedded {
		return nil
	}
	if err := sqllock.Migrate(ctx, t.d); err != nil {
		return unavailable("migrating %s: %v", t.dsn, err)
	}
	return nil
}

// dirty reads the schema's version and dirty flag with one query (not
// through golang-migrate, which would take the migration lock and create
// its table). A missing table, or any failure, reads as clean: the
// statements that follow meet it and say so.
func (t *target) dirty(ctx context.Context) (uint, bool) {
	var (
		v     uint
		dirty bool
	)
	if err := t.db.QueryRowContext(ctx, "SELECT version, dirty FROM "+t.migrationsTable()+" LIMIT 1").Scan(&v, &dirty); err != nil {
		return 0, false
	}
	return v, dirty
}

// migrationsTable is the qualified name of the table of the schema's
// version (validated identifiers: the dialects refuse others).
func (t *target) migrationsTable() string {
	table := "sqllock_schema_migrations"
	switch d := t.d.(type) {
	case interface{ Schema() string }: // PostgreSQL
		if s := d.Schema(); s != "" {
			table = `"` + s + `".` + table
		}
	case interface{ Database() string }: // MySQL, MariaDB, TiDB
		if db := d.Database(); db != "" {
			table = "`" + db + "`." + table
		}
	}
	return table
}

// fail describes err for the operator, adding the fix for a missing schema.
func (t *target) fail(err error) error {
	if errors.Is(err, sqllock.ErrSchemaMissing) {
		where, flags := t.dsn, fmt.Sprintf("--dsn '%s'", t.dsn)
		if t.schema != "" {
			where += " (schema " + t.schema + ")"
			flags += " --schema " + t.schema // a validated identifier: no quoting needed
		}
		return unavailable("the sqllock schema is missing or outdated in %s: run `sqllock migrate up %s`", where, flags)
	}
	return err
}
