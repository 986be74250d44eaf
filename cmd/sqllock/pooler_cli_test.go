package main

import (
	"errors"
	"net/url"
	"os/exec"
	"strings"
	"testing"

	"github.com/sqllock/sqllock/internal/dbtest"
)

// Through PgBouncer, in transaction and in session pooling, a plain DSN
// (no default_query_exec_mode) works for every command that talks to the
// database: the command runs its statements unnamed.
func TestPgBouncerPlainDSN(t *testing.T) {
	t.Parallel()
	for _, mode := range []dbtest.PoolMode{dbtest.Transaction, dbtest.Session} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := pgBouncerBackend(t, mode)
			u, err := url.Parse(b.dsn)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Del("default_query_exec_mode")
			u.RawQuery = q.Encode()
			b.dsn = u.String()
			for _, args := range [][]string{
				{"migrate", "up"},
				{"run", "-n", "job", "true"},
				{"run", "-n", "--strategy", "optimistic", "job-o", "true"},
				{"run", "-n", "--strategy", "pessimistic", "job-p", "true"},
				{"run", "-n", "--max", "2", "job-s", "true"},
				{"run", "--fair", "job-f", "true"},
				{"locks"},
				{"reap"},
				{"elect", "scheduler", "true"},
				{"migrate", "version"},
			} {
				out, err := b.cmd(t, args...).CombinedOutput()
				if err != nil {
					t.Errorf("%q through PgBouncer (%s pooling) with a plain DSN: %v\n%s", args, mode, err, out)
				}
				if strings.Contains(string(out), "WithPooler") {
					t.Errorf("%q names a Go function:\n%s", args, out)
				}
			}
			// No leader is exit status 3, not an error of the pooler.
			out, err := b.cmd(t, "leader", "nobody").CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 3 {
				t.Errorf("leader of an empty election: %v, want exit 3\n%s", err, out)
			}
		})
	}
}
