package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/dialecttest"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// TestGalera runs on a 3-node MariaDB Galera cluster of its own, started
// from the system's mariadbd and libgalera_smm.so on free loopback ports
// (opt-in: SQLLOCK_TEST_GALERA=1, make test-ha). The pessimistic strategy
// is refused with ErrUnsupported; the table and optimistic strategies pass
// the conformance suite on one node and exclude each other across nodes.
func TestGalera(t *testing.T) {
	if os.Getenv("SQLLOCK_TEST_GALERA") == "" {
		t.Skip("set SQLLOCK_TEST_GALERA=1 to run (make test-ha): starts a Galera cluster of its own")
	}
	nodes, kill := startGalera(t)
	open := func(t *testing.T, n int) *sql.DB { return dbtest.OpenMySQL(t, nodes[n]) }

	t.Run("PessimisticRefused", func(t *testing.T) {
		d, err := mysql.New(open(t, 0))
		if err != nil {
			t.Fatal(err)
		}
		_, err = sqllock.NewPessimistic(d, sqllock.PessimisticOptions{})
		if !errors.Is(err, sqllock.ErrUnsupported) || !strings.Contains(err.Error(), "Galera") {
			t.Fatalf("NewPessimistic on Galera: %v, want ErrUnsupported naming Galera", err)
		}
	})

	var seq atomic.Int64
	newDatabase := func(t *testing.T) (*sql.DB, string) {
		db := open(t, 0)
		name := fmt.Sprintf("sqllock_galera_%d", seq.Add(1))
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
		})
		return db, name
	}

	t.Run("Conformance", func(t *testing.T) {
		dialecttest.Exercise(t, dialecttest.Harness{
			Polling: true, // wake-ups refuse a Galera cluster: waiters poll
			New: func(t *testing.T) *dialecttest.Env {
				db, name := newDatabase(t)
				return envOn(t, db, name, nodes[0], func(db *sql.DB, database string) (dialect.Dialect, error) {
					return mysql.New(db, mysql.WithDatabase(database))
				})
			},
		})
	})

	// A lock held through one node excludes owners on the others, and
	// its successor's token is larger, whichever node grants it. The pools
	// ask for causal reads (wsrep_sync_wait): without them a node may
	// answer from a state that lacks another node's last commit — never
	// unsafely (writes are certified), but a lock just released elsewhere
	// may still look held.
	t.Run("AcrossNodes", func(t *testing.T) {
		open := func(t *testing.T, n int) *sql.DB { return dbtest.OpenMySQL(t, nodes[n]+"?wsrep_sync_wait=7") }
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		_, name := newDatabase(t)
		for _, strategy := range []string{"table", "optimistic"} {
			lockers := make([]sqllock.Locker, len(nodes))
			for i := range nodes {
				d, err := mysql.New(open(t, i), mysql.WithDatabase(name))
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					if err := sqllock.Migrate(ctx, d); err != nil {
						t.Fatal(err)
					}
				}
				if strategy == "table" {
					lockers[i], err = sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 10 * time.Second}})
				} else {
					lockers[i], err = sqllock.NewOptimistic(d, sqllock.OptimisticOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 10 * time.Second}})
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			var last int64
			for round := range 2 * len(nodes) {
				holder := round % len(nodes)
				k, err := lockers[holder].TryAcquire(ctx, "x")
				if err != nil {
					t.Fatalf("%s: node %d: %v", strategy, holder, err)
				}
				if k.Token() <= last {
					t.Fatalf("%s: token %d after %d", strategy, k.Token(), last)
				}
				last = k.Token()
				for other := range nodes {
					if other == holder {
						continue
					}
					if _, err := lockers[other].TryAcquire(ctx, "x"); !errors.Is(err, sqllock.ErrLocked) {
						t.Fatalf("%s: node %d acquired what node %d holds: %v", strategy, other, holder, err)
					}
				}
				if err := k.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
	})

	t.Run("NodeLoss", func(t *testing.T) {
		_, name := newDatabase(t)
		d, err := mysql.New(open(t, 0), mysql.WithDatabase(name))
		if err != nil {
			t.Fatal(err)
		}
		if err := sqllock.Migrate(t.Context(), d); err != nil {
			t.Fatal(err)
		}
		nodeLoss(t, nodes, kill, open, name)
	})
}

