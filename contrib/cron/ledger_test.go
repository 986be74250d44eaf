package sqllockcron_test

import (
	"context"
	"log"
	"os"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	sqllockcron "github.com/sqllock/sqllock/contrib/cron"
	"github.com/sqllock/sqllock/ledger"
)

// Three cron schedulers in one process, each with a pool and a run ledger
// of its own and no minimum hold anywhere, fire the same job every second,
// skew apart: each run, up to the tenth, is recorded exactly once, keyed
// by its scheduled time, and the ledger shows one succeeded attempt per
// run.
func TestOncePerScheduledTime(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tdb := newTestDB(t, kind)
			db, d := tdb.connect(t)
			if _, err := db.Exec("CREATE TABLE runs (slot BIGINT PRIMARY KEY, replica INT NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			duplicates := make(chan error, 100)
			logger := cron.PrintfLogger(log.New(os.Stderr, "", log.LstdFlags))
			parser := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)
			schedule, err := parser.Parse("* * * * * *")
			if err != nil {
				t.Fatal(err)
			}
			var crons []*cron.Cron
			for replica := range 3 {
				rdb, rd := tdb.connect(t)
				l, err := ledger.New(rd, ledger.Options{})
				if err != nil {
					t.Fatal(err)
				}
				wrap, err := sqllockcron.OncePerScheduledTime(l, "tick", schedule, logger)
				if err != nil {
					t.Fatal(err)
				}
				offset := time.Duration(replica) * skew
				c := cron.New(cron.WithParser(parser))
				c.Schedule(schedule, cron.FuncJob(func() {
					slot := time.Now().Truncate(time.Second).UnixMilli()
					time.Sleep(offset) // this replica's schedule fires late
					wrap(cron.FuncJob(func() {
						if err := record(ctx, rdb, tdb, slot, replica); err != nil {
							duplicates <- err
						}
					})).Run()
				}))
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
			l, err := ledger.New(d, ledger.Options{})
			if err != nil {
				t.Fatal(err)
			}
			infos, err := l.Runs(ctx, "tick", 1000)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, in := range infos {
				if in.State != ledger.StateSucceeded || seen[in.Occurrence] {
					t.Errorf("attempt %+v: want one succeeded attempt per run", in)
				}
				seen[in.Occurrence] = true
			}
			if int64(len(seen)) != n {
				t.Errorf("%d occurrences in the ledger, %d runs recorded", len(seen), n)
			}
		})
	}
}

// A schedule of constant delay (@every) counts from each scheduler's
// start: it has no scheduled times common to the replicas, and is refused.
func TestOncePerScheduledTimeRefusesEvery(t *testing.T) {
	t.Parallel()
	every, err := cron.ParseStandard("@every 1h")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqllockcron.OncePerScheduledTime(nil, "tick", every, cron.DiscardLogger); err == nil {
		t.Fatal("a constant delay schedule was accepted")
	}
}
