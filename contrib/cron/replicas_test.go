package sqllockcron_test

import (
	"context"
	"database/sql"
	"log"
	"os"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/sqllock/sqllock"
	sqllockcron "github.com/sqllock/sqllock/contrib/cron"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/dbtest/migrated"
)

// The replicas' settings: a job every second, whose schedules fire skew
// apart; a run holds its lock at least minHold.
const (
	skew    = 150 * time.Millisecond
	minHold = 650 * time.Millisecond
)

// Three cron schedulers in one process, each with a pool and a locker of
// its own, fire the same job every second, skew apart: each run, up to the
// tenth, is recorded exactly once (a second record of a run fails on the
// key of the table runs, which is the run's scheduled time).
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
			duplicates := make(chan error, 100)
			logger := cron.PrintfLogger(log.New(os.Stderr, "", log.LstdFlags))
			var crons []*cron.Cron
			for replica := range 3 {
				rdb, d := migrated.Connect(t, tdb)
				table, err := sqllock.NewTable(d, sqllock.TableOptions{TTL: 3 * time.Second, MinHold: minHold})
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
						if err := record(ctx, rdb, tdb, slot, replica); err != nil {
							duplicates <- err
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
			end := time.Now().Add(60 * time.Second)
			for n := 0; n < runs; {
				if time.Now().After(end) {
					t.Fatalf("%d runs, not %d, within a minute", n, runs)
				}
				time.Sleep(100 * time.Millisecond)
				if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM runs").Scan(&n); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range crons {
				<-c.Stop().Done()
			}
			close(duplicates)
			for err := range duplicates {
				t.Errorf("a run ran twice: %v", err)
			}
			var first, last, n int64
			if err := db.QueryRowContext(ctx, "SELECT MIN(slot), MAX(slot), COUNT(*) FROM runs").Scan(&first, &last, &n); err != nil {
				t.Fatal(err)
			}
			if want := (last-first)/time.Second.Milliseconds() + 1; n != want {
				t.Errorf("%d runs scheduled from %d to %d, want %d", n, first, last, want)
			}
		})
	}
}

// record records the run scheduled at slot, by replica.
func record(ctx context.Context, db *sql.DB, tdb dbtest.Target, slot int64, replica int) error {
	_, err := db.ExecContext(ctx, tdb.Rebind("INSERT INTO runs (slot, replica) VALUES (?, ?)"), slot, replica)
	return err
}
