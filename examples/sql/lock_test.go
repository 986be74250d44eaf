// The psql client of the lock protocol (lock.sh), run beside the Go
// library on one PostgreSQL schema.
package sql_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Finish(m.Run())) }

// lock.sh waits while Go holds the lock, runs its command as the lock's
// holder once Go releases it, and releases it when the command ends.
func TestLockScriptWaitsForGo(t *testing.T) {
	t.Parallel()
	db, schema := dbtest.Postgres(t)
	if _, err := exec.LookPath("psql"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("psql is not installed (Debian: apt-get install -y postgresql-client)")
		}
		t.Skip("psql is not installed (Debian: apt-get install -y postgresql-client)")
	}
	d, err := postgres.New(db, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(context.Background()) })
	ctx := t.Context()
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	table, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := table.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	url := dbtest.PostgresURL(t)
	holder := `SELECT owner FROM "` + schema + `".sqllock_locks WHERE name = 'job' AND holds > 0`
	script := exec.CommandContext(ctx, "./lock.sh", "job", "30", "psql", url, "-XAtc", holder)
	script.Env = append(os.Environ(), "SQLLOCK_URL="+url, "SQLLOCK_SCHEMA="+schema)
	var out strings.Builder
	script.Stdout, script.Stderr = &out, os.Stderr
	if err := script.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- script.Wait() }()
	// The script marks the row as waited for once it was refused.
	for waiting := false; !waiting; {
		if err := db.QueryRowContext(ctx, `SELECT waiters FROM "`+schema+`".sqllock_locks WHERE name = 'job'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("lock.sh ended while Go held the lock: %v, output %q", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("lock.sh: %v", err)
	}
	if owner := strings.TrimSpace(out.String()); owner == "" || owner == k.Owner() {
		t.Fatalf("the command saw holder %q, want the script's owner", owner)
	}
	again, err := table.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("Go TryAcquire after lock.sh: %v", err)
	}
	defer again.Release(ctx)
	if again.Token() <= k.Token() {
		t.Fatalf("Go token %d after %d", again.Token(), k.Token())
	}
}
