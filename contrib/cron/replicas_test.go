package sqllockcron_test

import (
	"context"
	"database/sql"
	"log"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/sqllock/sqllock"
	sqllockcron "github.com/sqllock/sqllock/contrib/cron"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/tests/migrated"
)

// The replicas' settings: a job every second, whose schedules fire skew
// apart; a run holds its lock at least minHold.
const (
	skew    = 150 * time.Millisecond
	minHold = 650 * time.Millisecond
)

// Three cron schedulers in one process, each with a pool and a locker of
// its own, fire the same job every second, skew apart: no two runs
// overlap, and runs go on. A minimum hold is a heuristic against a late
// replica running the same second again: on a quiet machine each second
// runs once, but a scheduler that fires later than the hold (a loaded
// machine) runs it again, and one whose lock outlives the period misses
// the next. So those counts are logged, not asserted; TestOncePerScheduledTime
// proves exactly once per run through the run ledger.
func TestReplicas(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tdb := migrated.New(t, kind)
			db, _ := migrated.Connect(t, tdb)
			if _, err := db.Exec("CREATE TABLE runs (slot BIGINT PRIMARY KEY, replica INT NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			var running, overlaps, duplicates atomic.Int64
			logger := cron.PrintfLogger(log.New(os.Stderr, "", log.LstdFlags))
			var crons []*cron.Cron
			for replica := range 3 {
				rdb, d := migrated.Connect(t, tdb)
				table, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 3 * time.Second}, MinHold: minHold})
				if err != nil {
					t.Fatal(err)
				}
				wrap := sqllockcron.SkipIfLockedElsewhere(table, "tick", logger)
				offset := time.Duration(replica) * skew
				c := cron.New(cron.WithSeconds())
				_, err = c.AddJob("* * * * * *", cron.FuncJob(func() {
					slot := time.Now().Truncate(time.Second).UnixMilli()
					time.Sleep(offset) // this replica's schedule fires late
					wrap(cron.FuncJob(func() {
						if running.Add(1) > 1 {
							overlaps.Add(1)
						}
						defer running.Add(-1)
						if err := record(ctx, rdb, tdb, slot, replica); err != nil {
							duplicates.Add(1)
						}
					})).Run()
				}))
				if err != nil {
					t.Fatal(err)
				}
				crons = append(crons, c)
			}
			for _, c := range crons {
				c.Start()
			}
			const runs = 10
			end := time.Now().Add(5 * time.Minute) // a hang, not a measure
			for n := 0; n < runs; {
				if time.Now().After(end) {
					t.Fatalf("%d runs, not %d, within 5 minutes", n, runs)
				}
				time.Sleep(100 * time.Millisecond)
				if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM runs").Scan(&n); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range crons {
				<-c.Stop().Done()
			}
			if n := overlaps.Load(); n > 0 {
				t.Errorf("%d runs started while another ran", n)
			}
			var first, last, n int64
			if err := db.QueryRowContext(ctx, "SELECT MIN(slot), MAX(slot), COUNT(*) FROM runs").Scan(&first, &last, &n); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d seconds from first to last run: %d ran once, %d ran again, %d missed",
				(last-first)/time.Second.Milliseconds()+1, n, duplicates.Load(), (last-first)/time.Second.Milliseconds()+1-n)
		})
	}
}

// record records the run scheduled at slot, by replica.
func record(ctx context.Context, db *sql.DB, tdb dbtest.Target, slot int64, replica int) error {
	_, err := db.ExecContext(ctx, tdb.Rebind("INSERT INTO runs (slot, replica) VALUES (?, ?)"), slot, replica)
	return err
}
