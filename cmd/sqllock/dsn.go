package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
)

// target is an opened database: its pool and dialect.
type target struct {
	db       *sql.DB
	d        dialect.Dialect
	dsn      string // as given, for messages (password redacted)
	embedded bool   // a local SQLite file: migrated on first use
}

func (t *target) Close() error { return t.db.Close() }

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
func openTarget(ctx context.Context, dsn string) (*target, error) {
	t := &target{dsn: redact(dsn)}
	var err error
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		if t.db, err = sql.Open("pgx", dsn); err == nil {
			t.d, err = postgres.New(t.db)
		}
	case strings.HasPrefix(dsn, "mysql://"):
		var cfg string
		if cfg, err = mysqlConfig(dsn); err != nil {
			return nil, usageError{err.Error()}
		}
		if t.db, err = sql.Open("mysql", cfg); err == nil {
			t.d, err = mysql.New(t.db)
		}
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//")
		if path == "" {
			return nil, usageError{"sqlite: DSN needs a file path, as in sqlite:/var/lib/sqllock.db"}
		}
		t.embedded = true
		t.db, t.d, err = openSQLite(path)
	default:
		return nil, usageError{fmt.Sprintf("unsupported DSN %q: want postgres://, mysql:// or sqlite:PATH", t.dsn)}
	}
	if err != nil {
		return nil, unavailable("%s: %v", t.dsn, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := t.db.PingContext(pctx); err != nil {
		t.db.Close()
		return nil, unavailable("cannot reach %s: %v", t.dsn, err)
	}
	return t, nil
}

// mysqlConfig turns mysql://user:pass@host:port/db?param=value into
// go-sql-driver/mysql's DSN. Parameters pass through to the driver.
func mysqlConfig(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("bad mysql DSN: %v", err)
	}
	c := gomysql.NewConfig()
	if u.User != nil {
		c.User = u.User.Username()
		c.Passwd, _ = u.User.Password()
	}
	host := u.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "3306")
	}
	c.Net, c.Addr = "tcp", host
	c.DBName = strings.TrimPrefix(u.Path, "/")
	if c.DBName == "" {
		return "", errors.New("bad mysql DSN: it needs a database, as in mysql://root@127.0.0.1:3306/app")
	}
	base := c.FormatDSN()
	if u.RawQuery == "" {
		return base, nil
	}
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	full := base + sep + u.RawQuery
	if _, err := gomysql.ParseDSN(full); err != nil {
		return "", fmt.Errorf("bad mysql DSN parameters: %v", err)
	}
	return full, nil
}

// redact hides a DSN's password.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// ready migrates an embedded database on first use. A server's schema is
// the operator's to create (sqllock migrate up); its absence surfaces as
// sqllock.ErrSchemaMissing, which fail turns into the command that fixes it.
func (t *target) ready(ctx context.Context) error {
	if !t.embedded {
		return nil
	}
	if err := sqllock.Migrate(ctx, t.d); err != nil {
		return unavailable("migrating %s: %v", t.dsn, err)
	}
	return nil
}

// fail describes err for the operator, adding the fix for a missing schema.
func (t *target) fail(err error) error {
	if errors.Is(err, sqllock.ErrSchemaMissing) {
		return unavailable("the sqllock schema is missing or outdated in %s: run `sqllock migrate up --dsn '%s'`", t.dsn, t.dsn)
	}
	return err
}
