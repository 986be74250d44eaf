package main

import (
	"net/url"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// as returns b with its DSN's user replaced by a role of the test's own
// with r's privileges on b's (migrated) schema or database, as in the
// least-privilege set-up of docs/databases.md.
func (b backend) as(t *testing.T, r dbtest.Role) backend {
	t.Helper()
	switch b.kind {
	case "postgres":
		u, err := url.Parse(dbtest.PostgresRole(t, b.ns, r))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("search_path", b.ns)
		u.RawQuery = q.Encode()
		b.dsn = u.String()
	case "mysql":
		c, err := gomysql.ParseDSN(dbtest.MySQLRole(t, b.ns, r))
		if err != nil {
			t.Fatal(err)
		}
		b.dsn = (&url.URL{Scheme: "mysql", User: url.User(c.User), Host: c.Addr, Path: "/" + b.ns}).String()
	default:
		t.Fatalf("no roles on %s", b.kind)
	}
	return b
}

// eachServer is each on PostgreSQL and MySQL/MariaDB without a pooler:
// the servers with roles.
func eachServer(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Parallel()
	for _, m := range backends {
		if m.kind != "postgres" && m.kind != "mysql" {
			continue
		}
		t.Run(m.kind, func(t *testing.T) {
			t.Parallel()
			b := m.make(t)
			if err := sqllock.Migrate(ctxT(t), b.d); err != nil {
				t.Fatal(err)
			}
			fn(t, b)
		})
	}
}

// Every command works for a role with SELECT, INSERT, UPDATE and DELETE on
// sqllock's tables alone (and the sequences' USAGE, SELECT, UPDATE on
// PostgreSQL): migrate up of an up-to-date schema among them. Its migrate
// down fails, and the schema stays as it was.
func TestCommandsAsApplicationRole(t *testing.T) {
	eachServer(t, func(t *testing.T, owner backend) {
		b := owner.as(t, dbtest.App)
		ok := func(args ...string) string {
			t.Helper()
			out, err := b.cmd(t, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("sqllock %s as the application's role: %v\n%s", strings.Join(args, " "), err, out)
			}
			return string(out)
		}
		version := strings.TrimSpace(ok("migrate", "version"))
		if out := strings.TrimSpace(ok("migrate", "up")); out != version {
			t.Fatalf("migrate up printed %q, want %q", out, version)
		}
		ok("run", "-n", "job", "--", "true")
		ok("run", "--strategy", "optimistic", "-n", "job-o", "--", "true")
		ok("run", "--strategy", "pessimistic", "-n", "job-p", "--", "true")
		ok("run", "--max", "2", "sem", "--", "true")
		ok("run", "--fair", "fair", "--", "true")
		ok("run", "--fair", "--max", "2", "fair-sem", "--", "true")
		ok("run", "--shared", "rw", "--", "true")
		ok("run", "--every", "1h", "tick", "--", "true")
		ok("elect", "leader", "--", "true")
		ok("runs")
		ok("locks")
		ok("reap")
		ok("run", "--min-hold", "1h", "held", "--", "true")
		if !strings.Contains(ok("unlock", "--force", "held"), "held") {
			t.Fatal("unlock --force printed nothing of the lock it broke")
		}
		// Other checks may find problems (a MySQL user without CONNECTION
		// ADMIN, say); the privileges are all there.
		out, _ := b.cmd(t, "doctor").CombinedOutput()
		if !privilegesOK(string(out)) {
			t.Fatalf("doctor as the application's role:\n%s", out)
		}

		out, err := b.cmd(t, "migrate", "down", "--force").CombinedOutput()
		if err == nil {
			t.Fatalf("migrate down as the application's role succeeded:\n%s", out)
		}
		t.Logf("migrate down as the application's role: %v\n%s", err, out)
		if got, err := owner.cmd(t, "migrate", "version").CombinedOutput(); err != nil || strings.TrimSpace(string(got)) != version {
			t.Fatalf("after the refused migrate down: %v, %s; want %s", err, got, version)
		}
	})
}

// A viewer, with SELECT alone, lists locks and runs and reads the
// version; doctor names the privileges it lacks.
func TestCommandsAsViewer(t *testing.T) {
	eachServer(t, func(t *testing.T, owner backend) {
		b := owner.as(t, dbtest.Viewer)
		for _, args := range [][]string{{"migrate", "version"}, {"locks"}, {"runs"}} {
			if out, err := b.cmd(t, args...).CombinedOutput(); err != nil {
				t.Fatalf("sqllock %s as a viewer: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		out, err := b.cmd(t, "doctor").CombinedOutput()
		if code := exitStatus(err); code != exitDoctor || !strings.Contains(string(out), "privileges") ||
			!strings.Contains(string(out), "INSERT") || !strings.Contains(string(out), "sqllock_locks") {
			t.Fatalf("doctor as a viewer: exit %d, want %d and the missing privileges named:\n%s", code, exitDoctor, out)
		}
	})
}

// privilegesOK reports whether doctor's output says the privileges are ok.
func privilegesOK(out string) bool {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "privileges" {
			return f[1] == statusOK
		}
	}
	return false
}
