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
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

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
// A DSN that cannot be parsed is a usage error; one that parses but whose
// server does not answer makes the database unavailable.
func openTarget(ctx context.Context, dsn string) (*target, error) {
	t := &target{dsn: redact(dsn)}
	var err error
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		cfg, perr := pgx.ParseConfig(dsn)
		if perr != nil {
			return nil, badDSN("postgres", dsn, pgxDetail(perr))
		}
		t.db = stdlib.OpenDB(*cfg)
		t.d, err = postgres.New(t.db)
	case strings.HasPrefix(dsn, "mysql://"), strings.HasPrefix(dsn, "tidb://"):
		cfg, merr := parseMySQL(dsn)
		if merr != nil {
			return nil, merr
		}
		conn, cerr := gomysql.NewConnector(cfg)
		if cerr != nil {
			return nil, badDSN("mysql", dsn, cerr.Error())
		}
		t.db = sql.OpenDB(conn)
		if strings.HasPrefix(dsn, "tidb://") {
			t.d, err = mysql.NewTiDB(t.db)
		} else {
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
		return nil, usageError{fmt.Sprintf("unsupported DSN %q: want postgres://, mysql://, tidb:// or sqlite:PATH", t.dsn)}
	}
	if err != nil {
		if t.db != nil {
			t.db.Close()
		}
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

// badDSN is the usage error for a DSN of kind that does not parse: the DSN,
// redacted, and detail, what the parser said, unless detail shows the
// DSN's password.
func badDSN(kind, dsn, detail string) error {
	msg := fmt.Sprintf("bad %s DSN %q", kind, redact(dsn))
	if detail != "" && !showsPassword(detail, dsn) {
		msg += ": " + detail
	}
	return usageError{msg}
}

// pgxDetail returns what pgx.ParseConfig's error err says is wrong, without
// the connection string it repeats.
func pgxDetail(err error) string {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return err.Error()
	}
	// pgx writes "cannot parse `CONNSTRING`: MESSAGE (CAUSE)".
	prefix := pgconn.NewParseConfigError(pe.ConnString, "", nil).Error()
	if detail, ok := strings.CutPrefix(err.Error(), prefix); ok {
		return detail
	}
	if cause := pe.Unwrap(); cause != nil {
		return cause.Error()
	}
	return ""
}

// parseMySQL reads mysql://user:pass@host:port/db?param=value (or tidb://...) as
// go-sql-driver/mysql's configuration. The host defaults to 127.0.0.1 and
// the port to 3306; the parameters are the driver's (see its README). The
// command opens the configuration itself, so nothing in the URL is read a
// second time as part of a driver DSN. What the driver's DSN could not say
// (a user name with a ':', a password without a user name) is refused.
// Errors are usage errors.
func parseMySQL(dsn string) (*gomysql.Config, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the rest of a *url.Error is the unredacted URL
		}
		return nil, badDSN("mysql", dsn, err.Error())
	}
	for param := range strings.SplitSeq(u.RawQuery, "&") {
		if key, _, _ := strings.Cut(param, "="); key == "strict" {
			// The driver panics on it.
			return nil, badDSN("mysql", dsn, "go-sql-driver/mysql has no strict parameter any more")
		}
	}
	// Parse the parameters alone. The driver splits its DSN at the last
	// '/', so every '/' in them is escaped: the values the driver unescapes
	// get theirs back, and in the others a '/' is never valid.
	c, err := gomysql.ParseDSN("/?" + strings.ReplaceAll(u.RawQuery, "/", "%2F"))
	if err != nil {
		return nil, badDSN("mysql", dsn, "parameters: "+err.Error())
	}
	// The driver derived TLS settings from its default address; NewConnector
	// derives them again from the real one.
	c.TLS = nil
	if u.User != nil {
		c.User = u.User.Username()
		c.Passwd, _ = u.User.Password()
	}
	switch {
	case strings.Contains(c.User, ":"):
		return nil, badDSN("mysql", dsn, "go-sql-driver/mysql cannot take a user name with a ':'")
	case c.User == "" && c.Passwd != "":
		return nil, badDSN("mysql", dsn, "a password needs a user name")
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "3306"
	}
	c.Net, c.Addr = "tcp", net.JoinHostPort(host, port)
	c.DBName = strings.TrimPrefix(u.Path, "/")
	if c.DBName == "" {
		return nil, usageError{"bad mysql DSN: it needs a database, as in mysql://root@127.0.0.1:3306/app"}
	}
	return c, nil
}

