package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/faultproxy"
	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/observe"
)

// Environment variables of the chaos suite.
const (
	// durationEnv sets how long each scenario runs (default 3s); soakEnv,
	// if set, is the whole run's length, shared out among the scenarios.
	durationEnv = "SQLLOCK_CHAOS_DURATION"
	soakEnv     = "SQLLOCK_CHAOS_SOAK"
	// strategiesEnv, if set, is a comma-separated list of the strategies
	// to run (default: all of strategies).
	strategiesEnv = "SQLLOCK_CHAOS_STRATEGIES"
	// restartEnv, if set to 1, adds the scenario that restarts the
	// database servers mid-run (it needs the rights to do so).
	restartEnv = "SQLLOCK_CHAOS_RESTART"
	// childEnv makes the test binary a worker process (JSON config).
	childEnv = "SQLLOCK_CHAOS_CHILD"
	// errorsEnv, if set, makes each scenario log its failures by cause.
	errorsEnv = "SQLLOCK_CHAOS_ERRORS"
	// reportEnv, if set, names a file the summary is appended to (go test
	// shows a passing package's output only with -v; scripts/test.sh
	// prints this file instead).
	reportEnv = "SQLLOCK_CHAOS_REPORT"
	// keepEnv, if set, names a directory each scenario writes its history
	// and guarded data into, in the format of the package documentation.
	keepEnv = "SQLLOCK_CHAOS_KEEP"
)

func TestMain(m *testing.M) {
	// Killed connections are the point here: the driver's log of each is
	// noise.
	_ = gomysql.SetLogger(log.New(io.Discard, "", 0))
	testutil.ChildMain(childEnv, config.runChild)
	code := m.Run()
	printSummary()
	os.Exit(dbtest.Finish(code))
}

// setup is one scenario's database: a migrated lock schema, the guarded
// data, and how worker pools reach it.
type setup struct {
	kind  string // "postgres", "mysql" or "tidb"
	ns    string
	admin *sql.DB // the shared pool: setup, reading the results, killing connections
	dsn   string  // for worker pools; its host is replaced when a proxy is used
	app   string  // PostgreSQL application_name of the workers' connections
}

