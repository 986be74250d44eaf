// Command peers measures sqllock against what users would pick instead, in
// one run: redsync v4 (its defaults, and a 1 ms retry delay) and
// bsm/redislock on one Redis node; PostgreSQL's blocking advisory lock and
// MySQL's / MariaDB's GET_LOCK as the floors of what the databases
// themselves do; and sqllock's lock table on PostgreSQL, MariaDB and
// SQLite. The systems alternate, round after round (A B C … A B C …), so
// that the drift of a shared machine hits each alike; the summary gives
// medians across rounds with their ranges.
//
// Measured:
//   - uncontended acquire + release, ops/s at 1 and 8 clients (goroutines
//     of one process, each on a name of its own), and the ratio to
//     redsync's (defaults) in the same round;
//   - hand-off between processes: waiters+1 OS processes, one client each,
//     loop acquire, release, acquire on one name; the hand-off latency is
//     from a call to release to the grant to a process that was waiting
//     then (a barging releaser's grants in between count in it; wall
//     clocks of one machine), p50 and p99; grants per second; Jain's
//     fairness index of the grants over the processes; and, on PostgreSQL
//     and MariaDB, the server's statements per grant (PostgreSQL:
//     pg_stat_database.xact_commit of the bench database; MariaDB: the
//     Questions status counter), less what each process spends once on
//     connecting and warming up.
//
// Every result is a line in go test's benchmark format (for
// internal/benchchart -peers, which draws the hand-off chart), then the
// summary tables in Markdown. scripts/bench-peers.sh starts the servers
// and runs it (make bench-peers).
//
//	go run ./bench/peers -redis 127.0.0.1:6379 -postgres URL -mysql DSN
package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
)

// workerEnv names the environment variable that makes the program a
// worker process of a hand-off run: its value is the run's JSON.
const workerEnv = "SQLLOCK_PEERS_WORKER"

