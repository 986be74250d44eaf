package sqllockcron_test

import (
	"context"
	"log"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	sqllockcron "github.com/sqllock/sqllock/contrib/cron"
	"github.com/sqllock/sqllock/ledger"
	"github.com/sqllock/sqllock/tests/migrated"
)

// Three cron schedulers in one process, each with a pool and a run ledger
// of its own and no minimum hold anywhere, fire the same job every second,
// skew apart: the job runs once per scheduled time, up to the tenth — the
// ledger shows one succeeded attempt per run, and the job ran as often as
// the ledger has runs. (A scheduler that fires more than a period late, on
// a loaded machine, keys its run by a later time, so how many seconds had
// no run is logged, not asserted.)
func TestOncePerScheduledTime(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tdb := migrated.New(t, kind)
			_, d := migrated.Connect(t, tdb)
			var ran atomic.Int64
			logger := cron.PrintfLogger(log.New(os.Stderr, "", log.LstdFlags))
			parser := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)
			schedule, err := parser.Parse("* * * * * *")
			if err != nil {
				t.Fatal(err)
			}
			var crons []*cron.Cron
			for replica := range 3 {
				_, rd := migrated.Connect(t, tdb)
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
					time.Sleep(offset) // this replica's schedule fires late
					wrap(cron.FuncJob(func() { ran.Add(1) })).Run()
				}))
				crons = append(crons, c)
			}
			for _, c := range crons {
				c.Start()
			}
			const runs = 10
			end := time.Now().Add(5 * time.Minute) // a hang, not a measure
			for ran.Load() < runs {
				if time.Now().After(end) {
					t.Fatalf("%d runs, not %d, within 5 minutes", ran.Load(), runs)
				}
				time.Sleep(100 * time.Millisecond)
			}
			for _, c := range crons {
				<-c.Stop().Done()
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
			if n := ran.Load(); int64(len(seen)) != n {
				t.Errorf("%d occurrences in the ledger, the job ran %d times", len(seen), n)
			}
			if len(infos) > 0 {
				first, _ := time.Parse(ledger.TimeFormat, infos[len(infos)-1].Occurrence)
				last, _ := time.Parse(ledger.TimeFormat, infos[0].Occurrence)
				t.Logf("%d runs over %v of schedule", len(seen), last.Sub(first)+time.Second)
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
