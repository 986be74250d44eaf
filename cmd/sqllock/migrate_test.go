package main

import (
	"bytes"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/mysql"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	_ "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	dsnpkg "github.com/sqllock/sqllock/dsn"
)

// freshBackends runs fn against every backend, with no sqllock schema.
func freshBackends(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Parallel()
	for _, m := range backends {
		t.Run(m.kind, func(t *testing.T) {
			t.Parallel()
			fn(t, m.make(t))
		})
	}
}

// pipelineURL is the golang-migrate database URL of b, with the versions
// in the application's own table app_sqllock_migrations, as the README's
// "your own migration pipeline" says.
func pipelineURL(t *testing.T, b backend) string {
	t.Helper()
	cfg, err := dsnpkg.Parse(b.dsn)
	if err != nil {
		t.Fatal(err)
	}
	switch b.kind {
	case "postgres":
		u, err := url.Parse(b.dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.Scheme = "pgx5"
		q := u.Query()
		q.Set("x-migrations-table", "app_sqllock_migrations")
		u.RawQuery = q.Encode()
		return u.String()
	case "mysql":
		c := cfg.MySQL.Clone()
		c.MultiStatements = true
		return "mysql://" + c.FormatDSN() + "&x-migrations-table=app_sqllock_migrations"
	}
	return "sqlite://" + cfg.Path + "?x-migrations-table=app_sqllock_migrations"
}

// The README's path for teams with their own pipeline: the files applied
// by golang-migrate with a migrations table of the application's, then
// `sqllock migrate up` (which keeps its own table) over the same objects.
// It must apply cleanly and leave a working schema, not a dirty one.
func TestMigrateAfterOwnPipeline(t *testing.T) {
	freshBackends(t, func(t *testing.T, b backend) {
		src, err := iofs.New(b.d.Migrations(), ".")
		if err != nil {
			t.Fatal(err)
		}
		m, err := migrate.NewWithSourceInstance("iofs", src, pipelineURL(t, b))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Up(); err != nil {
			t.Fatalf("golang-migrate up: %v", err)
		}
		want, _, err := m.Version()
		if err != nil {
			t.Fatal(err)
		}
		if serr, derr := m.Close(); serr != nil || derr != nil {
			t.Fatal(serr, derr)
		}
		out, err := b.cmd(t, "migrate", "up").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "schema version "+strconv.Itoa(int(want)) {
			t.Fatalf("sqllock migrate up after the pipeline: %v\n%s", err, out)
		}
		if out, err := b.cmd(t, "run", "--no-wait", "piped", "--", "true").CombinedOutput(); err != nil {
			t.Fatalf("run on the piped schema: %v\n%s", err, out)
		}
	})
}

// migrationsTable is the qualified name of the table of b's schema
// version.
func (b backend) migrationsTable() string {
	table := "sqllock_schema_migrations"
	switch d := b.d.(type) {
	case *postgres.Dialect:
		table = `"` + d.Schema() + `".` + table
	case *mysql.Dialect:
		table = "`" + d.Database() + "`." + table
	}
	return table
}

// A dirty schema: migrate version and migrate up exit 69 and say how to
// repair it; migrate force records a version and clears the flag.
func TestMigrateDirtyAndForce(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		v, _, err := sqllock.MigrationVersion(ctxT(t), b.d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.d.DB().ExecContext(ctxT(t), "UPDATE "+b.migrationsTable()+" SET dirty = true"); err != nil {
			t.Fatal(err)
		}
		for _, op := range []string{"version", "up"} {
			out, err := b.cmd(t, "migrate", op).CombinedOutput()
			if code := exitStatus(err); code != exitUnavailable || !strings.Contains(string(out), "migrate force") {
				t.Fatalf("migrate %s on a dirty schema: exit %d, want 69 and the repair:\n%s", op, code, out)
			}
		}
		for _, c := range []struct {
			args []string
			want int
		}{
			{[]string{"migrate", "force"}, exitUsage},
			{[]string{"migrate", "force", "x"}, exitUsage},
			{[]string{"migrate", "force", "-2"}, exitUsage},
			{[]string{"migrate", "--force", "up"}, exitUsage},
			{[]string{"migrate", "up", "extra"}, exitUsage},
			{[]string{"migrate", "--timeout", "-1", "up"}, exitUsage},
		} {
			out, err := b.cmd(t, c.args...).CombinedOutput()
			if code := exitStatus(err); code != c.want {
				t.Errorf("sqllock %q: exit %d, want %d\n%s", c.args, code, c.want, out)
			}
		}
		out, err := b.cmd(t, "migrate", "force", strconv.Itoa(int(v))).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "schema version "+strconv.Itoa(int(v)) {
			t.Fatalf("migrate force %d: %v\n%s", v, err, out)
		}
		if out, err := b.cmd(t, "migrate", "version").CombinedOutput(); err != nil {
			t.Fatalf("migrate version after force: %v\n%s", err, out)
		}
	})
}

// migrate down refuses while a lock is held, and goes ahead with --force
// or once nothing is held.
func TestMigrateDownRefusesWhileHeld(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		h := b.hold(t, "busy", "--ttl", "60s")
		h.waitToken(t)
		out, err := b.cmd(t, "migrate", "down").CombinedOutput()
		if code := exitStatus(err); code != exitFailure || !strings.Contains(string(out), `1 lock held ("busy")`) || !strings.Contains(string(out), "--force") {
			t.Fatalf("migrate down while held: exit %d, want 1 naming the lock (\"1 lock held\") and --force:\n%s", code, out)
		}
		h.stdin.Close()
		if code := h.wait(); code != 0 {
			t.Fatalf("holder exited %d", code)
		}
		out, err = b.cmd(t, "migrate", "down").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "schema removed" {
			t.Fatalf("migrate down with nothing held: %v\n%s", err, out)
		}
		if out, err := b.cmd(t, "migrate", "up").CombinedOutput(); err != nil {
			t.Fatalf("migrate up: %v\n%s", err, out)
		}
		h = b.hold(t, "busy", "--ttl", "60s", "--grace", "1s")
		h.waitToken(t)
		out, err = b.cmd(t, "migrate", "down", "--force").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "schema removed" {
			t.Fatalf("migrate down --force: %v\n%s", err, out)
		}
	})
}

// Eight `sqllock migrate up` started at once on a fresh schema all finish
// and leave it migrated and clean, on every backend — through PgBouncer in
// transaction pooling too, where a session-level lock would stay behind on
// a pooled server connection and hang the others.
func TestMigrateConcurrent(t *testing.T) {
	freshBackends(t, func(t *testing.T, b backend) {
		const n = 8
		cmds := make([]*exec.Cmd, n)
		outs := make([]*bytes.Buffer, n)
		for i := range cmds {
			outs[i] = new(bytes.Buffer)
			cmds[i] = b.cmd(t, "migrate", "--timeout", "50s", "up")
			cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		for i, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Errorf("migrator %d: %v\n%s", i, err, outs[i])
			}
		}
		v, dirty, err := sqllock.MigrationVersion(ctxT(t), b.d)
		if err != nil || dirty || v == 0 {
			t.Fatalf("after %d migrators: version %d, dirty %v, %v", n, v, dirty, err)
		}
	})
}