func newSetup(t *testing.T, kind string, names []string) *setup {
	s := &setup{kind: kind}
	switch kind {
	case "postgres":
		s.admin, s.ns = dbtest.Postgres(t)
		s.dsn = dbtest.PostgresURL(t)
		s.app = "chaos_" + s.ns
	case "mysql":
		s.admin, s.ns = dbtest.MySQL(t)
		s.dsn = dbtest.MySQLDSN(t)
	case "tidb":
		s.admin, s.ns = dbtest.TiDB(t)
		s.dsn = dbtest.TiDBDSN(t)
	}
	ctx := t.Context()
	d := s.dialect(t, s.admin)
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	st, err := NewStore(d, s.ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Create(ctx, names); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *setup) dialect(t testing.TB, db *sql.DB) dialect.Dialect {
	d, err := newDialect(s.kind, db, s.ns, false)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// newDialect returns the dialect of kind on db, in namespace ns; pooler
// makes a PostgreSQL dialect fit for a transaction pooler
// (postgres.WithPooler).
func newDialect(kind string, db *sql.DB, ns string, pooler bool) (dialect.Dialect, error) {
	switch kind {
	case "postgres":
		if pooler {
			return postgres.New(db, postgres.WithSchema(ns), postgres.WithPooler())
		}
		return postgres.New(db, postgres.WithSchema(ns))
	case "tidb":
		return mysql.NewTiDB(db, mysql.WithDatabase(ns))
	}
	return mysql.New(db, mysql.WithDatabase(ns))
}

// workerDSN is the DSN of the workers' pools: through addr if not empty,
// tagged so that their connections can be told from others', and with
// session parameters params (name=value).
func (s *setup) workerDSN(addr string, params map[string]string) (string, error) {
	if s.kind == "postgres" {
		u, err := url.Parse(s.dsn)
		if err != nil {
			return "", err
		}
		if addr != "" {
			u.Host = addr
		}
		q := u.Query()
		q.Set("application_name", s.app)
		for k, v := range params {
			q.Set(k, v)
		}
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	c, err := gomysql.ParseDSN(s.dsn)
	if err != nil {
		return "", err
	}
	if addr != "" {
		c.Addr = addr
	}
	c.DBName = s.ns // the processlist shows the workers' connections in this database
	if c.Params == nil {
		c.Params = map[string]string{}
	}
	for k, v := range params {
		c.Params[k] = v
	}
	return c.FormatDSN(), nil
}

// proxied returns a fault proxy to the database, closed when t ends, and
// the workers' DSN through it.
func (s *setup) proxied(t *testing.T) (*faultproxy.Proxy, string) {
	t.Helper()
	proxy, err := faultproxy.New(s.host())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	dsn, err := s.workerDSN(proxy.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return proxy, dsn
}

// process opens what a process of its own would have: a pool on dsn and
// the dialect on it, both closed when t ends.
func (s *setup) process(t *testing.T, dsn string) (dialect.Dialect, *sql.DB) {
	t.Helper()
	db, err := sql.Open(driverOf(s.kind), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := newDialect(s.kind, db, s.ns, false)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := d.(interface{ Close(context.Context) error }); ok {
		t.Cleanup(func() { c.Close(context.Background()) })
	}
	return d, db
}

func (s *setup) host() string {
	if s.kind == "postgres" {
		u, _ := url.Parse(s.dsn)
		return u.Host
	}
	c, _ := gomysql.ParseDSN(s.dsn)
	return c.Addr
}

func driverOf(kind string) string {
	if kind == "postgres" {
		return "pgx"
	}
	return "mysql"
}

// killOne kills one connection of the workers, preferring those inside a
// transaction (a holder mid-hold), and reports whether it found one.
func (s *setup) killOne(ctx context.Context) (bool, error) {
	if s.kind == "postgres" {
		var ok bool
		err := s.admin.QueryRowContext(ctx, `
			SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE application_name = $1 AND pid <> pg_backend_pid()
			ORDER BY xact_start IS NULL, random() LIMIT 1`, s.app).Scan(&ok)
		if err == sql.ErrNoRows {
			return false, nil
		}
		return ok, err
	}
	q := `SELECT p.id FROM information_schema.processlist p
		LEFT JOIN information_schema.innodb_trx t ON t.trx_mysql_thread_id = p.id
		WHERE p.db = ? AND p.id <> CONNECTION_ID()
		ORDER BY t.trx_id IS NULL, RAND() LIMIT 1`
	if s.kind == "tidb" {
		// Only connections outside a transaction: KILL CONNECTION of a
		// session with an open transaction crashes the TiDB server of the
		// test bed (a TiDB bug: "panic: Query execution was interrupted"
		// in its memory tracker). Such a session is killed the moment
		// after its transaction ends, or the moment before it begins one
		// (see tidbSkip).
		q = `SELECT id FROM information_schema.processlist
		WHERE db = ? AND id <> CONNECTION_ID() AND txnstart = ''
		ORDER BY RAND() LIMIT 1`
	}
	var id int64
	err := s.admin.QueryRowContext(ctx, q, s.ns).Scan(&id)
	if err == sql.ErrNoRows {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_, err = s.admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
	if err != nil && strings.Contains(err.Error(), "Unknown thread") {
		return false, nil // it ended meanwhile
	}
	return err == nil, err
}

// config is what a worker (goroutine or process) is built from.
type config struct {
	Kind, DSN, NS, Strategy string
	Names                   []string
	TTL, Hold, Think, Wait  time.Duration
	KeepAlive               time.Duration
	TryEvery                int
	Worker                  string
	Seed                    uint64
	Pooler                  bool // through a transaction pooler
	// Ledger, if set, makes the process a replica of the run ledger's
	// scenario (ledger_chaos_test.go) instead of a worker.
	Ledger *ledgerReplica `json:",omitempty"`
}

const (
	ttl       = time.Second
	keepAlive = 200 * time.Millisecond
	// The Reaper beside every scenario's workers, as production runs
	// one: often, and in small batches, so that it deletes rows while
	// they are being contended for.
	reaperInterval = 20 * time.Millisecond
	reaperBatch    = 10
	// goalDeadline bounds how long a scenario keeps going, past its
	// duration, to reach the states its checks need (see run.unmet).
	goalDeadline = time.Minute
	// idleTimeout is the servers' idle-in-transaction timeout for the
	// pessimistic workers' sessions in process scenarios: a paused holder's
	// session is ended after it, as a real deployment would set it.
	idleTimeout = time.Second
)

// open builds a worker's pool, locker (a sqllock.Locker, or a
// *sqllock.Election for the election strategy) and store, and what closes
// the pool and the dialect (with its listening connection, on PostgreSQL).
func (c config) open() (func(), any, *Store, error) {
	db, err := sql.Open(driverOf(c.Kind), c.DSN)
	if err != nil {
		return nil, nil, nil, err
	}
	db.SetMaxOpenConns(20)
	db.SetMaxIdleConns(20)
	d, err := newDialect(c.Kind, db, c.NS, c.Pooler)
	var l any
	if err == nil {
		// Renewals and FIFO tickets go into the history (see fair.go).
		ttl, obs := c.TTL, HistoryTracer{TTL: c.TTL}
		switch c.Strategy {
		case "election":
			l, err = sqllock.NewElection(d, sqllock.LeaseOptions{TTL: ttl, Observer: obs})
		case "table", "multi":
			l, err = sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl, Observer: obs}})
		case "fair":
			l, err = sqllock.NewTable(TraceTickets(d), sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl, Observer: obs}, Fair: true})
		case "optimistic":
			l, err = sqllock.NewOptimistic(d, sqllock.OptimisticOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl, Observer: obs}})
		case "pessimistic":
			l, err = sqllock.NewPessimistic(d, sqllock.PessimisticOptions{KeepAlive: c.KeepAlive})
		case "semaphore":
			l, err = sqllock.NewSemaphore(d, semaphoreLimit, sqllock.SemaphoreOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl, Observer: obs}})
		case "fairsem":
			l, err = sqllock.NewSemaphore(TraceTickets(d), semaphoreLimit, sqllock.SemaphoreOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl, Observer: obs}, Fair: true})
		case "rwlock", "rwsides":
			l, err = sqllock.NewRWLock(d, sqllock.LeaseOptions{TTL: ttl, Observer: obs})
		default:
			err = fmt.Errorf("unknown strategy %q", c.Strategy)
		}
	}
	var st *Store
	if err == nil {
		st, err = NewStore(d, c.NS)
	}
	if err != nil {
		db.Close()
		return nil, nil, nil, err
	}
	closeAll := func() {
		if c, ok := d.(interface{ Close(context.Context) error }); ok {
			_ = c.Close(context.Background())
		}
		db.Close()
	}
	return closeAll, l, st, nil
}

func (c config) worker(l any, st *Store, rec *Recorder) *Worker {
	locker, _ := l.(sqllock.Locker)
	election, _ := l.(*sqllock.Election)
	w := &Worker{ID: c.Worker, Locker: locker, Election: election, Store: st, Pessimistic: c.Strategy == "pessimistic", Sets: c.Strategy == "multi", Sides: c.Strategy == "rwsides",
		Names: c.Names, Hold: c.Hold, Think: c.Think, Wait: c.Wait, TryEvery: c.TryEvery,
		Rec: rec, Rand: rand.New(rand.NewPCG(c.Seed, 0x5eed))}
	if !w.Pessimistic {
		w.TTL = c.TTL
	}
	return w
}

