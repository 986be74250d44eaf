// Package dsn opens a dialect from one data source name, in the forms that
// the sqllock command accepts, so that a program configured by one string
// (an environment variable, say) takes what the command takes:
//
//	postgres://user:pass@host:5432/db?sslmode=disable   PostgreSQL URL (also postgresql://)
//	host=db user=app dbname=app sslmode=disable          pgx keyword/value DSN
//	mysql://user:pass@host:3306/db?param=value          MySQL/MariaDB URL
//	mysql://user:pass@tcp(host:3306)/db?param=value     go-sql-driver/mysql DSN after mysql://
//	user:pass@tcp(host:3306)/db?param=value             go-sql-driver/mysql DSN
//	tidb://...                                          either MySQL form, for TiDB (mysql.NewTiDB)
//	sqlite:/path/to/file.db                             SQLite file (also sqlite:///path)
//
// A PostgreSQL URL or keyword/value DSN may carry schema=NAME, and a MySQL
// one the database: the schema sqllock's tables live in. The schema
// parameter is read here and never sent to the server, so it works
// through PgBouncer, which refuses search_path as a startup parameter.
package dsn

import (
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
)

// Error is a DSN that cannot be read. Its message shows the DSN with its
// passwords hidden.
type Error struct{ msg string }

func (e *Error) Error() string { return e.msg }

// Config is a parsed DSN.
type Config struct {
	// Driver is "postgres", "mysql" or "sqlite".
	Driver string
	// Schema is the schema (PostgreSQL) or database (MySQL) that holds
	// sqllock's tables, if the DSN names one: the schema parameter of a
	// PostgreSQL DSN, the database of a MySQL one. "" for the connection's
	// default.
	Schema   string
	Postgres *pgx.ConnConfig // Driver "postgres"
	MySQL    *gomysql.Config // Driver "mysql"
	Path     string          // Driver "sqlite": the file
	// TiDB says the DSN was tidb://: Driver "mysql", opened with
	// mysql.NewTiDB.
	TiDB     bool
	redacted string
}

// String returns the DSN with its passwords hidden.
func (c *Config) String() string { return c.redacted }

// mysqlNative matches the go-sql-driver/mysql DSN form:
// [user[:pass]@][net[(addr)]]/db[?params].
var mysqlNative = regexp.MustCompile(`^(?:[^/]*@)?(?:tcp|tcp4|tcp6|unix|udp)\(`)

// pgKeyword matches the start of a pgx keyword/value DSN.
var pgKeyword = regexp.MustCompile(`^\s*[a-z_]+\s*=`)

// Parse reads s in one of the forms of the package documentation. Its
// errors are *Error.
func Parse(s string) (*Config, error) {
	if rest, ok := strings.CutPrefix(s, "tidb://"); ok {
		c, err := Parse("mysql://" + rest)
		if err != nil {
			return nil, err
		}
		c.TiDB, c.redacted = true, Redact(s)
		return c, nil
	}
	c := &Config{redacted: Redact(s)}
	switch {
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		u, err := url.Parse(s)
		if err == nil {
			q := u.Query()
			if q.Has("schema") {
				c.Schema = q.Get("schema")
				q.Del("schema")
				u.RawQuery = q.Encode()
				s = u.String()
			}
		}
		return c, c.parsePostgres(s)
	case strings.HasPrefix(s, "mysql://"):
		rest := strings.TrimPrefix(s, "mysql://")
		if mysqlNative.MatchString(rest) || strings.HasPrefix(rest, "/") {
			return c, c.parseMySQLNative(s, rest)
		}
		cfg, err := parseMySQL(s)
		if err != nil {
			return nil, err
		}
		c.Driver, c.MySQL, c.Schema = "mysql", cfg, cfg.DBName
		return c, nil
	case strings.HasPrefix(s, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(s, "sqlite:"), "//")
		if path == "" {
			return nil, &Error{"sqlite: DSN needs a file path, as in sqlite:/var/lib/sqllock.db"}
		}
		c.Driver, c.Path = "sqlite", path
		return c, nil
	case mysqlNative.MatchString(s):
		return c, c.parseMySQLNative(s, s)
	case !strings.Contains(s, "://") && pgKeyword.MatchString(s):
		if schema, rest, ok := cutKeyword(s, "schema"); ok {
			c.Schema, s = schema, rest
		}
		return c, c.parsePostgres(s)
	}
	return nil, &Error{fmt.Sprintf("unsupported DSN %q: want postgres://..., host=... (pgx keywords), mysql://..., user@tcp(host:port)/db (go-sql-driver/mysql), tidb://... or sqlite:PATH", c.redacted)}
}

func (c *Config) parsePostgres(s string) error {
	cfg, err := pgx.ParseConfig(s)
	if err != nil {
		return badDSN("postgres", s, pgxDetail(err))
	}
	c.Driver, c.Postgres = "postgres", cfg
	return nil
}

