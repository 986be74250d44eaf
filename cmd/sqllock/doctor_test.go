package main

import (
	"crypto/rand"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// doctorLine is one line of sqllock doctor's table.
var doctorLine = regexp.MustCompile(`^(\S+(?: \S+)?) {2,}(ok|missing|problem) {2,}(.+)$`)

// doctor runs sqllock doctor on b and returns its exit status and, by
// check, the status and what was found.
func (b backend) doctor(t *testing.T) (int, map[string][2]string) {
	t.Helper()
	out, err := b.cmd(t, "doctor").Output()
	code := exitStatus(err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "CHECK ") {
		t.Fatalf("doctor (exit %d) printed:\n%s", code, out)
	}
	checks := map[string][2]string{}
	for _, l := range lines[1:] {
		m := doctorLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("doctor printed %q:\n%s", l, out)
		}
		checks[m[1]] = [2]string{m[2], m[3]}
	}
	return code, checks
}

// want checks that doctor's check found status and each of words.
func want(t *testing.T, checks map[string][2]string, check, status string, words ...string) {
	t.Helper()
	got, present := checks[check]
	if !present || got[0] != status {
		t.Errorf("doctor's %s: %q, want %s (all: %q)", check, got, status, checks)
		return
	}
	for _, w := range words {
		if !strings.Contains(got[1], w) {
			t.Errorf("doctor's %s says %q, want %q in it", check, got[1], w)
		}
	}
}

// sqllock doctor says what it found: the server, the pooler (none, or
// PgBouncer in transaction or session pooling), the schema's version and
// dirty flag, the clock, and the wake-ups' needs; exit 0 when all is well,
// 2 otherwise (the wake-ups behind a transaction pooler, a dirty or missing
// schema), 69 when the database cannot be reached.
func TestDoctor(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		code, checks := b.doctor(t)
		server := map[string]string{"postgres": "PostgreSQL", "mysql": "M", "sqlite": "SQLite"}[b.kind]
		want(t, checks, "server", statusOK, server)
		want(t, checks, "schema", statusOK, "(the latest), clean")
		want(t, checks, "clock", statusOK)
		wantCode := 0
		switch {
		case b.kind == "postgres" && !b.pooled:
			want(t, checks, "pooler", statusOK, "none")
			want(t, checks, "LISTEN", statusOK, "arrived")
		case strings.Contains(b.dsn, "default_query_exec_mode"): // transaction pooling
			want(t, checks, "pooler", statusOK, "PgBouncer", "transaction pooling")
			want(t, checks, "LISTEN", statusMissing, "poll")
			wantCode = exitDoctor
		case b.pooled:
			want(t, checks, "pooler", statusOK, "PgBouncer", "session pooling")
			want(t, checks, "LISTEN", statusOK, "arrived")
		case b.kind == "mysql":
			want(t, checks, "pooler", statusOK, "none")
			want(t, checks, "user locks", statusOK)
			want(t, checks, "KILL QUERY", statusOK)
			want(t, checks, "kill others", statusOK) // the test user may do all
		case b.kind == "sqlite":
			want(t, checks, "wake-ups", statusOK)
		}
		if code != wantCode {
			t.Errorf("doctor on a sound %s: exit %d, want %d: %q", b.kind, code, wantCode, checks)
		}

		table := b.migrationsTable()
		if _, err := b.d.DB().ExecContext(ctxT(t), "UPDATE "+table+" SET dirty = true"); err != nil {
			t.Fatal(err)
		}
		code, checks = b.doctor(t)
		want(t, checks, "schema", statusProblem, "dirty", "migrate force")
		if code != exitDoctor {
			t.Errorf("doctor on a dirty schema: exit %d, want %d", code, exitDoctor)
		}

		if _, err := b.d.DB().ExecContext(ctxT(t), "DROP TABLE "+table); err != nil {
			t.Fatal(err)
		}
		code, checks = b.doctor(t)
		if b.kind == "sqlite" {
			want(t, checks, "schema", statusOK, "first use")
			return
		}
		want(t, checks, "schema", statusProblem, "missing", "sqllock migrate up")
		if code != exitDoctor {
			t.Errorf("doctor without the schema: exit %d, want %d", code, exitDoctor)
		}
	})
}

// A MariaDB/MySQL user without CONNECTION_ADMIN or SUPER is told that its
// releases cannot wake other users' waiters (exit 2); its own wake-ups work.
func TestDoctorMySQLWithoutConnectionAdmin(t *testing.T) {
	t.Parallel()
	db, database := dbtest.MySQL(t)
	d, err := mysql.New(db, mysql.WithDatabase(database))
	if err != nil {
		t.Fatal(err)
	}
	c, err := gomysql.ParseDSN(dbtest.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	user, pass := "sqllock_doctor_"+strings.ToLower(rand.Text()[:8]), rand.Text()
	for _, q := range []string{
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", user, pass),
		fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%%'", database, user),
	} {
		if _, err := db.ExecContext(ctxT(t), q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { db.Exec(fmt.Sprintf("DROP USER '%s'@'%%'", user)) })
	u := url.URL{Scheme: "mysql", User: url.UserPassword(user, pass), Host: c.Addr, Path: "/" + database}
	b := backend{kind: "mysql", dsn: u.String(), d: d, ns: database}
	if out, err := b.cmd(t, "migrate", "up").CombinedOutput(); err != nil {
		t.Fatalf("migrate up: %v\n%s", err, out)
	}
	code, checks := b.doctor(t)
	want(t, checks, "user locks", statusOK)
	want(t, checks, "KILL QUERY", statusOK)
	want(t, checks, "kill others", statusMissing, "CONNECTION_ADMIN", "other database user")
	if code != exitDoctor {
		t.Errorf("doctor: exit %d, want %d", code, exitDoctor)
	}
}

func TestDoctorUnreachable(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "mysql://nobody@127.0.0.1:1/none?timeout=2s"} {
		b := backend{dsn: dsn}
		out, err := b.cmd(t, "doctor").CombinedOutput()
		if code := exitStatus(err); code != exitUnavailable {
			t.Errorf("doctor on %s: exit %d, want %d\n%s", dsn, code, exitUnavailable, out)
		}
	}
}

// The pooler check flags a PgBouncer version that can exit on a cancel
// request, and only when its console told the version.
func TestPgBouncerExitsOnCancel(t *testing.T) {
	for name, want := range map[string]bool{
		"a pooler: PgBouncer 1.18.0": true,
		"a pooler: PgBouncer 1.20.1": true,
		"a pooler: PgBouncer 1.9.0":  true,
		"a pooler: PgBouncer 1.21.0": false,
		"a pooler: PgBouncer 1.24.1": false,
		"a pooler: PgBouncer 2.0.0":  false,
		"a pooler: PgBouncer":        false,
		"a pooler: PgBouncer (its console refused SHOW VERSION to this user)": false,
		"a pooler (the server process differs from the one given at startup)": false,
	} {
		if got := pgBouncerExitsOnCancel(name); got != want {
			t.Errorf("pgBouncerExitsOnCancel(%q) = %v, want %v", name, got, want)
		}
	}
}