// runChild is a worker process (see testutil.ChildMain in TestMain): it
// takes turns until its standard input closes, writing its events to
// standard output.
func (c config) runChild() error {
	if c.Ledger != nil {
		return c.Ledger.run()
	}
	closeAll, l, st, err := c.open()
	if err != nil {
		return fmt.Errorf("chaos child: %w", err)
	}
	defer closeAll()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	rec := NewRecorder(os.Stdout)
	c.worker(l, st, rec).Run(ctx)
	if err := rec.Err(); err != nil {
		return fmt.Errorf("chaos child: %w", err)
	}
	return nil
}

// fault kinds of the scenarios.
const (
	noFault  = "none"
	connKill = "conn-kill"
	proxied  = "proxy"
	pause    = "sigstop"
	crash    = "sigkill"
	restart  = "restart"
)

// strategies are the scenarios' lockers; "multi" is the lock table taking
// sets of names at once (Table.AcquireAll); "fair" the lock table with
// Options.Fair, "fairsem" the semaphore with it; "rwsides" the read/write
// lock whose holds change sides (Downgrade, upgradeable reads, Upgrade).
var strategies = []string{"table", "fair", "optimistic", "pessimistic", "semaphore", "fairsem", "rwlock", "election", "multi", "rwsides"}

// tidbSkip returns why a scenario is not run on TiDB, or "".
func tidbSkip(strategy, fault string) string {
	switch {
	case strategy == "fair":
		return "TiDB has no FIFO queue (ErrUnsupported)"
	case strategy == "semaphore", strategy == "fairsem":
		return "TiDB's dialect has no semaphores"
	case strategy == "rwlock", strategy == "rwsides":
		return "TiDB has no read/write locks"
	case strategy == "election":
		return "TiDB offers no leader election"
	case strategy == "multi":
		return "the TiDB dialect does not acquire sets of names (sqllock.ErrUnsupported)"
	case fault == restart:
		return "make test-tidb runs one TiDB server, which the suite does not restart"
	case fault == connKill && strategy == "pessimistic":
		// See killOne: only sessions outside a transaction are killed on
		// TiDB, and a pessimistic worker's session hardly ever is.
		return "KILL CONNECTION of a session inside a transaction crashes the TiDB server of the test bed"
	case fault == proxied:
		// The proxy resets connections, some in the middle of a
		// statement inside a transaction (a grant's, a held row lock's):
		// the session is then interrupted and closed with its transaction
		// open, which crashed the TiDB server of the test bed with the same
		// panic (in the table and pessimistic scenarios, about one run in
		// three).
		return "a connection reset inside a transaction can crash the TiDB server of the test bed"
	}
	return ""
}

func scenarios() []string {
	s := []string{noFault, connKill, proxied, pause, crash}
	if os.Getenv(restartEnv) == "1" {
		s = append(s, restart)
	}
	return s
}

// selectedStrategies returns the strategies strategiesEnv names, in the
// order of strategies, or all of them when it is unset.
func selectedStrategies(t *testing.T) []string {
	v := os.Getenv(strategiesEnv)
	if v == "" {
		return strategies
	}
	want := strings.Split(v, ",")
	for _, s := range want {
		if !slices.Contains(strategies, s) {
			t.Fatalf("%s: unknown strategy %q; the strategies are %s", strategiesEnv, s, strings.Join(strategies, ","))
		}
	}
	var out []string
	for _, s := range strategies {
		if slices.Contains(want, s) {
			out = append(out, s)
		}
	}
	return out
}

func scenarioDuration(t *testing.T) time.Duration {
	if v := os.Getenv(soakEnv); v != "" {
		total, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", soakEnv, err)
		}
		// The two databases run side by side; scenarios one after another.
		return total / time.Duration(len(selectedStrategies(t))*len(scenarios()))
	}
	if v := os.Getenv(durationEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", durationEnv, err)
		}
		return d
	}
	return 3 * time.Second
}

// TestChaos runs every strategy on both databases under each fault, and
// checks the histories.
func TestChaos(t *testing.T) {
	dur := scenarioDuration(t)
	kinds := []string{"postgres", "mysql"}
	if os.Getenv(dbtest.TiDBDSNEnv) != "" { // opt-in: make test-tidb
		kinds = append(kinds, "tidb")
	}
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			for _, strat := range selectedStrategies(t) {
				for _, sc := range scenarios() {
					t.Run(strat+"/"+sc, func(t *testing.T) {
						if why := tidbSkip(strat, sc); kind == "tidb" && why != "" {
							t.Skip(why)
						}
						runScenario(t, kind, strat, sc, dur)
					})
				}
			}
		})
	}
}

// TestChaosThroughPgBouncer runs every strategy on PostgreSQL through
// PgBouncer in transaction pooling (with postgres.WithPooler) and in session
// pooling, while server connections are killed behind the pooler, and
// checks the histories.
func TestChaosThroughPgBouncer(t *testing.T) {
	dur := min(scenarioDuration(t), 3*time.Second)
	for _, mode := range dbtest.PoolModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			for _, strat := range selectedStrategies(t) {
				t.Run(strat+"/"+connKill, func(t *testing.T) {
					runScenarioThrough(t, "postgres", strat, connKill, dur, mode)
				})
			}
		})
	}
}

// run is one scenario in progress.
type run struct {
	t        *testing.T
	kind     string
	strategy string
	fault    string
	s        *setup
	names    []string
	dur      time.Duration
	start    int64 // when the workers started, Unix nanoseconds
	// pool, if set, sends the workers (in goroutines) through the test
	// PgBouncer in this pool mode.
	pool dbtest.PoolMode

	// What check found: the history in time order, the guarded data and
	// the checker's verdict.
	history    []Event
	data       Data
	violations []Violation

	mu     sync.Mutex
	events []Event
	live   *Recorder // the goroutine scenarios' events while they run
	faults map[string]int
	notes  []string
	pauses []pauseNote
	kills  []killNote
	more   func() // adds a worker to a goroutine scenario; nil if it cannot

	soft   time.Duration // a process scenario's length if its checks' states are reached by then
	reaped reapCounter
}