func (c *Config) parseMySQLNative(dsn, native string) error {
	cfg, err := gomysql.ParseDSN(native)
	if err != nil {
		return badDSN("mysql", dsn, err.Error())
	}
	if cfg.DBName == "" {
		return &Error{fmt.Sprintf("bad mysql DSN %q: it needs a database, as in root@tcp(127.0.0.1:3306)/app", c.redacted)}
	}
	c.Driver, c.MySQL, c.Schema = "mysql", cfg, cfg.DBName
	return nil
}

// cutKeyword removes key=value from a keyword/value DSN s.
func cutKeyword(s, key string) (value, rest string, ok bool) {
	fields := strings.Fields(s)
	for i, f := range fields {
		if v, found := strings.CutPrefix(f, key+"="); found {
			return strings.Trim(v, "'"), strings.Join(append(fields[:i:i], fields[i+1:]...), " "), true
		}
	}
	return "", s, false
}

// Open opens c's pool and dialect, with sqllock's tables in schema if it
// is not "", else in c.Schema if set (a MySQL DSN's database is the
// connection's default anyway), else the connection's default. An SQLite
// file's directory is created if needed. It does not connect.
func (c *Config) Open(schema string) (*sql.DB, dialect.Dialect, error) {
	if schema == "" && c.Driver == "postgres" {
		schema = c.Schema
	}
	switch c.Driver {
	case "postgres":
		var opts []postgres.Option
		if schema != "" {
			opts = append(opts, postgres.WithSchema(schema))
		}
		db := stdlib.OpenDB(*c.Postgres)
		d, err := postgres.New(db, opts...)
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		return db, d, nil
	case "mysql":
		var opts []mysql.Option
		if schema != "" {
			opts = append(opts, mysql.WithDatabase(schema))
		}
		conn, err := gomysql.NewConnector(c.MySQL)
		if err != nil {
			return nil, nil, badDSN("mysql", c.redacted, err.Error())
		}
		db := sql.OpenDB(conn)
		var d dialect.Dialect
		if c.TiDB {
			d, err = mysql.NewTiDB(db, opts...)
		} else {
			d, err = mysql.New(db, opts...)
		}
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		return db, d, nil
	case "sqlite":
		if schema != "" {
			return nil, nil, &Error{"an SQLite file has no schemas: the file is the database"}
		}
		if dir := filepath.Dir(c.Path); !isDir(dir) {
			return nil, nil, &Error{fmt.Sprintf("the directory of the SQLite file, %s, does not exist: create it, or give another sqlite:PATH", dir)}
		}
		db, err := sqlite.Open(c.Path)
		if err != nil {
			return nil, nil, err
		}
		d, err := sqlite.New(db)
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		return db, d, nil
	}
	return nil, nil, errors.New("dsn: Config not made by Parse")
}

// isDir reports whether path is an existing directory.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// badDSN is the error for a DSN of kind that does not parse: the DSN,
// redacted, and detail, what the parser said, unless detail shows the
// DSN's password.
func badDSN(kind, dsn, detail string) error {
	msg := fmt.Sprintf("bad %s DSN %q", kind, Redact(dsn))
	if detail != "" && !showsPassword(detail, dsn) {
		msg += ": " + detail
	}
	return &Error{msg}
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

// parseMySQL reads mysql://user:pass@host:port/db?param=value as
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
		return nil, &Error{"bad mysql DSN: it needs a database, as in mysql://root@127.0.0.1:3306/app"}
	}
	return c, nil
}

// redactedPassword replaces passwords in messages.
const redactedPassword = "xxxxx"

// Redact hides a DSN's passwords, for messages: the password of a URL's
// user, and the values of the password and sslpassword query parameters
// (which pgx reads). A DSN that net/url cannot parse is redacted by its
// text: everything between the ':' after the user and the last '@' of the
// authority is hidden. In a DSN that is neither a URL nor an SQLite path,
// such as pgx's "host=db password=secret", the values of password keywords
// are hidden.
func Redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redactedPassword)
			u.RawQuery = redactQuery(u.RawQuery)
			return u.String()
		}
	}
	if mysqlNative.MatchString(dsn) {
		// user:pass@tcp(...): the password runs from the first ':' to the
		// last '@' before the address.
		addr := mysqlNative.FindStringIndex(dsn)[1]
		if at := strings.LastIndexByte(dsn[:addr], '@'); at >= 0 {
			if colon := strings.IndexByte(dsn[:at], ':'); colon >= 0 {
				dsn = dsn[:colon+1] + redactedPassword + dsn[at:]
			}
		}
		if q := strings.IndexByte(dsn, '?'); q >= 0 {
			dsn = dsn[:q+1] + redactQuery(dsn[q+1:])
		}
		return dsn
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
