//go:build linux

package sqllockgocron_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/sqllock/sqllock"
	sqllockgocron "github.com/sqllock/sqllock/contrib/gocron"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/tests/migrated"
)

// The replicas' settings: a job every second; replicas' schedulers start
// skew apart; a lease lasts ttl; a run holds its lock at least minHold.
const (
	period   = time.Second
	skew     = 150 * time.Millisecond
	ttl      = 3 * time.Second
	minHold  = 650 * time.Millisecond
	lifetime = 15 * time.Minute // a replica exits after it, whatever happens (the test kills it sooner)
	election = "tick-leader"
)

// childEnv names the environment variable that makes TestChild a replica.
const childEnv = "SQLLOCK_GOCRON_CHILD"

// child is what a replica is told by its parent.
type child struct {
	DB      dbtest.Target
	Role    string // "locker" or "elector"
	Replica int    // 1, 2, 3
	Start   time.Time
}

// TestChild is a replica, run in a process of its own by the tests below:
// a gocron scheduler runs a job every period, from Start plus a skew per
// replica, that records its run in the table runs, keyed by the run's
// scheduled time. A second record of a run fails on the key and is
// recorded in the table failures.
func TestChild(t *testing.T) {
	env := os.Getenv(childEnv)
	if env == "" {
		t.Skip("a replica of TestLockerReplicas and TestElectorReplicas")
	}
	var c child
	if err := json.Unmarshal([]byte(env), &c); err != nil {
		t.Fatal(err)
	}
	offset := time.Duration(c.Replica-1) * skew
	db, d := migrated.Connect(t, c.DB)
	ctx, cancel := context.WithTimeout(context.Background(), lifetime)
	defer cancel()

	var (
		opt   gocron.SchedulerOption
		guard = func(context.Context, *sql.Tx) error { return nil }
	)
	switch c.Role {
	case "locker":
		table, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl}, MinHold: minHold})
		if err != nil {
			t.Fatal(err)
		}
		opt = gocron.WithDistributedLocker(sqllockgocron.NewLocker(table))
	case "elector":
		el, err := sqllock.NewElection(d, sqllock.LeaseOptions{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		elector, err := sqllockgocron.NewElector(el, election, strconv.Itoa(c.Replica))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- elector.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}()
		opt = gocron.WithDistributedElector(elector)
		guard = elector.Guard
	}
	record := func() {
		slot := time.Now().Add(-offset).Truncate(period).UnixMilli()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Log(err)
			return
		}
		defer tx.Rollback()
		if err := guard(ctx, tx); err != nil {
			t.Logf("slot %d: %v", slot, err)
			return
		}
		_, err = tx.ExecContext(ctx, c.DB.Rebind("INSERT INTO runs (slot, replica) VALUES (?, ?)"), slot, c.Replica)
		if err == nil {
			err = tx.Commit()
		}
		if err != nil {
			t.Logf("slot %d: %v", slot, err)
			_, _ = db.ExecContext(ctx, c.DB.Rebind("INSERT INTO failures (replica, msg) VALUES (?, ?)"), c.Replica, err.Error())
		}
	}
	s, err := gocron.NewScheduler(opt)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.NewJob(gocron.DurationJob(period), gocron.NewTask(record), gocron.WithName("tick"),
		gocron.WithStartAt(gocron.WithStartDateTime(c.Start.Add(offset))))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	<-ctx.Done()
	if err := s.Shutdown(); err != nil {
		t.Error(err)
	}
}

// replicas are the processes of one test's replicas.
type replicas struct {
	t    *testing.T
	db   *sql.DB
	cmds []*exec.Cmd
}

// startReplicas creates the tables runs and failures in tdb and starts
// three replicas of role, their schedulers starting on the same whole
// second.
func startReplicas(t *testing.T, tdb dbtest.Target, role string) *replicas {
	t.Helper()
	db, _ := migrated.Connect(t, tdb)
	for _, ddl := range []string{
		"CREATE TABLE runs (slot BIGINT PRIMARY KEY, replica INT NOT NULL)",
		"CREATE TABLE failures (replica INT NOT NULL, msg VARCHAR(2000) NOT NULL)",
	} {
		if _, err := db.Exec(ddl); err != nil {
			t.Fatal(err)
		}
	}
	r := &replicas{t: t, db: db}
	start := time.Now().Add(3 * time.Second).Truncate(time.Second)
	for i := 1; i <= 3; i++ {
		env, err := json.Marshal(child{DB: tdb, Role: role, Replica: i, Start: start})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.v")
		cmd.Env = append(os.Environ(), childEnv+"="+string(env))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("replica %d:\n%s", i, out.String())
			}
		})
		r.cmds = append(r.cmds, cmd)
	}
	return r
}

// signal sends sig to replica i.
func (r *replicas) signal(i int, sig syscall.Signal) {
	r.t.Helper()
	if err := r.cmds[i-1].Process.Signal(sig); err != nil {
		r.t.Fatal(err)
	}
}

