package sqllock_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/testutil"
)

// Tests of the SQLite dialect with several operating-system processes on
// one database file: the test binary runs itself as child processes (see
// TestMain), each an independent user of the file.

// childEnv names the environment variable that makes the test binary run as
// a child process with the JSON-encoded childConfig it holds.
const childEnv = "SQLLOCK_TEST_SQLITE_CHILD"

// childConfig tells a child process what to do.
type childConfig struct {
	Role     string        // "counter", "hold", or "release-exit" (see exitHolder)
	File     string        // the SQLite database file
	DB       string        // for "release-exit": "postgres", "mysql" or "sqlite" (File)
	DSN, NS  string        // for "release-exit": the server's and the schema or database
	Strategy string        // a lease strategy's name
	TTL      time.Duration // the locker's TTL
	Rounds   int           // critical sections, for "counter"
}

// run is the child process's work (see testutil.ChildMain in TestMain).
func (c childConfig) run() error {
	if c.Role == "release-exit" {
		return exitHolder(c)
	}
	ctx := context.Background()
	db, err := sqlite.Open(c.File)
	if err != nil {
		return err
	}
	defer db.Close()
	d, err := sqlite.New(db)
	if err != nil {
		return err
	}
	var s *strategy
	for _, ls := range leaseStrategies {
		if ls.name == c.Strategy {
			s = ls
		}
	}
	if s == nil {
		return fmt.Errorf("unknown strategy %q", c.Strategy)
	}
	l, err := s.new(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: c.TTL}})
	if err != nil {
		return err
	}
	switch c.Role {
	case "counter":
		return countUnderLock(ctx, db, l, c.Rounds)
	case "hold":
		return holdAndHang(ctx, db, l)
	}
	return fmt.Errorf("unknown role %q", c.Role)
}

// countUnderLock increments the counter rounds times, each time reading it
// and writing it back in two statements under the lock (nothing but the
// lock keeps two processes from losing an update), and records each critical
// section's token and interval in the history table.
func countUnderLock(ctx context.Context, db *sql.DB, l locker, rounds int) error {
	pid := os.Getpid()
	for range rounds {
		k, err := l.Acquire(ctx, "counter")
		if err != nil {
			return err
		}
		start := time.Now().UnixNano()
		var n int
		if err := db.QueryRowContext(ctx, "SELECT n FROM counter WHERE id = 1").Scan(&n); err != nil {
			return err
		}
		time.Sleep(time.Millisecond) // widens the window a broken lock would let another process into
		if _, err := db.ExecContext(ctx, "UPDATE counter SET n = ?, token = ? WHERE id = 1", n+1, k.Token()); err != nil {
			return err
		}
		end := time.Now().UnixNano()
		if _, err := db.ExecContext(ctx, "INSERT INTO history (token, pid, start_ns, end_ns) VALUES (?, ?, ?, ?)", k.Token(), pid, start, end); err != nil {
			return err
		}
		if err := context.Cause(k.Context()); err != nil {
			return fmt.Errorf("lock ended inside the critical section: %w", err)
		}
		if err := k.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

// holdAndHang acquires "crash", begins a guarded transaction that writes the
// counter (holding SQLite's write lock), reports its token on stdout, and
// waits to be killed.
func holdAndHang(ctx context.Context, db *sql.DB, l locker) error {
	k, err := l.TryAcquire(ctx, "crash")
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := k.Guard(ctx, tx); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE counter SET n = n + 1, token = ? WHERE id = 1", k.Token()); err != nil {
		return err
	}
	fmt.Printf("held %d\n", k.Token())
	time.Sleep(time.Hour)
	return errors.New("not killed")
}

// startChild prepares the test binary as a child process with config c,
// ended with the test's context. Its standard error is collected in the
// returned builder, to be read after Wait.
func startChild(t *testing.T, c childConfig) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd, err := testutil.ChildCommand(ctxT(t), childEnv, c)
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	return cmd, &stderr
}

// sqliteCounterDB opens a migrated database file with the counter and
// history tables.
func sqliteCounterDB(t *testing.T) (*sql.DB, string, dialect.Dialect) {
	t.Helper()
	db, path := openSQLite(t)
	d, err := sqlite.New(db)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL, token INTEGER NOT NULL)",
		"INSERT INTO counter VALUES (1, 0, 0)",
		"CREATE TABLE history (token INTEGER NOT NULL, pid INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return db, path, d
}