func (r *run) add(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *run) count(fault string, n int) {
	r.mu.Lock()
	r.faults[fault] += n
	r.mu.Unlock()
}

func (r *run) base(worker string, seed uint64) config {
	return config{Kind: r.kind, NS: r.s.ns, Strategy: r.strategy, Names: r.names,
		TTL: ttl, Hold: 100 * time.Millisecond, Think: 20 * time.Millisecond,
		Wait: 3*ttl + 2*time.Second, KeepAlive: keepAlive, TryEvery: 4,
		Worker: worker, Seed: seed, Pooler: r.pool == dbtest.Transaction}
}

// runScenario runs and checks one scenario, and returns it once checked.
func runScenario(t *testing.T, kind, strat, fault string, dur time.Duration) *run {
	return runScenarioThrough(t, kind, strat, fault, dur, "")
}

// runScenarioThrough is runScenario with the workers' connections through
// the test PgBouncer in pool mode (PostgreSQL, goroutine scenarios), or
// directly if pool is "".
func runScenarioThrough(t *testing.T, kind, strat, fault string, dur time.Duration, pool dbtest.PoolMode) *run {
	names := []string{"chaos:a", "chaos:b"}
	r := &run{t: t, kind: kind, strategy: strat, fault: fault, s: newSetup(t, kind, names),
		names: names, dur: dur, faults: map[string]int{}, pool: pool}
	var (
		ctx    context.Context
		cancel context.CancelFunc
		wg     sync.WaitGroup
	)
	if fault == pause || fault == crash {
		// Room for a few faults, each followed by a takeover (r.soft);
		// past it, the scenario goes on until its checks' states are
		// reached (see processes), at most goalDeadline. The faults keep
		// to the deadline, so that each has time to see its takeover.
		r.soft = max(dur, 4*(2*ttl)+ttl+2*time.Second)
		ctx, cancel = context.WithTimeout(t.Context(), max(r.soft, goalDeadline))
	} else {
		ctx, cancel = context.WithCancel(t.Context())
		wg.Go(func() { r.stopAfter(ctx, cancel, dur) })
	}
	defer cancel()
	r.startReaper(ctx, &wg)
	r.start = time.Now().UnixNano()
	switch fault {
	case pause, crash:
		r.processes(ctx)
	default:
		r.goroutines(ctx)
	}
	cancel()
	wg.Wait()
	r.check()
	return r
}