// runs returns the replica of each recorded run, in the order of the runs'
// scheduled times, and the scheduled times.
func (r *replicas) runs(ctx context.Context) (replicas []int, slots []int64) {
	r.t.Helper()
	rows, err := r.db.QueryContext(ctx, "SELECT slot, replica FROM runs ORDER BY slot")
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var slot int64
		var replica int
		if err := rows.Scan(&slot, &replica); err != nil {
			r.t.Fatal(err)
		}
		slots, replicas = append(slots, slot), append(replicas, replica)
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	return replicas, slots
}

// failures returns the failures the replicas recorded: runs recorded
// twice.
func (r *replicas) failures(ctx context.Context) []string {
	r.t.Helper()
	rows, err := r.db.QueryContext(ctx, "SELECT replica, msg FROM failures")
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	var fs []string
	for rows.Next() {
		var replica int
		var msg string
		if err := rows.Scan(&replica, &msg); err != nil {
			r.t.Fatal(err)
		}
		fs = append(fs, fmt.Sprintf("replica %d ran a run already run: %s", replica, msg))
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	return fs
}

// checkFailures fails the test if a replica recorded a failure.
func (r *replicas) checkFailures(ctx context.Context) {
	r.t.Helper()
	for _, f := range r.failures(ctx) {
		r.t.Error(f)
	}
}

// waitFor polls cond until it holds, failing the test after deadline.
func waitFor(t *testing.T, deadline time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, deadline)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// count returns how many of runs are replica's.
func count(runs []int, replica int) int {
	n := 0
	for _, r := range runs {
		if r == replica {
			n++
		}
	}
	return n
}

// Three schedulers in three processes, started skew apart, share a job
// through a Locker: runs go on, one replica's at a time. With the minimum
// hold, each second runs once on a quiet machine; a scheduler that fires
// later than the hold (a loaded machine) runs a second again, and one
// whose lock outlives the period misses the next: a heuristic, so those
// counts are logged, not asserted (the run ledger is what promises once
// per run; see contrib/cron's TestOncePerScheduledTime).
func TestLockerReplicas(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			r := startReplicas(t, migrated.New(t, kind), "locker")
			const runs = 12
			waitFor(t, 5*time.Minute, strconv.Itoa(runs)+" runs", func() bool {
				got, _ := r.runs(ctx)
				return len(got) >= runs
			})
			for i := 1; i <= 3; i++ {
				r.signal(i, syscall.SIGKILL)
			}
			again := len(r.failures(ctx))
			got, slots := r.runs(ctx)
			missed := 0
			for i := 1; i < len(slots); i++ {
				missed += int((slots[i]-slots[i-1])/period.Milliseconds()) - 1
			}
			t.Logf("%d runs, %d ran again, %d missed; replica 1, 2, 3 ran %d, %d, %d",
				len(got), again, missed, count(got, 1), count(got, 2), count(got, 3))
		})
	}
}

// Three schedulers in three processes share a job through an Elector:
// the leader runs it. Killed, the leader is succeeded within a TTL;
// stopped past its TTL, it is succeeded and runs nothing after it resumes.
// Each run is recorded once, by one leader at a time.
func TestElectorReplicas(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tdb := migrated.New(t, kind)
			r := startReplicas(t, tdb, "elector")
			_, d := migrated.Connect(t, tdb)
			el, err := sqllock.NewElection(d, sqllock.LeaseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// leader returns the leading replica once it has run the job,
			// or 0.
			leader := func() int {
				info, err := el.Leader(ctx, election)
				if errors.Is(err, sqllock.ErrNoLeader) {
					return 0
				}
				if err != nil {
					t.Fatal(err)
				}
				i, err := strconv.Atoi(info.Value)
				if err != nil {
					t.Fatal(err)
				}
				if got, _ := r.runs(ctx); count(got, i) == 0 {
					return 0
				}
				return i
			}
			var first, second, third int
			waitFor(t, 5*time.Minute, "a leader", func() bool { first = leader(); return first != 0 })

			r.signal(first, syscall.SIGKILL)
			killed := time.Now()
			waitFor(t, ttl+2*time.Minute, "a leader after the leader's death", func() bool {
				second = leader()
				return second != 0 && second != first
			})
			t.Logf("replica %d killed; replica %d leads %v later", first, second, time.Since(killed).Round(time.Millisecond))

			r.signal(second, syscall.SIGSTOP)
			stopped := time.Now()
			waitFor(t, ttl+2*time.Minute, "a leader after the leader's pause", func() bool {
				third = leader()
				return third != 0 && third != second
			})
			t.Logf("replica %d stopped; replica %d leads %v later", second, third, time.Since(stopped).Round(time.Millisecond))
			got, _ := r.runs(ctx)
			paused, thirds := count(got, second), count(got, third)
			r.signal(second, syscall.SIGCONT)
			waitFor(t, 5*time.Minute, "3 runs after the pause", func() bool {
				got, _ = r.runs(ctx)
				return count(got, third) >= thirds+3
			})
			if n := count(got, second); n != paused {
				t.Errorf("replica %d ran %d runs after its pause past its TTL", second, n-paused)
			}
			r.checkFailures(ctx)
			if want := []int{first, second, third}; !slices.Equal(slices.Compact(got), want) {
				t.Errorf("runs by replicas %v, in that order, want %v", slices.Compact(got), want)
			}
		})
	}
}