// Several processes take turns on one lock name, each incrementing a counter
// in the same file by a read and a separate write under the lock. No update
// is lost, no two critical sections overlap, and the tokens grow in the order
// the lock was granted.
func TestSQLiteProcessesExcludeEachOther(t *testing.T) {
	t.Parallel()
	for _, s := range leaseStrategies {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			const procs, rounds = 4, 15
			db, path, _ := sqliteCounterDB(t)
			ctx := ctxT(t)
			type child struct {
				cmd    *exec.Cmd
				stderr *strings.Builder
			}
			var children []child
			for range procs {
				cmd, stderr := startChild(t, childConfig{Role: "counter", File: path, Strategy: s.name, TTL: time.Minute, Rounds: rounds})
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				children = append(children, child{cmd, stderr})
			}
			for _, c := range children {
				if err := c.cmd.Wait(); err != nil {
					t.Errorf("child %d: %v\n%s", c.cmd.Process.Pid, err, c.stderr)
				}
			}
			if t.Failed() {
				return
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT n FROM counter WHERE id = 1").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != procs*rounds {
				t.Errorf("counter %d after %d critical sections: updates were lost", n, procs*rounds)
			}
			rows, err := db.QueryContext(ctx, "SELECT token, pid, start_ns, end_ns FROM history ORDER BY start_ns")
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var (
				sections int
				perPID   = map[int]int{}
				prev     struct{ token, start, end int64 }
			)
			for rows.Next() {
				var (
					token, start, end int64
					pid               int
				)
				if err := rows.Scan(&token, &pid, &start, &end); err != nil {
					t.Fatal(err)
				}
				if sections > 0 {
					if start <= prev.end {
						t.Errorf("critical section of token %d started %v before the one of token %d ended", token, time.Duration(prev.end-start), prev.token)
					}
					if token <= prev.token {
						t.Errorf("token %d granted after token %d", token, prev.token)
					}
				}
				sections++
				perPID[pid]++
				prev.token, prev.start, prev.end = token, start, end
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if sections != procs*rounds || len(perPID) != procs {
				t.Errorf("%d critical sections by %d processes, want %d by %d", sections, len(perPID), procs*rounds, procs)
			}
		})
	}
}

// A process killed while holding the lock, in the middle of a guarded write,
// leaves a live lease and no write: another process gets the lock once the
// lease has expired on the database clock, not before, with a larger token.
func TestSQLiteCrashedProcessTakenOver(t *testing.T) {
	t.Parallel()
	for _, s := range leaseStrategies {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			const ttl = 3 * time.Second
			db, path, d := sqliteCounterDB(t)
			ctx := ctxT(t)
			cmd, stderr := startChild(t, childConfig{Role: "hold", File: path, Strategy: s.name, TTL: ttl})
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var crashed int64
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if _, serr := fmt.Sscanf(line, "held %d", &crashed); err != nil || serr != nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("child never held the lock: %q, %v\n%s", line, err, stderr)
			}
			l, err := s.new(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl}})
			if err != nil {
				t.Fatal(err)
			}
			// Readers are not blocked by the child's open write transaction.
			before, err := l.List(ctx)
			if err != nil || len(before) != 1 || before[0].Token != crashed {
				t.Fatalf("List while the child holds: %+v, %v", before, err)
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait() // killed
			var n int
			if err := db.QueryRowContext(ctx, "SELECT n FROM counter WHERE id = 1").Scan(&n); err != nil || n != 0 {
				t.Fatalf("counter after the crash: %d, %v; the uncommitted write must be gone", n, err)
			}
			k, err := l.TryAcquire(ctx, "crash")
			switch {
			case errors.Is(err, sqllock.ErrLocked): // the lease lives on
				start := time.Now()
				if k, err = l.Acquire(ctx, "crash"); err != nil {
					t.Fatal(err)
				}
				// Not a measure of speed: the lease ends by its TTL, and a
				// waiter polls at most every 500 ms.
				if took := time.Since(start); took > 10*ttl {
					t.Errorf("takeover %v after the crash, want within 10 × TTL %v", took, ttl)
				}
			case err == nil:
				// Only a machine too busy to get here within the TTL of the
				// child's grant may take the lock now: the check of the
				// database clock below says whether the lease had expired.
				t.Logf("TryAcquire right after the crash took the lock: the TTL %v has passed, as List will tell", ttl)
			default:
				t.Fatalf("TryAcquire right after the crash: %v, want ErrLocked (the lease lives on)", err)
			}
			defer k.Release(ctx)
			if k.Token() <= crashed {
				t.Errorf("token %d after the crashed holder's %d", k.Token(), crashed)
			}
			after, err := l.List(ctx)
			if err != nil || len(after) != 1 {
				t.Fatalf("List after the takeover: %+v, %v", after, err)
			}
			if after[0].AcquiredAt.Before(before[0].ExpiresAt) {
				t.Errorf("taken over at %v, before the crashed lease expired at %v", after[0].AcquiredAt, before[0].ExpiresAt)
			}
		})
	}
}

