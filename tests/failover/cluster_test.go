package failover_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/faultproxy"
)

// cluster is a PostgreSQL primary and a streaming standby started from the
// system's binaries on free loopback ports, in a directory of their own.
// The standby replicates through a fault proxy (link), which can freeze
// replication so that the standby lags; clients reach whichever server is
// the primary through front, which failover repoints.
type cluster struct {
	t       *testing.T
	bin     string // directory of initdb, pg_ctl, ...
	user    string // run the servers as this user ("" : as ourselves)
	dir     string
	primary int // port
	standby int // port
	link    *faultproxy.Proxy
	front   *front
}

// pgBin is the directory of the PostgreSQL server binaries.
func pgBin() string {
	if b := os.Getenv("SQLLOCK_HA_PGBIN"); b != "" {
		return b
	}
	return "/usr/lib/postgresql/15/bin"
}

// haUser is the user the servers run as when the test runs as root
// (PostgreSQL refuses to run as root): SQLLOCK_HA_USER, made by
// scripts/test-ha.sh.
func haUser(t *testing.T) string {
	if os.Geteuid() != 0 {
		return ""
	}
	name := os.Getenv("SQLLOCK_HA_USER")
	if name == "" {
		name = "sqllockha"
	}
	if _, err := user.Lookup(name); err != nil {
		t.Fatalf("running as root needs an unprivileged user for PostgreSQL: %v (scripts/test-ha.sh creates %q)", err, name)
	}
	return name
}

// freePort returns a loopback TCP port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// run runs one of the server binaries as the cluster's user.
func (c *cluster) run(name string, args ...string) {
	c.t.Helper()
	if out, err := c.cmd(name, args...).CombinedOutput(); err != nil {
		c.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func (c *cluster) cmd(name string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, name)
	if c.user != "" {
		return exec.Command("runuser", append([]string{"-u", c.user, "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

// newCluster starts a primary and a standby streaming from it through the
// link proxy. sync makes the standby synchronous (on the primary; the
// promoted standby runs without one).
func newCluster(t *testing.T, sync bool) *cluster {
	c := &cluster{t: t, bin: pgBin(), user: haUser(t)}
	if _, err := os.Stat(filepath.Join(c.bin, "initdb")); err != nil {
		t.Fatalf("PostgreSQL server binaries: %v (set SQLLOCK_HA_PGBIN)", err)
	}
	dir, err := os.MkdirTemp("", "sqllock-ha-")
	if err != nil {
		t.Fatal(err)
	}
	c.dir = dir
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if c.user != "" {
		u, _ := user.Lookup(c.user)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	c.primary, c.standby = freePort(t), freePort(t)
	pdir, sdir := filepath.Join(dir, "primary"), filepath.Join(dir, "standby")
	c.run("initdb", "-D", pdir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	conf := fmt.Sprintf(`
port = %d
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
wal_level = replica
max_wal_senders = 4
wal_keep_size = '256MB'
hot_standby = on
fsync = off
full_page_writes = off
shared_buffers = '32MB'
max_connections = 80
`, c.primary, dir)
	if sync {
		conf += "synchronous_standby_names = 'stby'\n"
	}
	c.appendConf(pdir, conf)
	c.run("pg_ctl", "-D", pdir, "-l", filepath.Join(dir, "primary.log"), "-w", "-t", "60", "start")
	t.Cleanup(func() { c.stop(pdir) })

	link, err := faultproxy.New(fmt.Sprintf("127.0.0.1:%d", c.primary))
	if err != nil {
		t.Fatal(err)
	}
	c.link = link
	t.Cleanup(func() { link.Close() })
	c.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(c.primary), "-U", "postgres", "-D", sdir, "-X", "stream", "--no-sync")
	_, lport, _ := net.SplitHostPort(link.Addr())
	c.appendConf(sdir, fmt.Sprintf(`
port = %d
primary_conninfo = 'host=127.0.0.1 port=%s user=postgres application_name=stby'
synchronous_standby_names = ''
`, c.standby, lport))
	c.writeFile(filepath.Join(sdir, "standby.signal"), "")
	c.run("pg_ctl", "-D", sdir, "-l", filepath.Join(dir, "standby.log"), "-w", "-t", "60", "start")
	t.Cleanup(func() { c.stop(sdir) })

	c.front = newFront(t, fmt.Sprintf("127.0.0.1:%d", c.primary))
	return c
}

func (c *cluster) appendConf(dataDir, text string) {
	c.t.Helper()
	f, err := os.OpenFile(filepath.Join(dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) writeFile(path, text string) {
	c.t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		c.t.Fatal(err)
	}
	if c.user != "" {
		u, _ := user.Lookup(c.user)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(path, uid, gid); err != nil {
			c.t.Fatal(err)
		}
	}
}

// stop stops a server if it runs (immediate: the data is thrown away).
func (c *cluster) stop(dataDir string) {
	_ = c.cmd("pg_ctl", "-D", dataDir, "-m", "immediate", "-w", "stop").Run()
}

// url is the clients' URL: through the front, to the current primary.
func (c *cluster) url() string {
	return "postgres://postgres@" + c.front.addr() + "/postgres?sslmode=disable&connect_timeout=30"
}

// direct opens a pool straight to a server's port, closed when the test ends.
func (c *cluster) direct(port int) *sql.DB {
	return dbtest.OpenPostgres(c.t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=30", port))
}

// waitStreaming waits until the standby has replayed everything the
// primary has written.
func (c *cluster) waitStreaming(ctx context.Context) {
	c.t.Helper()
	db := c.direct(c.primary)
	for {
		var caughtUp bool
		err := db.QueryRowContext(ctx, `SELECT coalesce(bool_and(replay_lsn >= pg_current_wal_lsn()), false)
FROM pg_stat_replication WHERE application_name = 'stby' AND state = 'streaming'`).Scan(&caughtUp)
		if err == nil && caughtUp {
			return
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("the standby never caught up: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// failover kills the primary (as a crash would: nothing more reaches the
// standby), promotes the standby, calls promoted while no client reaches
// it yet, and points the clients at it, cutting every client connection.
func (c *cluster) failover(promoted func()) {
	c.t.Helper()
	c.run("pg_ctl", "-D", filepath.Join(c.dir, "primary"), "-m", "immediate", "-w", "stop")
	c.run("pg_ctl", "-D", filepath.Join(c.dir, "standby"), "-w", "-t", "60", "promote")
	promoted()
	c.front.switchTo(fmt.Sprintf("127.0.0.1:%d", c.standby))
}

// front forwards client connections to a target that can be switched:
// the clients' view of "the primary" (a virtual IP, a DNS name, a pooler).
type front struct {
	ln net.Listener

	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newFront(t *testing.T, target string) *front {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &front{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *front) addr() string { return f.ln.Addr().String() }

func (f *front) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		target := f.target
		f.mu.Unlock()
		s, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.conns[c], f.conns[s] = struct{}{}, struct{}{}
		f.mu.Unlock()
		f.wg.Add(2)
		go f.pipe(c, s)
		go f.pipe(s, c)
	}
}

func (f *front) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	f.mu.Lock()
	delete(f.conns, dst)
	delete(f.conns, src)
	f.mu.Unlock()
}

// switchTo sends new connections to target and cuts the open ones.
func (f *front) switchTo(target string) {
	f.mu.Lock()
	f.target = target
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
}

func (f *front) close() {
	f.ln.Close()
	f.switchTo("")
	f.wg.Wait()
}
