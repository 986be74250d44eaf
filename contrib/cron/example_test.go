package sqllockcron_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/sqllock/sqllock"
	sqllockcron "github.com/sqllock/sqllock/contrib/cron"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/ledger"
)

// Two replicas' schedules fire the same run of a job, the second a little
// later; the wrapper runs it once: the minimum hold, a little below the
// period, keeps the lock taken after the first run's end.
func ExampleSkipIfLockedElsewhere() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqllockcron")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "locks.db")) // or PostgreSQL, MySQL/MariaDB
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	d, err := sqlite.New(db)
	if err != nil {
		log.Fatal(err)
	}
	if err := sqllock.Migrate(ctx, d); err != nil {
		log.Fatal(err)
	}
	table, err := sqllock.NewTable(d, sqllock.TableOptions{MinHold: 50 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}

	report := cron.FuncJob(func() { fmt.Println("hourly report") })
	for range 2 { // on every replica, from the crontab line "@hourly"
		job := cron.NewChain(sqllockcron.SkipIfLockedElsewhere(table, "report:hourly", cron.DiscardLogger)).Then(report)
		job.Run()
	}
	// Output: hourly report
}

// Two replicas start the same scheduled run of a job, the second a little
// later or much later; the run ledger runs it once, keyed by its scheduled
// time, with no minimum hold to tune.
func ExampleOncePerScheduledTime() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqllockcron")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "locks.db")) // or PostgreSQL, MySQL/MariaDB
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	d, err := sqlite.New(db)
	if err != nil {
		log.Fatal(err)
	}
	if err := sqllock.Migrate(ctx, d); err != nil {
		log.Fatal(err)
	}
	runs, err := ledger.New(d, ledger.Options{})
	if err != nil {
		log.Fatal(err)
	}
	hourly, err := cron.ParseStandard("@hourly")
	if err != nil {
		log.Fatal(err)
	}
	once, err := sqllockcron.OncePerScheduledTime(runs, "report:hourly", hourly, cron.DiscardLogger)
	if err != nil {
		log.Fatal(err)
	}

	report := cron.FuncJob(func() { fmt.Println("hourly report") })
	for range 2 { // on every replica: c.Schedule(hourly, cron.NewChain(once).Then(report))
		cron.NewChain(once).Then(report).Run()
	}
	// Output: hourly report
}
