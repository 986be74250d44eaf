package chaos

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/ledger"
)

// ledgerEnv sets the length of each database's ledger scenario (default
// 30s); SQLLOCK_CHAOS_LEDGER=10m is a soak.
const ledgerEnv = "SQLLOCK_CHAOS_LEDGER"

// The ledger scenario's shape: replicas run one job every ledgerPeriod,
// their timers offset by up to ledgerSkew either way, each attempt holding
// its lease for up to ledgerHold.
const (
	ledgerJob      = "chaos"
	ledgerPeriod   = time.Second
	ledgerSkew     = 400 * time.Millisecond
	ledgerHold     = 300 * time.Millisecond
	ledgerReplicas = 5
	ledgerTTL      = time.Second
)

// ledgerReplica is a replica process of the ledger scenario (config.Ledger).
type ledgerReplica struct {
	Kind, DSN, NS string // NS: the schema, database, or SQLite file
	ID            string
	Offset        time.Duration // of its timer from the period's multiples
	Seed          uint64
}

// ledgerLine is a line a replica writes: a claim (its function started),
// or the result of a Run that returned.
type ledgerLine struct {
	Kind string // "claimed" or "result"
	LedgerReport
	AtNS int64
}

func openLedgerDialect(kind string, db *sql.DB, ns string) (dialect.Dialect, error) {
	if kind == "sqlite" {
		return sqlite.New(db)
	}
	return newDialect(kind, db, ns, false)
}

// run fires the job at every period's multiple plus its offset, each Run
// in a goroutine of its own, until its standard input closes; then it
// lets the Runs under way end.
func (c ledgerReplica) run() error {
	var (
		db  *sql.DB
		err error
	)
	if c.Kind == "sqlite" {
		db, err = sqlite.Open(c.NS)
	} else {
		db, err = sql.Open(driverOf(c.Kind), c.DSN)
	}
	if err != nil {
		return err
	}
	defer db.Close()
	d, err := openLedgerDialect(c.Kind, db, c.NS)
	if err != nil {
		return err
	}
	if cl, ok := d.(interface{ Close(context.Context) error }); ok {
		defer cl.Close(context.Background())
	}
	l, err := ledger.New(d, ledger.Options{TTL: ledgerTTL, Retries: 1, RetryBackoff: 50 * time.Millisecond,
		Wait: true, Owner: c.ID})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	var (
		mu  sync.Mutex
		out = bufio.NewWriter(os.Stdout)
		wg  sync.WaitGroup
		rng = rand.New(rand.NewPCG(c.Seed, 0x1ed9e5))
	)
	write := func(l ledgerLine) {
		l.AtNS = time.Now().UnixNano()
		b, _ := json.Marshal(l)
		mu.Lock()
		defer mu.Unlock()
		out.Write(append(b, '\n'))
		out.Flush()
	}
	for {
		now := time.Now()
		next := now.Truncate(ledgerPeriod).Add(c.Offset)
		for !next.After(now) {
			next = next.Add(ledgerPeriod)
		}
		tm := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			tm.Stop()
			wg.Wait()
			return nil
		case <-tm.C:
		}
		hold := time.Duration(rng.Int64N(int64(ledgerHold)))
		fail := rng.IntN(10) == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Long enough to wait out a dead runner's lease and take over,
			// on a machine slowed down by other work too.
			rctx, rcancel := context.WithTimeout(context.Background(), 10*ledgerTTL+ledgerPeriod)
			defer rcancel()
			res, err := l.Run(rctx, ledgerJob, ledger.Every(ledgerPeriod), func(fctx context.Context, r *ledger.Run) error {
				write(ledgerLine{Kind: "claimed", LedgerReport: LedgerReport{Replica: c.ID, Occurrence: r.Occurrence,
					Ran: true, State: "running", Attempt: r.Attempt, Token: r.Token}})
				tm := time.NewTimer(hold) // the job's work
				defer tm.Stop()
				select {
				case <-fctx.Done():
					return context.Cause(fctx)
				case <-tm.C:
				}
				if fail {
					return errors.New("the job failed")
				}
				return nil
			})
			rep := LedgerReport{Replica: c.ID, Occurrence: res.Occurrence, Ran: res.Ran, State: string(res.State),
				Attempt: res.Attempt, Token: res.Token}
			if err != nil {
				rep.Err = err.Error()
			}
			write(ledgerLine{Kind: "result", LedgerReport: rep})
		}()
	}
}

// envDuration is the duration the environment variable env sets, or def.
func envDuration(t *testing.T, env string, def time.Duration) time.Duration {
	if v := os.Getenv(env); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		return d
	}
	return def
}

