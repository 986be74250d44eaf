package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	dsnpkg "github.com/sqllock/sqllock/dsn"
)

// Bad input at the command line: hostile lock names for `sqllock run`, and
// DSNs.

// hostileRunNames are lock names given to `sqllock run`. NUL bytes cannot
// be in a process's arguments (the library refuses them: see the root
// package's bad-input tests), and a name starting with '-' is read as a
// flag.
var hostileRunNames = []string{
	"'", "''", `"`, `\`, `\'`, `\\'`, "`",
	"'; DROP TABLE sqllock_locks; --",
	`" OR 1=1 --`,
	"`; DROP TABLE sqllock_locks; --",
	"$$", "$1", "%", "_", "%_%", "*", "?", "NULL",
	"\n", "a\nb", "\t", "*/", "/*", "#", ";", " ", "a ",
	"$(touch pwned)", "`touch pwned`", "${SQLLOCK_TOKEN}",
	"ünïcødé ✓", "🔒", "\u202e",
	strings.Repeat("n", sqllock.MaxNameLen),
	strings.Repeat("é", (sqllock.MaxNameLen-1)/2) + "'",
	"", "\xff", "\xc3\x28", "é\xff",
	strings.Repeat("n", sqllock.MaxNameLen+1),
	strings.Repeat("é", (sqllock.MaxNameLen+1)/2),
}

// runProbe is the command `sqllock run` runs under the lock, as sh -c
// runProbe BIN STRATEGY: while the lock is held it tries the same name
// again through the binary (which must exit 75) and lists the held locks,
// then prints the exit status, the listing, and the name it was given.
const runProbe = `"$0" run --strategy "$1" --no-wait "$SQLLOCK_NAME" -- true 2>/dev/null
status=$?
printf '%d\n' "$status"
"$0" locks --json
printf '\n--name--\n%s' "$SQLLOCK_NAME"`

// Every hostile name through `sqllock run`, with every strategy on every
// database: a valid name is held while the command runs (a second run of
// it exits 75), reaches the command byte for byte in SQLLOCK_NAME, and is
// listed byte for byte by `sqllock locks --json`; an invalid one exits 64
// with a one-line error. No name is ever run as shell code. Afterwards no
// lock is held and the tables answer.
func TestBadInputRunNames(t *testing.T) {
	eachStrategy(t, func(t *testing.T, b backend, strategy string) {
		dir := t.TempDir() // where a name run as shell code would leave "pwned"
		for _, name := range hostileRunNames {
			cmd := fastExit(b.cmd(t, "run", "--strategy", strategy, "--no-wait", name, "--", "sh", "-c", runProbe, bin, strategy))
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr, cmd.Dir = &stdout, &stderr, dir
			code := exitStatus(cmd.Run())
			if sqllock.ValidateName(name) != nil {
				if code != exitUsage || !oneLineUsage(stderr.String()) {
					t.Errorf("%s: run %q: exit %d, want %d with a one-line error:\n%s", strategy, name, code, exitUsage, stderr.String())
				}
				continue
			}
			if code != 0 {
				t.Fatalf("%s: run %q: exit %d\n%s", strategy, name, code, stderr.String())
			}
			checkRunProbe(t, strategy, name, stdout.String())
		}
		if _, err := os.Stat(filepath.Join(dir, "pwned")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a lock name ran as shell code: %v", err)
		}
		checkNothingHeld(t, b)
	})
}

// eachStrategy is each with a subtest for every strategy the backend
// supports, each on a backend of its own: the strategies' runs go in
// parallel, and a listing of what is held sees one strategy's locks.
func eachStrategy(t *testing.T, fn func(t *testing.T, b backend, strategy string)) {
	t.Parallel()
	for _, m := range backends {
		t.Run(m.kind, func(t *testing.T) {
			t.Parallel()
			for _, strategy := range strategies(backend{kind: m.kind}) {
				t.Run(strategy, func(t *testing.T) {
					t.Parallel()
					b := m.make(t)
					if err := sqllock.Migrate(ctxT(t), b.d); err != nil {
						t.Fatal(err)
					}
					fn(t, b, strategy)
				})
			}
		})
	}
}

