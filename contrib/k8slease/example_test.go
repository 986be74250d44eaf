package sqllockk8slease_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"k8s.io/client-go/tools/leaderelection"

	sqllockk8slease "github.com/sqllock/sqllock/contrib/k8slease"
)

// client-go's elector, unchanged, with its lock in sqllock's lock table:
// the candidate leads, works, and steps down when its context ends.
func Example() {
	dir, err := os.MkdirTemp("", "sqllock-k8slease")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	d, err := sqlite.New(db)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := sqllock.Migrate(ctx, d); err != nil {
		log.Fatal(err)
	}
	e, err := sqllock.NewElection(d, sqllock.LeaseOptions{TTL: 15 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	lock := sqllockk8slease.New(e, "controller", "replica-a")
	defer lock.Close()

	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            "controller",
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				fmt.Println("replica-a leads")
				cancel() // the work is done: step down
			},
			OnStoppedLeading: func() { fmt.Println("replica-a stopped leading") },
		},
	})
	if _, err := e.Leader(context.Background(), "controller"); err != nil {
		fmt.Println(err)
	}
	// Output:
	// replica-a leads
	// replica-a stopped leading
	// sqllock: no leader
}