// TestChaosLedger runs the run ledger's scenario on each database: five
// replica processes run one job every second, their timers offset by up
// to ±400 ms, while runners are SIGKILLed and SIGSTOPped mid-run and
// connections are killed; CheckLedger checks what they leave.
func TestChaosLedger(t *testing.T) {
	dur := envDuration(t, ledgerEnv, 30*time.Second)
	for _, kind := range []string{"postgres", "mysql", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			runLedgerScenario(t, kind, dur)
		})
	}
}

// ledgerReplicaProc is a running replica process.
type ledgerReplicaProc struct {
	id    string
	proc  *os.Process
	stdin io.Closer
	wait  func() error
	done  chan struct{} // its lines are all read
	up    time.Time     // since when it has been up
}

func runLedgerScenario(t *testing.T, kind string, dur time.Duration) {
	var (
		s   *setup
		dsn string
		ns  string
		d   dialect.Dialect
	)
	if kind == "sqlite" {
		ns = filepath.Join(t.TempDir(), "ledger.db")
		db, err := sqlite.Open(ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if d, err = sqlite.New(db); err != nil {
			t.Fatal(err)
		}
		if err := sqllock.Migrate(t.Context(), d); err != nil {
			t.Fatal(err)
		}
	} else {
		s = newSetup(t, kind, nil)
		ns = s.ns
		d = s.dialect(t, s.admin)
		var err error
		if dsn, err = s.workerDSN("", nil); err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu      sync.Mutex
		reps    []LedgerReport
		up      []Uptime
		claims  = make(chan ledgerLine, 64)
		procs   = map[string]*ledgerReplicaProc{}
		n       int
		rng     = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
		counts  = map[string]int{}
		started = time.Now()
	)
	start := func(offset time.Duration) {
		n++
		c := config{Ledger: &ledgerReplica{Kind: kind, DSN: dsn, NS: ns, ID: fmt.Sprintf("r%d", n), Offset: offset, Seed: uint64(n)}}
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
		p := &ledgerReplicaProc{id: c.Ledger.ID, proc: cmd.Process, stdin: stdin, wait: cmd.Wait,
			done: make(chan struct{}), up: time.Now()}
		procs[p.id] = p
		go func() {
			defer close(p.done)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var l ledgerLine
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					t.Errorf("replica %s: %v", p.id, err)
					continue
				}
				if l.Kind == "claimed" {
					select {
					case claims <- l:
					default:
					}
					continue
				}
				mu.Lock()
				reps = append(reps, l.LedgerReport)
				mu.Unlock()
			}
		}()
	}
	// Offsets spread over the whole ±ledgerSkew.
	for i := range ledgerReplicas {
		start(-ledgerSkew + time.Duration(i)*2*ledgerSkew/(ledgerReplicas-1))
	}
	down := func(p *ledgerReplicaProc, at time.Time) {
		mu.Lock()
		up = append(up, Uptime{Replica: p.id, From: p.up, To: at})
		mu.Unlock()
	}

	// Faults, one at a time, a second or two apart, until the last few
	// periods, which are left for the takeovers to happen.
	deadline := started.Add(dur)
	faults := []string{crash, pause, connKill}
	if kind == "sqlite" {
		faults = faults[:2]
	}
	for time.Until(deadline) > 3*ledgerTTL+2*ledgerPeriod {
		gap := time.NewTimer(time.Second + time.Duration(rng.Int64N(int64(time.Second))))
		<-gap.C
		fault := faults[rng.IntN(len(faults))]
		if fault == connKill {
			kctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			ok, err := s.killOne(kctx)
			cancel()
			if err != nil {
				t.Logf("killing a connection: %v", err)
			}
			if ok {
				counts["connections killed"]++
			}
			continue
		}
		// A runner mid-run: one whose function started just now.
		var victim *ledgerReplicaProc
		wait := time.NewTimer(5 * ledgerPeriod)
		for victim == nil {
			var l ledgerLine
			select {
			case l = <-claims:
			case <-wait.C:
				// No fresh claim (a slow machine): no fault this time.
			}
			if l.Kind == "" {
				break
			}
			if time.Since(time.Unix(0, l.AtNS)) < 50*time.Millisecond {
				victim = procs[l.Replica]
			}
		}
		wait.Stop()
		if victim == nil {
			continue
		}
		switch fault {
		case crash:
			at := time.Now()
			if victim.proc.Signal(syscall.SIGKILL) != nil {
				continue
			}
			down(victim, at)
			delete(procs, victim.id)
			<-victim.done
			_ = victim.wait()
			counts["runners killed mid-run"]++
			start(time.Duration(rng.Int64N(int64(2*ledgerSkew))) - ledgerSkew)
		case pause:
			at := time.Now()
			if victim.proc.Signal(syscall.SIGSTOP) != nil {
				continue
			}
			down(victim, at)
			tm := time.NewTimer(2*ledgerTTL + 200*time.Millisecond)
			<-tm.C
			if err := victim.proc.Signal(syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT: %v", err)
			}
			victim.up = time.Now()
			counts["runners stopped mid-run past the TTL"]++
		}
	}
	for time.Now().Before(deadline) {
		tm := time.NewTimer(time.Until(deadline))
		<-tm.C
	}
	end := time.Now()
	for _, p := range procs {
		_ = p.stdin.Close()
	}
	for _, p := range procs {
		<-p.done
		if err := p.wait(); err != nil {
			t.Errorf("replica %s: %v", p.id, err)
		}
		down(p, end)
	}

	ctx := t.Context()
	l, err := ledger.New(d, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := l.Runs(ctx, ledgerJob, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	missed, err := l.Missed(ctx, ledgerJob, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := LedgerHistory{Period: ledgerPeriod, Reports: reps, Up: up, TimeFormat: ledger.TimeFormat,
		From: started.Truncate(ledgerPeriod).Add(ledgerPeriod), To: end.Truncate(ledgerPeriod).Add(-ledgerPeriod)}
	for _, r := range runs {
		h.Attempts = append(h.Attempts, LedgerAttempt{Occurrence: r.Occurrence, Attempt: r.Attempt, State: string(r.State),
			Owner: r.Owner, Token: r.Token, StartedAt: r.StartedAt})
	}
	for _, m := range missed {
		h.Missed = append(h.Missed, m.Occurrence)
	}
	v := CheckLedger(h)
	for _, s := range v {
		t.Error(s)
		// What the runners of the occurrence, and of the ones next to it,
		// were told.
		occ, _, _ := strings.Cut(s, ": ")
		at, err := time.Parse(ledger.TimeFormat, occ)
		if err != nil {
			continue
		}
		for _, r := range reps {
			if o, err := time.Parse(ledger.TimeFormat, r.Occurrence); err == nil && o.Sub(at).Abs() <= ledgerPeriod {
				t.Logf("  %s: %s told %+v", occ, r.Replica, r)
			}
		}
	}
	reportLedger(t, kind, dur, h, counts, len(v))
}

// reportLedger logs and records (see reportEnv) the scenario's figures:
// occurrences, attempts by state, and how long after its runner was
// killed or stopped each abandoned attempt was taken over (on the host's
// clock, which the database servers of the test share).
func reportLedger(t *testing.T, kind string, dur time.Duration, h LedgerHistory, counts map[string]int, violations int) {
	occs := map[string]bool{}
	states := map[string]int{}
	var takeovers []time.Duration // from the runner's end to the next attempt's start
	byOcc := map[string][]LedgerAttempt{}
	for _, a := range h.Attempts {
		occs[a.Occurrence] = true
		states[a.State]++
		byOcc[a.Occurrence] = append(byOcc[a.Occurrence], a)
	}
	for _, as := range byOcc {
		sort.Slice(as, func(i, j int) bool { return as[i].Attempt < as[j].Attempt })
		for i := 1; i < len(as); i++ {
			if as[i-1].State != "abandoned" {
				continue
			}
			replica, _, _ := strings.Cut(as[i-1].Owner, "/")
			for _, u := range h.Up {
				if u.Replica == replica && !u.To.Before(as[i-1].StartedAt) && !u.To.After(as[i].StartedAt) {
					takeovers = append(takeovers, as[i].StartedAt.Sub(u.To))
				}
			}
		}
	}
	sort.Slice(takeovers, func(i, j int) bool { return takeovers[i] < takeovers[j] })
	maxTakeover := time.Duration(0)
	if len(takeovers) > 0 {
		maxTakeover = takeovers[len(takeovers)-1]
	}
	missedUp, left := LedgerLiveness(h)
	line := fmt.Sprintf("ledger %s %v: %d occurrences, %d attempts (succeeded %d, failed %d, abandoned %d, running %d), "+
		"%d missed (%d reported by Missed), faults %v, %d takeovers (after the runner's end: max %v, TTL %v); liveness, which depends on the machine's speed: "+
		"%d missed while a replica was up, %d dead attempts not taken over; %d violations",
		kind, dur.Round(time.Second), len(occs), len(h.Attempts), states["succeeded"], states["failed"], states["abandoned"],
		states["running"], missedIn(h), len(h.Missed), counts, len(takeovers), maxTakeover.Round(time.Millisecond), ledgerTTL, missedUp, left, violations)
	t.Log(line)
	if path := os.Getenv(reportEnv); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
}

// missedIn counts the occurrences of h's span without an attempt.
func missedIn(h LedgerHistory) int {
	have := map[string]bool{}
	for _, a := range h.Attempts {
		have[a.Occurrence] = true
	}
	n := 0
	for t := h.From; !t.After(h.To); t = t.Add(h.Period) {
		if !have[t.UTC().Format(h.TimeFormat)] {
			n++
		}
	}
	return n
}