// startReaper runs a sqllock.Reaper beside the workers until ctx ends, as
// production runs one, on a pool of its own whose connections the faults
// of the scenario may kill as they kill the workers' (conn-kill), and
// counts its passes for the report.
func (r *run) startReaper(ctx context.Context, wg *sync.WaitGroup) {
	t := r.t
	dsn, err := r.s.workerDSN("", nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open(driverOf(r.kind), dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	d, err := newDialect(r.kind, db, r.s.ns, false)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	reaper, err := sqllock.NewReaper(d, sqllock.ReaperOptions{Interval: reaperInterval, BatchSize: reaperBatch, Observer: &r.reaped})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	wg.Go(func() {
		defer db.Close()
		if c, ok := d.(interface{ Close(context.Context) error }); ok {
			defer func() { _ = c.Close(context.Background()) }()
		}
		_ = reaper.Run(ctx)
	})
}

// reapCounter counts a Reaper's passes (observe.ReapObserver).
type reapCounter struct {
	passes, failed, deleted atomic.Int64
}

func (c *reapCounter) Reaped(_ context.Context, e observe.ReapEvent) {
	c.passes.Add(1)
	c.deleted.Add(int64(e.Deleted))
	if e.Err != nil && !errors.Is(e.Err, context.Canceled) {
		c.failed.Add(1)
	}
}

// stopAfter ends a goroutine scenario (cancel) once dur has passed and its
// history so far has reached every state its checks need (run.unmet), or
// at goalDeadline whatever it holds: a scenario whose faults slow its
// workers down, on a loaded host, may get less done in dur than the checks
// need. Meanwhile it drives the workload towards those states: every
// second past dur, it adds a worker (up to 4 more), so that there are
// more waiters and more work.
func (r *run) stopAfter(ctx context.Context, cancel context.CancelFunc, dur time.Duration) {
	defer cancel()
	added := 0
	defer func() {
		if added > 0 {
			r.note(fmt.Sprintf("%d workers added to reach the checked states", added))
		}
	}()
	limit := time.NewTimer(max(5*dur, goalDeadline))
	defer limit.Stop()
	at := time.NewTimer(dur)
	defer at.Stop()
	select {
	case <-ctx.Done():
		return
	case <-at.C:
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for {
		if r.unmet() == "" {
			return
		}
		r.mu.Lock()
		more := r.more
		r.mu.Unlock()
		if more != nil && added < 4 && time.Since(last) >= time.Second {
			more()
			added, last = added+1, time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-limit.C:
			return
		case <-tick.C:
		}
	}
}

// unmet returns, of the states that the scenario's checks need its
// workload to have reached, the first one its history so far has not
// reached, or "" once all are: enough work (enoughWork); for a fair
// strategy, a waiter granted with a ticket (so that the FIFO order was put
// to the test); the fault injected; for sigstop, a paused holder whose
// lock was taken over meanwhile; for sigkill, a killed holder and, for
// each kill with a waiter, its takeover (or its bound passed).
func (r *run) unmet() string {
	r.mu.Lock()
	var events []Event
	if r.live != nil {
		r.mu.Unlock()
		events = r.live.Events()
		r.mu.Lock()
	} else {
		events = slices.Clone(r.events)
	}
	faults := 0
	for _, n := range r.faults {
		faults += n
	}
	ps, ks := slices.Clone(r.pauses), slices.Clone(r.kills)
	r.mu.Unlock()
	if st := stats(events); !enoughWork(st) {
		return fmt.Sprintf("too little work to prove anything: %d acquisitions, %d committed writes", st.acquired, st.written)
	}
	if (r.strategy == "fair" || r.strategy == "fairsem") && ticketedGrants(events) == 0 {
		return "no waiter holding a ticket was granted: the FIFO order was not put to the test"
	}
	if r.strategy != "election" && !slices.ContainsFunc(events, func(e Event) bool { return e.Try }) {
		return "no TryAcquire turn was taken (every fourth turn of a worker)"
	}
	if (r.strategy == "rwlock" || r.strategy == "rwsides") && !slices.ContainsFunc(events, func(e Event) bool { return e.Shared }) {
		return "no read-side acquisition was tried"
	}
	if r.strategy == "rwsides" {
		for _, k := range []Kind{DowngradeOK, UpgradeOK} {
			if !slices.ContainsFunc(events, func(e Event) bool { return e.Kind == k }) {
				return fmt.Sprintf("no %s event: no hold changed sides that way", k)
			}
		}
	}
	switch r.fault {
	case connKill, proxied, restart:
		if faults == 0 {
			return "no fault was injected"
		}
	case pause:
		if len(ps) == 0 {
			return "no holder was paused"
		}
		taken := 0
		for _, p := range ps {
			if takenOver(events, p) {
				taken++
			}
		}
		if taken == 0 {
			return fmt.Sprintf("none of %d pauses saw a takeover", len(ps))
		}
	case crash:
		if len(ks) == 0 {
			return "no holder was killed"
		}
		sort.SliceStable(events, func(i, j int) bool { return events[i].At < events[j].At })
		for _, k := range ks {
			if waiters(events, k) && nextGrant(events, k) == 0 && time.Since(time.Unix(0, k.at)) < r.killBound()+time.Second {
				return fmt.Sprintf("the takeover of %s's %q, killed, is not seen yet", k.victim.Worker, k.victim.Name)
			}
		}
	}
	return ""
}

// ticketedGrants counts the grants of Acquire calls that held a FIFO
// ticket.
func ticketedGrants(events []Event) int {
	ticketed := map[opKey]bool{}
	n := 0
	for _, e := range events {
		k := opKey{e.Worker, e.Op}
		switch e.Kind {
		case Enqueued:
			ticketed[k] = true
		case AcquireOK:
			if ticketed[k] {
				n++
				delete(ticketed, k)
			}
		}
	}
	return n
}

// enoughWork reports whether a history has work enough for its checks to
// prove anything: a few grants, and guarded writes beyond the first.
func enoughWork(st tally) bool { return st.acquired >= 3 && st.written >= 2 }

// goroutines runs four workers in two lockers (as if two processes of two
// goroutines each) with the scenario's fault injected between them and the
// database.
func (r *run) goroutines(ctx context.Context) {
	t := r.t
	addr := ""
	var proxy *faultproxy.Proxy
	if r.fault == proxied {
		var err error
		proxy, err = faultproxy.New(r.s.host())
		if err != nil {
			t.Fatal(err)
		}
		defer proxy.Close()
		addr = proxy.Addr()
	}
	if r.pool != "" {
		u, err := url.Parse(dbtest.PgBouncerURL(t, r.pool))
		if err != nil {
			t.Fatal(err)
		}
		addr = u.Host
	}
	dsn, err := r.s.workerDSN(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	rec := NewRecorder(nil)
	r.mu.Lock()
	r.live = rec
	r.mu.Unlock()
	type locker struct {
		c  config
		l  any
		st *Store
		i  int // its index
		n  int // its workers
	}
	var lockers []*locker
	add := func(k *locker) {
		c := k.c
		c.Worker = fmt.Sprintf("%sg%d", k.c.Worker, k.n)
		c.Seed = uint64(10*k.i + k.n)
		k.n++
		w := c.worker(k.l, k.st, rec)
		wg.Go(func() { w.Run(ctx) })
	}
	for p := range 2 {
		c := r.base(fmt.Sprintf("p%d", p), uint64(p))
		c.DSN = dsn
		closeAll, l, st, err := c.open()
		if err != nil {
			t.Fatal(err)
		}
		defer closeAll()
		k := &locker{c: c, l: l, st: st, i: p}
		for range 2 {
			add(k)
		}
		lockers = append(lockers, k)
	}
	// stopAfter adds workers, one locker then the other, before it ends
	// the scenario: so before the workers' WaitGroup is waited for.
	r.mu.Lock()
	r.more = func() {
		k := lockers[0]
		if lockers[1].n < k.n {
			k = lockers[1]
		}
		add(k)
	}
	r.mu.Unlock()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	switch r.fault {
	case connKill:
		r.every(ctx, rng, 100*time.Millisecond, 300*time.Millisecond, func() {
			kctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ok, err := r.s.killOne(kctx)
			if err != nil {
				t.Errorf("killing a connection: %v", err)
			} else if ok {
				r.count("connections killed", 1)
			}
		})
	case proxied:
		// Each fault in turn, so that a short run sees every one.
		step := 0
		r.every(ctx, rng, 150*time.Millisecond, 400*time.Millisecond, func() {
			switch step++; step % 6 {
			case 0, 3:
				proxy.SetLatency(time.Duration(rng.IntN(30))*time.Millisecond, 20*time.Millisecond)
				r.count("latency changes", 1)
			case 1, 4:
				r.count("connections reset", proxy.ResetRandom(0.3, rng))
			case 2:
				proxy.Stall(ttl / 5)
				r.count("short stalls", 1)
			case 5:
				writes := rec.Count(WriteOK)
				proxy.Stall(ttl + ttl/5) // longer than a lease: leases are lost
				r.count("stalls past the TTL", 1)
				proxy.SetLatency(0, 0)
				// Every lease is gone: the next round of faults waits for
				// a guarded write after this one, so that the workers get
				// work done between rounds however slow the host or the
				// primitive (a read/write lock's writers take one turn
				// in three).
				rec.WaitFor(ctx, WriteOK, writes+1)
			}
		})
		proxy.SetLatency(0, 0)
	case restart:
		r.restartServer(ctx)
	}
	wg.Wait()
	for _, e := range rec.Events() {
		r.add(e)
	}
}

// every calls f at random intervals in [lo, hi) until ctx ends.
func (r *run) every(ctx context.Context, rng *rand.Rand, lo, hi time.Duration, f func()) {
	for {
		tm := time.NewTimer(lo + time.Duration(rng.Int64N(int64(hi-lo))))
		select {
		case <-ctx.Done():
			tm.Stop()
			return
		case <-tm.C:
		}
		f()
	}
}

// restartServer restarts the database server once, in the middle of the
// run.
func (r *run) restartServer(ctx context.Context) {
	tm := time.NewTimer(r.dur / 3)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return
	case <-tm.C:
	}
	var cmd string
	if r.kind == "postgres" {
		cmd = `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main restart -m fast`
	} else {
		cmd = `start-stop-daemon --stop --retry 30 --exec /usr/sbin/mariadbd && start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd`
	}
	out, err := exec.Command("bash", "-c", cmd).CombinedOutput()
	if err != nil {
		r.t.Errorf("restarting %s: %v\n%s", r.kind, err, out)
		return
	}
	r.count("server restarts", 1)
	// Back before the scenario ends, so that the next one finds it up.
	up, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for up.Err() == nil {
		if err := r.s.admin.PingContext(up); err == nil {
			return
		}
		tm := time.NewTimer(100 * time.Millisecond)
		select {
		case <-up.Done():
		case <-tm.C:
		}
		tm.Stop()
	}
	r.t.Errorf("%s did not come back within a minute of its restart", r.kind)
}

// child is a worker process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	id    string
	done  chan struct{} // its events are all read
}

// processes runs four worker processes and stops or kills holders as they
// acquire.
func (r *run) processes(ctx context.Context) {
	t := r.t
	var params map[string]string
	if r.strategy == "pessimistic" {
		// As a deployment would: sessions idle in a transaction for longer
		// than this are ended by the server, which frees a stopped holder's
		// row locks. The keep-alive keeps a running holder's session busy.
		switch r.kind {
		case "postgres":
			params = map[string]string{"idle_in_transaction_session_timeout": fmt.Sprint(idleTimeout.Milliseconds())}
		case "tidb":
			params = map[string]string{"tidb_idle_transaction_timeout": fmt.Sprint(int(idleTimeout.Seconds()))}
		default:
			params = map[string]string{"idle_transaction_timeout": fmt.Sprint(int(idleTimeout.Seconds()))}
		}
	}
	dsn, err := r.s.workerDSN("", params)
	if err != nil {
		t.Fatal(err)
	}
	acquired := make(chan Event, 1024)
	var mu sync.Mutex
	children := map[string]*child{}
	n := 0
	start := func() {
		n++
		c := r.base(fmt.Sprintf("c%d", n), uint64(n))
		c.DSN = dsn
		c.Hold = 300 * time.Millisecond // long enough for a fault to land before the write
		cmd, err := testutil.ChildCommand(context.Background(), childEnv, c)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ch := &child{cmd: cmd, stdin: stdin, id: c.Worker, done: make(chan struct{})}
		mu.Lock()
		children[c.Worker] = ch
		mu.Unlock()
		go func() {
			defer close(ch.done)
			err := ReadEvents(stdout, func(e Event) {
				r.add(e)
				if e.Kind == AcquireOK {
					select {
					case acquired <- e:
					default:
					}
				}
			})
			if err != nil {
				t.Errorf("reading the events of %s: %v", c.Worker, err)
			}
		}()
	}
	for range 4 {
		start()
	}

	// The fault: on an acquisition, stop or kill the holder, at most one
	// at a time, with a pause between faults so that work also gets done.
	// Past r.soft, the run ends as soon as every state its checks need is
	// reached (run.unmet); until then faults go on, to the deadline.
	lastFault := time.Time{}
	soft := time.Now().Add(r.soft)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	func() {
		for {
			var e Event
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if time.Now().After(soft) && r.unmet() == "" {
					return
				}
				continue
			case e = <-acquired:
			}
			// Only a fresh grant: its holder is still holding (the channel
			// fills up while a fault is under way).
			if time.Since(lastFault) < 2*ttl || time.Since(e.Time()) > 50*time.Millisecond {
				continue
			}
			if time.Until(soft) < ttl+2*time.Second && r.unmet() == "" {
				continue // faults enough: leave time to see the takeover
			}
			if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < r.killBound()+2*time.Second {
				continue // leave time to see the takeover
			}
			mu.Lock()
			victim := children[e.Worker]
			mu.Unlock()
			if victim == nil {
				continue
			}
			p := victim.cmd.Process
			switch r.fault {
			case pause:
				stopAt := time.Now().UnixNano()
				if p.Signal(syscall.SIGSTOP) != nil {
					continue
				}
				length := 2*ttl + 200*time.Millisecond
				if r.strategy == "pessimistic" {
					length = 2*idleTimeout + 500*time.Millisecond
				}
				tm := time.NewTimer(length)
				<-tm.C
				if err := p.Signal(syscall.SIGCONT); err != nil {
					t.Errorf("SIGCONT: %v", err)
				}
				r.mu.Lock()
				r.pauses = append(r.pauses, pauseNote{victim: e, stop: stopAt, cont: time.Now().UnixNano()})
				r.mu.Unlock()
				r.count("holders paused past the TTL", 1)
			case crash:
				killAt := time.Now().UnixNano()
				if p.Signal(syscall.SIGKILL) != nil {
					continue
				}
				mu.Lock()
				delete(children, e.Worker)
				mu.Unlock()
				<-victim.done // all its events are read: only then Wait
				_ = victim.cmd.Wait()
				r.mu.Lock()
				r.kills = append(r.kills, killNote{victim: e, at: killAt})
				r.mu.Unlock()
				r.count("holders killed", 1)
				start()
			}
			lastFault = time.Now()
		}
	}()

	mu.Lock()
	all := make([]*child, 0, len(children))
	for _, c := range children {
		all = append(all, c)
	}
	mu.Unlock()
	for _, c := range all {
		_ = c.stdin.Close()
	}
	for _, c := range all {
		tm := time.AfterFunc(30*time.Second, func() { _ = c.cmd.Process.Kill() })
		<-c.done
		if err := c.cmd.Wait(); err != nil {
			t.Errorf("worker process %s: %v", c.id, err)
		}
		tm.Stop()
	}
}

// A pause or a kill, checked once the history is complete.
type pauseNote struct {
	victim Event // the acquisition of the paused holder
	stop   int64 // when it was stopped
	cont   int64 // when it was resumed
}

type killNote struct {
	victim Event // the acquisition of the killed holder
	at     int64
}

// check runs the checker on the history and the data, then the scenario's
// own expectations.
func (r *run) check() {
	t := r.t
	st, err := NewStore(r.s.dialect(t, r.s.admin), r.s.ns)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data, err := st.Data(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	events := slices.Clone(r.events)
	ps, ks := r.pauses, r.kills
	r.mu.Unlock()
	sort.SliceStable(events, func(i, j int) bool { return events[i].At < events[j].At })
	// The checker an outsider runs on the kept files, on the same record.
	vs := CheckKept(Kept{Meta: r.meta(), Events: events, Data: data})
	if r.strategy == "fair" || r.strategy == "fairsem" {
		r.note(fmt.Sprintf("FIFO order checked over %d grants to ticket holders", ticketedGrants(events)))
	}
	if r.strategy == "rwsides" {
		n := map[Kind]int{}
		for _, e := range events {
			n[e.Kind]++
		}
		r.note(fmt.Sprintf("%d downgrades (%d failed), %d upgrades (%d failed)",
			n[DowngradeOK], n[DowngradeFail], n[UpgradeOK], n[UpgradeFail]))
	}
	for _, v := range vs {
		t.Errorf("violation: %v", v)
	}
	r.history, r.data, r.violations = events, data, vs
	if dir := os.Getenv(keepEnv); dir != "" {
		if err := r.keep(dir); err != nil {
			t.Errorf("%s: %v", keepEnv, err)
		}
	}

	if os.Getenv(errorsEnv) != "" {
		t.Logf("errors:\n%s", errHistogram(events))
	}
	st2 := stats(events)
	// The states the checks need, which the workload drove itself into
	// (stopAfter, processes) unless goalDeadline passed first.
	if why := r.unmet(); why != "" {
		t.Errorf("%s (within %v)", why, goalDeadline)
	}
	switch r.fault {
	case pause:
		r.checkPauses(events, ps)
	case crash:
		r.checkKills(events, ks)
	}
	if n := r.reaped.passes.Load(); n == 0 {
		t.Errorf("the reaper made no pass")
	} else {
		r.note(fmt.Sprintf("reaper: %d passes (%d failed), %d rows deleted", n, r.reaped.failed.Load(), r.reaped.deleted.Load()))
	}
	r.report(st2, len(vs))
}

// keepDir is the directory of a scenario under the SQLLOCK_CHAOS_KEEP
// directory.
func keepDir(dir, kind, strategy, fault string) string {
	return filepath.Join(dir, kind+"-"+strategy+"-"+fault)
}

// meta describes the run as meta.json does.
func (r *run) meta() Meta {
	m := Meta{
		Scenario: r.kind + "/" + r.strategy + "/" + r.fault,
		Database: r.kind, Strategy: r.strategy, Fault: r.fault,
		Start: r.start, End: time.Now().UnixNano(),
		TTL: int64(ttl), KeepAlive: int64(keepAlive),
		Names:          r.names,
		Violations:     len(r.violations),
		ReaperInterval: int64(reaperInterval), ReaperBatch: reaperBatch,
	}
	switch r.strategy {
	case "pessimistic":
		m.TTL = 0
		if r.fault == pause || r.fault == crash {
			m.IdleTimeout = int64(idleTimeout)
		}
	case "semaphore", "fairsem":
		m.Limit = semaphoreLimit
	}
	if m.TTL != 0 {
		m.TrustMargin = int64(trustMargin(ttl))
	}
	return m
}

// keep writes the checked history and data under dir.
func (r *run) keep(dir string) error {
	m := r.meta()
	r.mu.Lock()
	m.Faults = maps.Clone(r.faults)
	for _, p := range r.pauses {
		m.Injected = append(m.Injected, Injection{Fault: pause, Worker: p.victim.Worker,
			Name: p.victim.Name, Token: p.victim.Token, At: p.stop, Resumed: p.cont})
	}
	for _, k := range r.kills {
		m.Injected = append(m.Injected, Injection{Fault: crash, Worker: k.victim.Worker,
			Name: k.victim.Name, Token: k.victim.Token, At: k.at})
	}
	r.mu.Unlock()
	return Kept{Meta: m, Events: r.history, Data: r.data}.Write(keepDir(dir, r.kind, r.strategy, r.fault))
}

// checkPauses: a holder resumed after someone else took its lock over must
// learn it lost it, and its late write must not commit (the checker's stale
// write rule covers the latter).
func (r *run) checkPauses(events []Event, ps []pauseNote) {
	t := r.t
	if len(ps) == 0 {
		return // run.unmet says so
	}
	taken, learned, refused := 0, 0, 0
	for _, p := range ps {
		v := p.victim
		if !takenOver(events, p) {
			continue
		}
		taken++
		knew, wrote := false, false
		for _, e := range events {
			if e.Worker != v.Worker || e.Token != v.Token || e.Name != v.Name {
				continue
			}
			switch e.Kind {
			case Lost:
				knew = true
			case WriteFail:
				wrote = true
				// A pessimistic lock is its transaction: a statement of it
				// failing is how its holder learns the lock is gone.
				knew = knew || r.strategy == "pessimistic"
			}
		}
		if knew {
			learned++
		} else {
			t.Errorf("%s was paused holding token %d of %q, taken over meanwhile, and never learned it lost the lock", v.Worker, v.Token, v.Name)
		}
		if wrote {
			refused++
		}
	}
	r.note(fmt.Sprintf("%d pauses, %d taken over, %d holders learned of it, %d late writes refused", len(ps), taken, learned, refused))
}

// checkKills: after a holder is killed, a waiter holds the lock within
// the bound: the lease's TTL (one more for a renewal the victim sent just
// before it died), then the waiter's next attempt, which it schedules for
// the lease's end, and up to 2 s for the statements of a machine running
// many scenarios at once (a takeover is a liveness bound, and a loaded test
// host stretches it). A pessimistic lock ends with the killed connection:
// 2 s. A set's waiter also needs its set's other names, which another
// worker may hold for a turn: one TTL more. The slowest takeover is noted
// in the report either way.
func (r *run) checkKills(events []Event, ks []killNote) {
	t := r.t
	if len(ks) == 0 {
		return // run.unmet says so
	}
	bound := r.killBound()
	var worst time.Duration
	measured := 0
	for _, k := range ks {
		v := k.victim
		if !waiters(events, k) {
			continue
		}
		next := nextGrant(events, k)
		if next == 0 {
			t.Errorf("%s was killed holding token %d of %q and nobody acquired it afterwards", v.Worker, v.Token, v.Name)
			continue
		}
		measured++
		d := time.Duration(next - k.at)
		worst = max(worst, d)
		if d > bound {
			var b strings.Builder
			for _, e := range events {
				if e.Name == v.Name && e.At >= v.At-int64(time.Second) && e.At <= next {
					b.WriteString("\n    " + e.String())
				}
			}
			t.Errorf("%s killed holding %q at %s: the next holder got it after %v (bound %v):%s",
				v.Worker, v.Name, time.Unix(0, k.at).Format("15:04:05.000000"), d, bound, b.String())
		}
	}
	r.note(fmt.Sprintf("%d holders killed, %d with waiters: slowest takeover %v (bound %v)", len(ks), measured, worst.Round(time.Millisecond), bound))
}

// killBound is checkKills' bound on a takeover after a kill.
func (r *run) killBound() time.Duration {
	switch r.strategy {
	case "pessimistic":
		return 2 * time.Second
	case "multi":
		return 3*ttl + 2*time.Second
	}
	return 2*ttl + 2*time.Second
}

// takenOver reports whether the lock of a paused holder was granted to
// another (a greater token) before the holder was resumed.
func takenOver(events []Event, p pauseNote) bool {
	v := p.victim
	for _, e := range events {
		if e.Kind == AcquireOK && e.Name == v.Name && e.Token > v.Token && e.At < p.cont {
			return true
		}
	}
	return false
}

// waiters reports whether another worker's Acquire of the killed holder's
// name was under way at the kill. events are in time order.
func waiters(events []Event, k killNote) bool {
	v := k.victim
	open := map[opKey]bool{}
	for _, e := range events {
		if e.At > k.at {
			break
		}
		key := opKey{e.Worker, e.Op}
		switch {
		case e.Kind == AcquireInvoke && e.Name == v.Name && e.Worker != v.Worker:
			open[key] = true
		case e.Kind == AcquireOK || e.Kind == AcquireFail:
			delete(open, key)
		}
	}
	return len(open) > 0
}

// nextGrant returns when the killed holder's name was next granted, or 0.
// events are in time order.
func nextGrant(events []Event, k killNote) int64 {
	v := k.victim
	for _, e := range events {
		if e.Kind == AcquireOK && e.Name == v.Name && e.Token > v.Token && e.At > k.at {
			return e.At
		}
	}
	return 0
}

func (r *run) note(s string) {
	r.mu.Lock()
	r.notes = append(r.notes, s)
	r.mu.Unlock()
}

type tally struct {
	events, acquired, written, lost, refused int
}

func stats(events []Event) tally {
	var s tally
	s.events = len(events)
	for _, e := range events {
		switch e.Kind {
		case AcquireOK:
			s.acquired++
		case WriteOK:
			s.written++
		case Lost:
			s.lost++
		case WriteFail:
			s.refused++
		}
	}
	return s
}

// The summary printed at the end of the run.
var (
	summaryMu sync.Mutex
	summary   []string
)

func (r *run) report(s tally, violations int) {
	r.mu.Lock()
	var fs []string
	total := 0
	for k, n := range r.faults {
		fs = append(fs, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(fs)
	line := fmt.Sprintf("%-8s %-11s %-9s %7d ops %6d acquired %6d writes %4d lost %4d refused %5d faults  violations: %d",
		r.kind, r.strategy, r.fault, s.events, s.acquired, s.written, s.lost, s.refused, total, violations)
	if len(fs) > 0 {
		line += "  (" + strings.Join(fs, ", ") + ")"
	}
	if r.pool != "" {
		line += "; through PgBouncer, " + string(r.pool) + " pooling"
	}
	for _, n := range r.notes {
		line += "; " + n
	}
	r.mu.Unlock()
	r.t.Log(line)
	summaryMu.Lock()
	summary = append(summary, line)
	summaryMu.Unlock()
}

func printSummary() {
	summaryMu.Lock()
	defer summaryMu.Unlock()
	if len(summary) == 0 {
		return
	}
	sort.Strings(summary)
	var b strings.Builder
	b.WriteString("chaos summary (ops = history events):\n")
	for _, l := range summary {
		b.WriteString("  " + l + "\n")
	}
	fmt.Print(b.String())
	if path := os.Getenv(reportEnv); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = f.WriteString(b.String())
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos: writing the report:", err)
		}
	}
}