// fastExit removes, for cmd and the processes it starts, the race
// runtime's pause of a second at exit, which would make the hundreds of
// runs of these tests take minutes.
func fastExit(cmd *exec.Cmd) *exec.Cmd {
	cmd.Env = append(cmd.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	return cmd
}

// checkRunProbe checks what runProbe printed while name was held with
// strategy.
func checkRunProbe(t *testing.T, strategy, name, out string) {
	t.Helper()
	head, got, ok := strings.Cut(out, "\n--name--\n")
	if !ok || got != name {
		t.Fatalf("%s: run %q: the command got SQLLOCK_NAME %q", strategy, name, got)
	}
	status, listing, _ := strings.Cut(head, "\n")
	if status != strconv.Itoa(exitNotAcquired) {
		t.Fatalf("%s: a second run of %q while held: exit %s, want %d", strategy, name, status, exitNotAcquired)
	}
	var rows []lockRow
	if err := json.Unmarshal([]byte(listing), &rows); err != nil {
		t.Fatalf("%s: locks --json while %q was held: %v in %q", strategy, name, err, listing)
	}
	if strategy == "pessimistic" && len(rows) == 0 {
		return // MariaDB shows only the row locks some transaction waits for
	}
	if len(rows) != 1 || rows[0].Name != name || rows[0].Strategy != strategy || rows[0].Holds != 1 {
		t.Fatalf("%s: locks --json while %q was held: %+v", strategy, name, rows)
	}
}

// checkNothingHeld fails t unless b's lock tables answer and hold no lock.
func checkNothingHeld(t *testing.T, b backend) {
	t.Helper()
	table, err := sqllock.NewTable(b.d, sqllock.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	optimistic, err := sqllock.NewOptimistic(b.d, sqllock.OptimisticOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []interface {
		List(context.Context) ([]sqllock.LockInfo, error)
	}{table, optimistic} {
		infos, err := l.List(ctxT(t))
		if err != nil || len(infos) != 0 {
			t.Fatalf("held locks afterwards: %+v, %v", infos, err)
		}
	}
}

// oneLineUsage reports whether stderr is a usage error as mainCode prints
// it: the error on one line, then the pointer to help.
func oneLineUsage(stderr string) bool {
	msg, help, ok := strings.Cut(stderr, "\nRun \"sqllock help")
	ok = ok && strings.HasSuffix(help, "\" for usage.\n") && !strings.Contains(help, "\n\n")
	return ok && strings.HasPrefix(msg, "sqllock: ") && !strings.ContainsAny(msg, "\n\r") && !strings.Contains(msg, "goroutine ")
}

// DSNs that name a namespace full of SQL, or carry a password to an
// unreachable server: a server's DSN fails with 69 and a one-line error
// that does not show the password, and leaves the real lock tables alone;
// an SQLite file whose path is full of SQL and URI syntax is created under
// exactly that path.
func TestBadInputDSN(t *testing.T) {
	const hostile = "x\"`'; DROP TABLE sqllock_locks; --"
	const password = "pa:ss@w/rd?#%s3cr3t"
	each(t, func(t *testing.T, b backend) {
		var dsns []string
		switch b.kind {
		case "postgres":
			u, err := url.Parse(b.dsn)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("search_path", hostile)
			u.RawQuery = q.Encode()
			dsns = append(dsns, u.String(), "postgres://nobody:"+url.QueryEscape(password)+"@127.0.0.1:1/none?connect_timeout=2")
		case "mysql":
			u, err := url.Parse(b.dsn)
			if err != nil {
				t.Fatal(err)
			}
			u.Path = "/" + hostile
			dsns = append(dsns, u.String(), "mysql://nobody:"+url.QueryEscape(password)+"@127.0.0.1:1/none?timeout=2s")
		case "sqlite":
			path := filepath.Join(t.TempDir(), hostile+"?mode=ro#%00.db")
			cmd := fastExit(b.cmd(t, "run", "--dsn", "sqlite:"+path, "--no-wait", hostile, "--", "true"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("run on sqlite:%s: %v\n%s", path, err, out)
			}
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("the database file: %v", err)
			}
		}
		for _, dsn := range dsns {
			out, err := fastExit(b.cmd(t, "run", "--dsn", dsn, "--no-wait", hostile, "--", "true")).CombinedOutput()
			msg := strings.TrimSuffix(string(out), "\n")
			if code := exitStatus(err); code != exitUnavailable || strings.ContainsAny(msg, "\n\r") || strings.Contains(msg, "goroutine ") {
				t.Errorf("run --dsn %q: exit %d, want %d with a one-line error:\n%s", dsn, code, exitUnavailable, out)
			}
			if strings.Contains(msg, "s3cr3t") {
				t.Errorf("run --dsn %q shows the password:\n%s", dsn, out)
			}
		}
		checkNothingHeld(t, b)
	})
}

// nativeMySQL matches go-sql-driver/mysql's DSN form, as internal/dsn
// recognises it.
var nativeMySQL = regexp.MustCompile(`^(?:[^/]*@)?(?:tcp|tcp4|tcp6|unix|udp)\(`)

// FuzzParseDSN feeds arbitrary DSNs to the command's DSN handling: redact,
// mysqlConfig, and, where no connection would be made, openTarget and the
// whole command line. Nothing may panic; a DSN the command cannot use
// without connecting is a usage error (exit 64) on one line; no message and
// no redacted DSN shows the password; and what mysqlConfig makes of a URL,
// the driver must read back as that URL's user, password, address and
// database.
func FuzzParseDSN(f *testing.F) {
	for _, s := range []string{
		"", "\x00", "\xff", "postgres", "postgres:", "postgres://", "mysql://", "sqlite:", "sqlite://", "sqlite:x.db",
		"postgres://u:secret@127.0.0.1:5432/db?sslmode=disable&search_path=ops",
		"postgresql://u@h/db", "POSTGRES://u:secret@h/db", " postgres://u:secret@h/db",
		"postgres://u:secret@h/db%zz", "postgres://u:secret@ho st/db", "postgres://u:secret@h:abc/db",
		"mysql://root@127.0.0.1:3306/test", "mysql://u:p%40ss@db/app?parseTime=true",
		"mysql://u:secret@h", "mysql://u:secret@h/", "mysql://u:secret@[::1]:3306/db", "mysql://u:secret@h:/db",
		"mysql://:secret@h/db", "mysql://::/db", "mysql://]/db",
		"mysql://u:secret@h/db%zz", "mysql://u:secret@h/db?x=%zz", "mysql://u:secret@h/db?parseTime=maybe",
		"mysql://u:secret@h/db?parseTime=a%0Ab", "mysql://a%3Ab:secret@h/db", "mysql://u:sec%2Fret@h/db",
		"mysql://u:secret@h/db/x", "mysql://u:secret@h/db?a=@tcp(evil:3306)/x", "mysql://u:secret@h/db?a=/b",
		"mysql://u:secret@h/db';DROP TABLE sqllock_locks;--", "mysql://u:secret@h/db?sql_mode=''';DROP TABLE x;--",
		"postgres://u:secret@h/db?search_path=x\"; DROP TABLE sqllock_locks; --",
		"oracle://u:secret@h/db", "sqlite:'; DROP TABLE sqllock_locks; --",
		"mysql://" + strings.Repeat("u", 4096) + ":secret@h/db",
		"postgres://u:secret@h/" + strings.Repeat("%", 4096),
		strings.Repeat("mysql://", 1024),
		"u:s3cret@tcp(h:3306)/db?password=s3cret",
		"mysql://u:s3cret@tcp(h)/db",
		"u:s3(c)@ret@unix(/tmp/sock)/db",
		"host=h user=u password=s3cret dbname=db schema=x",
		"postgres://u:s3cret@h/db?schema=x%22",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		checkSecret(t, dsn, "redact", redact(dsn))
		cfg, perr := dsnpkg.Parse(dsn)
		if perr != nil {
			checkSecret(t, dsn, "the Parse error", perr.Error())
		}
		if rest, ok := strings.CutPrefix(dsn, "mysql://"); ok && perr == nil && !nativeMySQL.MatchString(rest) && !strings.HasPrefix(rest, "/") {
			checkMySQLConfig(t, dsn, cfg.MySQL.FormatDSN())
		}
		if perr == nil {
			return // openTarget would connect, or create a file
		}
		tg, err := openTarget(context.Background(), dsn, "")
		if tg != nil {
			tg.Close()
		}
		var ue usageError
		if !errors.As(err, &ue) {
			t.Fatalf("openTarget(%q) = %v, want a usage error", clip(dsn), err)
		}
		checkSecret(t, dsn, "the openTarget error", err.Error())
		var stdout, stderr bytes.Buffer
		if code := mainCode(context.Background(), []string{"locks", "--dsn", dsn}, &stdout, &stderr); code != exitUsage || !oneLineUsage(stderr.String()) {
			t.Fatalf("sqllock locks --dsn %q: exit %d, want %d with a one-line error:\n%s", clip(dsn), code, exitUsage, clip(stderr.String()))
		}
		checkSecret(t, dsn, "the command's error", stderr.String())
	})
}

// checkSecret fails t if msg, a message about dsn, shows dsn's password:
// its user:password@ part, as written or percent-decoded, more often than
// the rest of dsn contains it.
func checkSecret(t *testing.T, dsn, what, msg string) {
	t.Helper()
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok || strings.ContainsAny(scheme, "/?#@:") { // then "://" is not after a scheme
		return
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return
	}
	userinfo := authority[:at]
	if _, pass, ok := strings.Cut(userinfo, ":"); !ok || pass == "" || pass == "xxxxx" {
		return
	}
	spellings := []string{userinfo + "@"}
	others := []string{scheme + "://" + rest[at+1:]} // dsn without its user and password
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pass, ok := u.User.Password(); ok && pass != "" && pass != "xxxxx" {
			spellings = append(spellings, u.User.Username()+":"+pass+"@")
		}
		bare := *u
		bare.User = nil
		others = append(others, bare.String())
	}
	for _, s := range spellings {
		allowed := 0
		for _, o := range others {
			allowed = max(allowed, strings.Count(o, s))
		}
		if strings.Count(msg, s) > allowed {
			t.Fatalf("%s for %q shows its password: %q", what, clip(dsn), clip(msg))
		}
	}
}

// checkMySQLConfig fails t unless cfg, what mysqlConfig made of the URL
// dsn, is a DSN that the driver reads as the URL's user, password and
// database, and, if the URL's host is a plain host name or address, as its
// TCP address (default 127.0.0.1:3306). Other hosts cannot be dialled.
func checkMySQLConfig(t *testing.T, dsn, cfg string) {
	t.Helper()
	c, err := gomysql.ParseDSN(cfg)
	if err != nil {
		t.Fatalf("mysqlConfig(%q) = %q, which the driver refuses: %v", clip(dsn), clip(cfg), err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("mysqlConfig accepted %q, which does not parse: %v", clip(dsn), err)
	}
	var user, pass string
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	want := [5]string{user, pass, "tcp", strings.TrimPrefix(u.Path, "/")}
	got := [5]string{c.User, c.Passwd, c.Net, c.DBName}
	if plainHost(u) {
		want[4], got[4] = hostPort(u.Hostname(), u.Port()), c.Addr
		if host, port, err := net.SplitHostPort(c.Addr); err == nil {
			got[4] = hostPort(host, port)
		}
	}
	if got != want {
		t.Fatalf("mysqlConfig(%q) = %q: the driver reads user, password, network, database, address %q; the URL says %q", clip(dsn), clip(cfg), got, want)
	}
}

// plainHost reports whether u's host is made of what host names and IP
// addresses are made of, with any IPv6 address in brackets.
func plainHost(u *url.URL) bool {
	host := u.Hostname()
	if strings.Contains(host, ":") && !strings.HasPrefix(u.Host, "[") {
		return false
	}
	return strings.IndexFunc(host, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-_:%", r))
	}) < 0
}

// hostPort joins host and port, defaulting to 127.0.0.1 and 3306.
func hostPort(host, port string) string {
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "3306"
	}
	return net.JoinHostPort(host, port)
}

// clip shortens s for a message.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