// Guard needs no row lock on SQLite: a guarded transaction that holds the
// write lock (begun IMMEDIATE, as on a pool from sqlite.Open) keeps another
// connection from even starting a takeover until it ends, and one that only
// read before the takeover cannot write afterwards (SQLITE_BUSY_SNAPSHOT).
// Connections of two pools lock each other out exactly as two processes do.
func TestSQLiteGuardHoldsOffOtherConnections(t *testing.T) {
	t.Parallel()
	for _, s := range leaseStrategies {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			db, path, d := sqliteCounterDB(t)
			// Another user of the file: no busy timeout, so it fails at once
			// where it would wait; deferred transactions.
			other, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			od, err := sqlite.New(other)
			if err != nil {
				t.Fatal(err)
			}
			isExpired := func(name string) bool {
				t.Helper()
				// Readers are never blocked in WAL mode.
				var done bool
				err := other.QueryRowContext(ctx, "SELECT expires_at <= CAST(unixepoch('subsec') * 1000000 AS INTEGER) FROM "+s.table+" WHERE name = ?", name).Scan(&done)
				if err != nil {
					t.Fatal(err)
				}
				return done
			}
			expired := func(name string) {
				t.Helper()
				testutil.Eventually(ctx, t, "the lease of "+name+" expires on the database clock", func() bool { return isExpired(name) })
			}
			// guarded grants a short lease on name to owner through gd, and
			// guards a transaction begun on db with it. A machine too busy
			// to guard before the lease expires (the database clock says
			// whether it had) makes it try again, on a fresh name with
			// twice the TTL.
			guarded := func(gd dialect.Dialect, db *sql.DB, name, owner string) (dialect.Lease, *sql.Tx) {
				t.Helper()
				for ttl, try := 200*time.Millisecond, 0; ; ttl, try = 2*ttl, try+1 {
					l := dialect.Lease{Name: fmt.Sprintf("%s-%d", name, try), Owner: owner}
					var err error
					if l.Token, err = s.grant(ctx, gd, dialect.AcquireParams{Name: l.Name, Owner: owner, TTL: ttl}); err != nil || l.Token == 0 {
						t.Fatalf("grant: %d, %v", l.Token, err)
					}
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					ok, err := s.stmts(gd).Guard(ctx, tx, l)
					if err == nil && ok {
						return l, tx
					}
					_ = tx.Rollback()
					if err != nil || !isExpired(l.Name) || ttl >= time.Minute {
						t.Fatalf("guard of a live lease: %v, %v", ok, err)
					}
					t.Logf("lease of %v expired before its guard; again with twice the TTL", ttl)
				}
			}

			// 1. An immediate guarded transaction holds off a takeover of its
			// lease even after the lease expired, and commits.
			holder, tx := guarded(d, db, "held-off", "holder")
			if _, err := tx.ExecContext(ctx, "UPDATE counter SET n = n + 1, token = ? WHERE id = 1", holder.Token); err != nil {
				t.Fatal(err)
			}
			expired(holder.Name)
			thief, err := s.new(od, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			// The table strategy reports the database busy; the optimistic
			// one finds its swaps refused and reports the lock taken.
			if _, err := thief.TryAcquire(ctx, holder.Name); !errors.Is(err, dialect.ErrTransient) && !errors.Is(err, sqllock.ErrLocked) {
				t.Fatalf("takeover during the guarded transaction: %v, want refused", err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatalf("guarded commit: %v", err)
			}
			k, err := thief.TryAcquire(ctx, holder.Name)
			if err != nil {
				t.Fatalf("takeover after the guarded commit: %v", err)
			}
			if k.Token() <= holder.Token {
				t.Fatalf("takeover token %d, want > %d", k.Token(), holder.Token)
			}
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}

			// 2. A deferred guarded transaction that only read when the
			// takeover committed cannot write afterwards.
			reader, dtx := guarded(od, other, "overtaken", "reader")
			defer dtx.Rollback()
			expired(reader.Name)
			l, err := s.new(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			k, err = l.TryAcquire(ctx, reader.Name)
			if err != nil {
				t.Fatalf("takeover while a deferred transaction reads: %v", err)
			}
			defer k.Release(ctx)
			_, err = dtx.ExecContext(ctx, "UPDATE counter SET n = n + 1, token = ? WHERE id = 1", reader.Token)
			var se *msqlite.Error
			if !errors.As(err, &se) || se.Code() != sqlite3.SQLITE_BUSY_SNAPSHOT {
				t.Fatalf("write of the overtaken guarded transaction: %v, want SQLITE_BUSY_SNAPSHOT", err)
			}
		})
	}
}