// nodeLoss kills node 2 while node 0 holds a lease, and measures how long
// writes on node 0 stall until the cluster has evicted the dead node: a
// lease whose TTL is shorter than that stall is lost (its renewals wait).
func nodeLoss(t *testing.T, nodes []string, kill func(int), open func(*testing.T, int) *sql.DB, database string) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	d, err := mysql.New(open(t, 0), mysql.WithDatabase(database))
	if err != nil {
		t.Fatal(err)
	}
	l, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	held, err := l.TryAcquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	kill(len(nodes) - 1)
	killed := time.Now()
	// The first grant on a surviving node after the kill.
	k, err := l.Acquire(ctx, "after-kill")
	if err != nil {
		t.Fatal(err)
	}
	stall := time.Since(killed)
	t.Logf("writes on a surviving node resumed %v after a node was killed", stall.Round(10*time.Millisecond))
	if err := held.Context().Err(); err != nil {
		t.Fatalf("a lease with a 30 s TTL was lost across the stall: %v", context.Cause(held.Context()))
	}
	for _, k := range []*sqllock.Lock{k, held} {
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// startGalera starts a 3-node Galera cluster and returns the DSN of each
// node and a function that kills a node (SIGKILL). The nodes are stopped,
// and their directory removed, when t ends.
func startGalera(t *testing.T) ([]string, func(i int)) {
	const provider = "/usr/lib/galera/libgalera_smm.so"
	if _, err := os.Stat(provider); err != nil {
		t.Fatalf("Galera provider: %v (apt-get install galera-4)", err)
	}
	dir, err := os.MkdirTemp("", "sqllock-galera-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var runAs string
	if os.Geteuid() == 0 {
		runAs = os.Getenv("SQLLOCK_HA_USER")
		if runAs == "" {
			runAs = "sqllockha"
		}
		u, err := user.Lookup(runAs)
		if err != nil {
			t.Fatalf("running as root needs an unprivileged user for mariadbd: %v (scripts/test-ha.sh creates %q)", err, runAs)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	command := func(name string, args ...string) *exec.Cmd {
		if runAs != "" {
			return exec.Command("runuser", append([]string{"-u", runAs, "--", name}, args...)...)
		}
		return exec.Command(name, args...)
	}
	const n = 3
	type node struct{ sql, gcomm, ist, sst int }
	ports := freePorts(t, 4*n)
	nodes := make([]node, n)
	var members []string
	for i := range nodes {
		nodes[i] = node{ports[4*i], ports[4*i+1], ports[4*i+2], ports[4*i+3]}
		members = append(members, fmt.Sprintf("127.0.0.1:%d", nodes[i].gcomm))
	}
	dsns := make([]string, n)
	pids := make([]int, n)
	for i, nd := range nodes {
		data := filepath.Join(dir, fmt.Sprintf("n%d", i))
		if out, err := command("mariadb-install-db", "--no-defaults", "--datadir="+data,
			"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput(); err != nil {
			t.Fatalf("mariadb-install-db: %v\n%s", err, out)
		}
		args := []string{"--no-defaults", "--datadir=" + data,
			fmt.Sprintf("--port=%d", nd.sql), "--bind-address=127.0.0.1",
			"--socket=" + data + ".sock", "--pid-file=" + data + ".pid", "--log-error=" + data + ".err",
			"--binlog-format=ROW", "--default-storage-engine=InnoDB", "--innodb-autoinc-lock-mode=2",
			"--innodb-buffer-pool-size=32M", "--innodb-flush-log-at-trx-commit=2",
			"--wsrep-on=ON", "--wsrep-provider=" + provider, "--wsrep-cluster-name=sqllock",
			fmt.Sprintf("--wsrep-node-name=n%d", i),
			fmt.Sprintf("--wsrep-node-address=127.0.0.1:%d", nd.gcomm),
			fmt.Sprintf("--wsrep-sst-receive-address=127.0.0.1:%d", nd.sst),
			fmt.Sprintf("--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;gcache.size=32M", nd.gcomm, nd.ist),
			"--wsrep-sst-method=rsync",
			"--wsrep-cluster-address=gcomm://" + strings.Join(members, ","),
		}
		if i == 0 {
			args = append(args, "--wsrep-new-cluster")
		}
		cmd := command("mariadbd", args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pids[i] = cmd.Process.Pid
		t.Cleanup(func() {
			// runuser forwards SIGTERM to mariadbd; the group gets it
			// either way.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
			}
		})
		dsns[i] = fmt.Sprintf("root@tcp(127.0.0.1:%d)/", nd.sql)
		// Wait until the node is synced with the cluster before the next
		// one joins (one state transfer at a time).
		db := dbtest.OpenMySQL(t, dsns[i]+"?timeout=2s")
		deadline := time.Now().Add(3 * time.Minute)
		for {
			var name, state string
			err := db.QueryRow(`SHOW STATUS LIKE 'wsrep_local_state_comment'`).Scan(&name, &state)
			if err == nil && state == "Synced" {
				break
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(data + ".err")
				t.Fatalf("node %d not synced: %v %q\n%s", i, err, state, log)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return dsns, func(i int) { _ = syscall.Kill(-pids[i], syscall.SIGKILL) }
}

// freePorts returns n distinct loopback TCP ports nothing listens on.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports
}
