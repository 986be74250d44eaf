package sqllockgocron_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/sqllock/sqllock"
	sqllockgocron "github.com/sqllock/sqllock/contrib/gocron"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/sqlite"
)

// Two replicas schedule the same job; the Locker runs it on one of them.
// The minimum hold, a little below the period, keeps a replica that fires
// the same run a little later from running it again.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqllockgocron")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	d, db, err := openSQLite(ctx, filepath.Join(dir, "locks.db")) // or PostgreSQL, MySQL/MariaDB
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	table, err := sqllock.NewTable(d, sqllock.TableOptions{MinHold: 50 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}

	var outcomes sync.WaitGroup
	outcomes.Add(2) // one run, one skip
	for range 2 {   // on every replica
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(sqllockgocron.NewLocker(table)))
		if err != nil {
			log.Fatal(err)
		}
		defer s.Shutdown()
		_, err = s.NewJob(gocron.DurationJob(time.Hour),
			gocron.NewTask(func() { fmt.Println("hourly report") }),
			gocron.WithName("report:hourly"),
			gocron.WithStartAt(gocron.WithStartImmediately()),
			gocron.WithEventListeners(
				gocron.AfterJobRuns(func(uuid.UUID, string) { outcomes.Done() }),
				gocron.AfterLockError(func(uuid.UUID, string, error) { outcomes.Done() }),
			))
		if err != nil {
			log.Fatal(err)
		}
		s.Start()
	}
	outcomes.Wait()
	// Output: hourly report
}

// A replica campaigns with an Elector; its scheduler runs jobs only while
// it leads.
func ExampleElector() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "sqllockgocron")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	d, db, err := openSQLite(ctx, filepath.Join(dir, "locks.db")) // or PostgreSQL, MySQL/MariaDB
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	election, err := sqllock.NewElection(d, sqllock.LeaseOptions{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	elector, err := sqllockgocron.NewElector(election, "scheduler", "10.0.0.7")
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- elector.Run(ctx) }()
	defer func() {
		cancel() // resigns
		if err := <-done; err != nil {
			log.Print(err)
		}
	}()

	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown()
	ran := make(chan struct{})
	var once sync.Once
	_, err = s.NewJob(gocron.DurationJob(100*time.Millisecond),
		gocron.NewTask(func() { once.Do(func() { fmt.Println("run by the leader"); close(ran) }) }))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	<-ran
	// Output: run by the leader
}

// openSQLite opens the SQLite lock database at path, and migrates it.
func openSQLite(ctx context.Context, path string) (dialect.Dialect, *sql.DB, error) {
	db, err := sqlite.Open(path)
	if err != nil {
		return nil, nil, err
	}
	d, err := sqlite.New(db)
	if err == nil {
		err = sqllock.Migrate(ctx, d)
	}
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return d, db, nil
}