func main() {
	if spec := os.Getenv(workerEnv); spec != "" {
		if err := worker(spec, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "peers worker:", err)
			os.Exit(1)
		}
		return
	}
	var p params
	flag.StringVar(&p.cfg.Redis, "redis", "127.0.0.1:6379", "Redis `host:port`")
	flag.StringVar(&p.cfg.Postgres, "postgres", os.Getenv("SQLLOCK_TEST_POSTGRES_URL"), "PostgreSQL `URL` (its database is used to create the bench database sqllock_peers)")
	flag.StringVar(&p.cfg.MySQL, "mysql", os.Getenv("SQLLOCK_TEST_MYSQL_DSN"), "MySQL/MariaDB `DSN` (its database is used to create the bench database sqllock_peers)")
	flag.IntVar(&p.rounds, "rounds", 3, "rounds of every system")
	flag.DurationVar(&p.uncontended, "uncontended", time.Second, "time of each uncontended run")
	flag.DurationVar(&p.handoff, "handoff", 3*time.Second, "time of each hand-off run")
	waiters := flag.String("waiters", "1,10,50", "waiting processes of the hand-off runs")
	only := flag.String("systems", "", "comma-separated systems to run (default all: "+names()+")")
	flag.Parse()
	var err error
	if p.waiters, err = intList(*waiters); err == nil {
		p.systems, err = pick(*only)
	}
	if err == nil {
		p.self, err = os.Executable()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	if err := run(ctx, p, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

// params is one benchmark run.
type params struct {
	cfg         config
	self        string // the executable the workers run (this program, or a test binary)
	rounds      int
	uncontended time.Duration
	handoff     time.Duration
	waiters     []int
	systems     []system
}

func names() string {
	var n []string
	for _, s := range systems {
		n = append(n, s.name)
	}
	return strings.Join(n, ",")
}

func pick(only string) ([]system, error) {
	if only == "" {
		return systems, nil
	}
	var out []system
	for _, n := range strings.Split(only, ",") {
		s, err := lookup(strings.TrimSpace(n))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("want positive integers, got %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// run prepares the databases and runs every round, writing the result
// lines and the summary to out and progress to log.
func run(ctx context.Context, p params, out, log io.Writer) error {
	dir, err := os.MkdirTemp("", "sqllock-peers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p.cfg.SQLite = filepath.Join(dir, "locks.db")
	cleanup, err := prepare(ctx, &p)
	if err != nil {
		return err
	}
	defer cleanup()
	counters, err := openCounters(ctx, p)
	if err != nil {
		return err
	}
	defer counters.close()
	fmt.Fprintf(out, "# peers: %s, load average %s, %d rounds, uncontended %v, hand-off %v a run\n",
		time.Now().UTC().Format(time.RFC3339), loadAverage(), p.rounds, p.uncontended, p.handoff)

	// Per process, what connecting and the warm-up cost the server.
	setup := map[string]float64{}
	for _, s := range p.systems {
		if s.kind == "" {
			continue
		}
		before := counters.read(ctx, s.kind)
		if _, err := handoffRun(ctx, p, s, 0, "peers-setup"); err != nil {
			return fmt.Errorf("%s: setup: %w", s.name, err)
		}
		setup[s.name] = float64(counters.read(ctx, s.kind) - before)
	}

	var res results
	for round := 1; round <= p.rounds; round++ {
		for _, clients := range []int{1, 8} {
			for _, s := range p.systems {
				if !s.uncontended {
					continue
				}
				ops, err := uncontended(ctx, p, s, clients, round)
				if err != nil {
					return fmt.Errorf("%s: uncontended, %d clients: %w", s.name, clients, err)
				}
				r := result{system: s.name, clients: clients, round: round, opsPerSec: ops}
				res = append(res, r)
				fmt.Fprintf(out, "BenchmarkPeerUncontended/system=%s/clients=%d/round=%d\t1\t%.0f ops/s\n", s.name, clients, round, ops)
			}
		}
		for _, w := range p.waiters {
			for _, s := range p.systems {
				fmt.Fprintf(log, "peers: round %d, %s, %d waiters\n", round, s.name, w)
				before := counters.read(ctx, s.kind)
				h, err := handoffRun(ctx, p, s, w, fmt.Sprintf("peers-%d-%d", round, w))
				if err != nil {
					return fmt.Errorf("%s: %d waiters: %w", s.name, w, err)
				}
				r := h.result(s.name, w, round, p.handoff)
				if s.kind != "" && h.grants > 0 {
					spent := float64(counters.read(ctx, s.kind)-before) - float64(w+1)*setup[s.name]
					r.stmts = max(0, spent) / float64(h.grants)
				} else {
					r.stmts = -1
				}
				res = append(res, r)
				fmt.Fprintf(out, "BenchmarkPeerHandoff/system=%s/waiters=%d/round=%d\t%d\t%.3f p50-ms\t%.3f p99-ms\t%.1f grants/s\t%.3f jain\t%.1f stmts/grant\t%d overlaps\n",
					s.name, w, round, h.grants, r.p50, r.p99, r.perSec, r.jain, r.stmts, h.overlaps)
				if h.overlaps > 0 {
					return fmt.Errorf("%s: %d waiters: %d grants overlapped the previous holder's", s.name, w, h.overlaps)
				}
			}
		}
	}
	summary(out, res, p)
	return nil
}

// prepare creates the bench databases, migrates sqllock's schema into them
// and returns what drops them again.
func prepare(ctx context.Context, p *params) (func(), error) {
	var drops []func()
	cleanup := func() {
		for _, d := range slices.Backward(drops) {
			d()
		}
	}
	need := map[string]bool{}
	for _, s := range p.systems {
		need[s.kind] = true
		if strings.HasPrefix(s.name, "redis") {
			need["redis"] = true
		}
	}
	if need["postgres"] {
		url, err := benchDatabase(ctx, "pgx", p.cfg.Postgres)
		if err != nil {
			return cleanup, err
		}
		p.cfg.Postgres = url
		p.cfg.Schema = fmt.Sprintf("peers_%d", os.Getpid())
		db, err := openDB(ctx, "pgx", url)
		if err != nil {
			return cleanup, err
		}
		drops = append(drops, func() {
			_, _ = db.ExecContext(context.Background(), "DROP SCHEMA IF EXISTS "+p.cfg.Schema+" CASCADE")
			db.Close()
		})
		d, err := postgres.New(db, postgres.WithSchema(p.cfg.Schema))
		if err != nil {
			return cleanup, err
		}
		if err := sqllock.Migrate(ctx, d); err != nil {
			return cleanup, fmt.Errorf("postgres: migrate: %w", err)
		}
	}
	if need["mysql"] {
		dsn, err := benchDatabase(ctx, "mysql", p.cfg.MySQL)
		if err != nil {
			return cleanup, err
		}
		p.cfg.MySQL = dsn
		db, err := openDB(ctx, "mysql", dsn)
		if err != nil {
			return cleanup, err
		}
		drops = append(drops, func() { db.Close() })
		d, err := mysql.New(db)
		if err != nil {
			return cleanup, err
		}
		if err := sqllock.Migrate(ctx, d); err != nil {
			return cleanup, fmt.Errorf("mysql: migrate: %w", err)
		}
	}
	if need[""] {
		db, err := sqlite.Open(p.cfg.SQLite)
		if err != nil {
			return cleanup, err
		}
		drops = append(drops, func() { db.Close() })
		d, err := sqlite.New(db)
		if err != nil {
			return cleanup, err
		}
		if err := sqllock.Migrate(ctx, d); err != nil {
			return cleanup, fmt.Errorf("sqlite: migrate: %w", err)
		}
	}
	return cleanup, nil
}

// benchDatabase creates the database sqllock_peers on the server of dsn if
// it is missing, and returns dsn with that database: the server's
// per-database counters then count the benchmark alone.
func benchDatabase(ctx context.Context, driver, dsn string) (string, error) {
	if dsn == "" {
		return "", fmt.Errorf("%s: no server given (flags -postgres, -mysql)", driver)
	}
	db, err := openDB(ctx, driver, dsn)
	if err != nil {
		return "", err
	}
	defer db.Close()
	if driver == "pgx" {
		var exists bool
		if err := db.QueryRowContext(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = 'sqllock_peers')").Scan(&exists); err != nil {
			return "", err
		}
		if !exists {
			if _, err := db.ExecContext(ctx, "CREATE DATABASE sqllock_peers"); err != nil {
				return "", err
			}
		}
		return withDatabase(dsn, "sqllock_peers", "/")
	}
	if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS sqllock_peers"); err != nil {
		return "", err
	}
	return withDatabase(dsn, "sqllock_peers", ")/")
}

// withDatabase replaces the database name in dsn, the path after sep (a
// URL's "/" after the host, or a MySQL DSN's ")/").
func withDatabase(dsn, name, sep string) (string, error) {
	start := strings.Index(dsn, sep)
	if sep == "/" {
		// postgres://user@host:port/db?params: the first "/" after "//".
		i := strings.Index(dsn, "//")
		if i < 0 {
			return "", fmt.Errorf("not a URL: %q", dsn)
		}
		start = strings.Index(dsn[i+2:], "/")
		if start >= 0 {
			start += i + 2
		}
	}
	if start < 0 {
		return "", fmt.Errorf("no database in %q", dsn)
	}
	rest := dsn[start+len(sep):]
	end := strings.IndexByte(rest, '?')
	if end < 0 {
		end = len(rest)
	}
	return dsn[:start+len(sep)] + name + rest[end:], nil
}

// counters reads the servers' statement counters, from connections to
// databases other than the bench database so that reading them counts in
// none.
type counters struct {
	pg, my *sql.DB
}

func openCounters(ctx context.Context, p params) (*counters, error) {
	c := &counters{}
	var err error
	for _, s := range p.systems {
		switch {
		case s.kind == "postgres" && c.pg == nil:
			var url string
			if url, err = withDatabase(p.cfg.Postgres, "postgres", "/"); err == nil {
				c.pg, err = openDB(ctx, "pgx", url)
			}
		case s.kind == "mysql" && c.my == nil:
			var dsn string
			if dsn, err = withDatabase(p.cfg.MySQL, "", ")/"); err == nil {
				c.my, err = openDB(ctx, "mysql", dsn)
			}
		}
		if err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// read returns the count of kind's server ("postgres": transactions
// committed in the bench database, once every session of it has ended and
// so reported its statistics; "mysql": statements clients sent), 0 for
// others.
func (c *counters) read(ctx context.Context, kind string) int64 {
	var n int64
	switch kind {
	case "postgres":
		// A backend reports its counts when it ends (and when idle, at
		// most once a second): wait for the bench's sessions to end.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			var live int
			if err := c.pg.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = 'sqllock_peers'").Scan(&live); err != nil || live == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		conn, err := c.pg.Conn(ctx)
		if err != nil {
			return 0
		}
		defer conn.Close()
		_, _ = conn.ExecContext(ctx, "SELECT pg_stat_clear_snapshot()")
		_ = conn.QueryRowContext(ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = 'sqllock_peers'").Scan(&n)
	case "mysql":
		var name string
		_ = c.my.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n)
	}
	return n
}

func (c *counters) close() {
	for _, db := range []*sql.DB{c.pg, c.my} {
		if db != nil {
			db.Close()
		}
	}
}

// loadAverage is the first three fields of /proc/loadavg ("?" elsewhere).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// uncontended runs acquire+release for p.uncontended on clients goroutines
// sharing one client, each on a name of its own, and returns ops/s.
func uncontended(ctx context.Context, p params, s system, clients, round int) (float64, error) {
	c, err := s.open(ctx, p.cfg)
	if err != nil {
		return 0, err
	}
	defer c.close()
	errs := make(chan error, clients)
	counts := make(chan int, clients)
	start := time.Now()
	deadline := start.Add(p.uncontended)
	for i := range clients {
		go func() {
			name := fmt.Sprintf("peers-u-%d-%d-%d", round, clients, i)
			n := 0
			for time.Now().Before(deadline) {
				release, err := c.acquire(ctx, name)
				if err == nil {
					err = release(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
				n++
			}
			counts <- n
		}()
	}
	total := 0
	for range clients {
		select {
		case err := <-errs:
			return 0, err
		case n := <-counts:
			total += n
		}
	}
	return float64(total) / time.Since(start).Seconds(), nil
}

// spec is what a worker process is told.
type spec struct {
	System string
	Config config
	Name   string // the lock
}

// handoff is what one hand-off run measured.
type handoff struct {
	grants  int
	perProc []int
	// latencies are, for every release while another process waited,
	// the time to the first grant that went to a process waiting at the
	// release: the next grant, unless a latecomer (the releaser asking
	// again, say) barged in first.
	latencies []time.Duration
	overlaps  int // grants before the previous holder called release: must be 0
}

// event is one grant: when its process asked, got it and called release
// (wall clock, ns).
type event struct {
	proc                        int
	requested, granted, release int64
}

// handoffRun starts waiters+1 worker processes on one name, lets them
// contend for p.handoff, and gathers their grants. With waiters 0 the one
// process warms up and ends (the setup cost).
func handoffRun(ctx context.Context, p params, s system, waiters int, name string) (handoff, error) {
	js, err := json.Marshal(spec{s.name, p.cfg, name})
	if err != nil {
		return handoff{}, err
	}
	type proc struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Reader
	}
	procs := make([]proc, max(1, waiters+1))
	if waiters == 0 {
		procs = procs[:1]
	}
	defer func() {
		for _, pr := range procs {
			if pr.cmd != nil && pr.cmd.Process != nil {
				_ = pr.cmd.Process.Kill()
				_ = pr.cmd.Wait()
			}
		}
	}()
	for i := range procs {
		cmd := exec.CommandContext(ctx, p.self)
		cmd.Env = append(os.Environ(), workerEnv+"="+string(js))
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return handoff{}, err
		}
		outp, err := cmd.StdoutPipe()
		if err != nil {
			return handoff{}, err
		}
		if err := cmd.Start(); err != nil {
			return handoff{}, err
		}
		procs[i] = proc{cmd, in, bufio.NewReader(outp)}
	}
	for i, pr := range procs {
		line, err := pr.out.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "ready" {
			return handoff{}, fmt.Errorf("worker %d did not start (%q, %v)", i, line, err)
		}
	}
	end := time.Now().Add(p.handoff)
	if waiters == 0 {
		end = time.Now()
	}
	for _, pr := range procs {
		if _, err := fmt.Fprintf(pr.stdin, "%d\n", end.UnixNano()); err != nil {
			return handoff{}, err
		}
		pr.stdin.Close()
	}
	var evs []event
	h := handoff{perProc: make([]int, len(procs))}
	for i, pr := range procs {
		for {
			line, err := pr.out.ReadString('\n')
			if err == io.EOF {
				break
			}
			if err != nil {
				return handoff{}, err
			}
			var e event
			if _, err := fmt.Sscanf(line, "%d %d %d", &e.requested, &e.granted, &e.release); err != nil {
				return handoff{}, fmt.Errorf("worker %d: %q: %w", i, line, err)
			}
			e.proc = i
			evs = append(evs, e)
			h.perProc[i]++
		}
		if err := pr.cmd.Wait(); err != nil {
			return handoff{}, fmt.Errorf("worker %d: %w", i, err)
		}
		procs[i].cmd = nil
	}
	if waiters == 0 {
		return h, nil
	}
	l := latencies(evs)
	h.grants, h.latencies, h.overlaps = l.grants, l.latencies, l.overlaps
	return h, nil
}

// latencies sorts the grants of a run and times its hand-offs.
func latencies(evs []event) handoff {
	slices.SortFunc(evs, func(a, b event) int { return int(a.granted - b.granted) })
	h := handoff{grants: len(evs)}
	for i := 1; i < len(evs); i++ {
		if evs[i].granted < evs[i-1].release {
			h.overlaps++
		}
	}
	for i, r := range evs {
		for _, e := range evs[i+1:] {
			// Each process asks once at a time: one that asked before the
			// release and was granted after it waited at the release.
			if e.requested <= r.release {
				h.latencies = append(h.latencies, time.Duration(e.granted-r.release))
				break
			}
		}
	}
	return h
}

// worker is one process of a hand-off run: it connects, warms up on a name
// of its own, says "ready", reads the end of the run (Unix ns) and loops
// acquire, release on the run's name until then (asking again at once:
// with waiters+1 processes, waiters wait at every release), then prints one
// line per grant: when it asked, got it and released (Unix ns).
func worker(js string, in io.Reader, out io.Writer) error {
	var sp spec
	if err := json.Unmarshal([]byte(js), &sp); err != nil {
		return err
	}
	s, err := lookup(sp.System)
	if err != nil {
		return err
	}
	ctx := context.Background()
	c, err := s.open(ctx, sp.Config)
	if err != nil {
		return err
	}
	defer c.close()
	warm, err := c.acquire(ctx, fmt.Sprintf("%s-warm-%d", sp.Name, os.Getpid()))
	if err == nil {
		err = warm(ctx)
	}
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return err
	}
	var endNs int64
	if _, err := fmt.Fscan(in, &endNs); err != nil {
		return fmt.Errorf("reading the start: %w", err)
	}
	runCtx, cancel := context.WithDeadline(ctx, time.Unix(0, endNs))
	defer cancel()
	var evs []event
	for runCtx.Err() == nil {
		asked := time.Now().UnixNano()
		release, err := c.acquire(runCtx, sp.Name)
		if err != nil {
			if runCtx.Err() != nil {
				break
			}
			return err
		}
		e := event{requested: asked, granted: time.Now().UnixNano()}
		e.release = time.Now().UnixNano()
		if err := release(ctx); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		evs = append(evs, e)
	}
	w := bufio.NewWriter(out)
	for _, e := range evs {
		fmt.Fprintf(w, "%d %d %d\n", e.requested, e.granted, e.release)
	}
	return errors.Join(w.Flush())
}