// mysqlConfig turns mysql://user:pass@host:port/db?param=value into the
// go-sql-driver/mysql DSN that says the same (see parseMySQL).
func mysqlConfig(dsn string) (string, error) {
	c, err := parseMySQL(dsn)
	if err != nil {
		return "", err
	}
	return c.FormatDSN(), nil
}

// redactedPassword replaces passwords in messages.
const redactedPassword = "xxxxx"

// redact hides a DSN's passwords, for messages: the password of a URL's
// user, and the values of the password and sslpassword query parameters
// (which pgx reads). A DSN that net/url cannot parse is redacted by its
// text: everything between the ':' after the user and the last '@' of the
// authority is hidden. In a DSN that is neither a URL nor an SQLite path,
// such as pgx's "host=db password=secret", the values of password keywords
// are hidden.
func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redactedPassword)
			u.RawQuery = redactQuery(u.RawQuery)
			return u.String()
		}
	}
	if !strings.Contains(dsn, "://") && !strings.HasPrefix(dsn, "sqlite:") {
		return redactKeywords(dsn)
	}
	s, from := dsn, 0
	if i, j, ok := passwordSpan(dsn); ok {
		s = dsn[:i] + redactedPassword + dsn[j:]
		from = i + len(redactedPassword)
	}
	if q := strings.IndexByte(s[from:], '?'); q >= 0 {
		q += from + 1
		end := len(s)
		if f := strings.IndexByte(s[q:], '#'); f >= 0 {
			end = q + f
		}
		s = s[:q] + redactQuery(s[q:end]) + s[end:]
	}
	return s
}

// passwordSpan returns where the password of dsn's authority starts and
// ends, read leniently from its text: from the first ':' to the last '@'
// before the first '/' after "://". This takes in the password both as
// net/url reads it and as pgx, which ends the user information at its
// first '@', does.
func passwordSpan(dsn string) (start, end int, ok bool) {
	i := strings.Index(dsn, "://")
	if i < 0 {
		return 0, 0, false
	}
	i += len("://")
	authority := dsn[i:]
	if slash := strings.IndexByte(authority, '/'); slash >= 0 {
		authority = authority[:slash]
	}
	at := strings.LastIndexByte(authority, '@')
	colon := strings.IndexByte(authority[:max(at, 0)], ':')
	if at < 0 || colon < 0 || colon+1 == at {
		return 0, 0, false
	}
	return i + colon + 1, i + at, true
}

// redactQuery hides the values of the password and sslpassword parameters
// of the raw query q.
func redactQuery(q string) string {
	params := strings.Split(q, "&")
	for i, p := range params {
		k, _, ok := strings.Cut(p, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			key = k
		}
		if ok && (key == "password" || key == "sslpassword") {
			params[i] = k + "=" + redactedPassword
		}
	}
	return strings.Join(params, "&")
}

// redactKeywords hides the values of the keywords ending in "password" of
// s, a keyword=value DSN: up to the next white space, or a quoted value up
// to its closing quote.
func redactKeywords(s string) string {
	const kw = "password="
	var b strings.Builder
	for {
		i := strings.Index(s, kw)
		if i < 0 {
			break
		}
		i += len(kw)
		b.WriteString(s[:i])
		b.WriteString(redactedPassword)
		s = s[i:]
		end := strings.IndexAny(s, " \t\n\r\v\f")
		if strings.HasPrefix(s, "'") {
			end = -1
			for j := 1; j < len(s); j++ {
				if s[j] == '\\' {
					j++
				} else if s[j] == '\'' {
					end = j + 1
					break
				}
			}
		}
		if end < 0 {
			end = len(s)
		}
		s = s[end:]
	}
	b.WriteString(s)
	return b.String()
}

// showsPassword reports whether msg, a parser's message about dsn, contains
// dsn's password as written or decoded.
func showsPassword(msg, dsn string) bool {
	var secrets []string
	if u, err := url.Parse(dsn); err == nil {
		if pass, _ := u.User.Password(); pass != "" {
			secrets = append(secrets, pass)
		}
	}
	if i, j, ok := passwordSpan(dsn); ok {
		secrets = append(secrets, dsn[i:j])
		if pass, err := url.PathUnescape(dsn[i:j]); err == nil {
			secrets = append(secrets, pass)
		}
	}
	for _, s := range secrets {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
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
