package latch_test

import (
	"context"
	"log"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/latch"
)

// A coordinator waits until the phase's three workers, in processes of
// their own, have finished it. Every process creates the latch with the
// same count (whichever comes first creates it), so that none depends on
// another having started.
func ExampleLatch() {
	ctx := context.Background()
	var d dialect.Dialect // postgres.New, mysql.New or sqlite.New, migrated
	l, err := latch.New(d, latch.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if err := l.Create(ctx, "import-phase-1", 3); err != nil {
		log.Fatal(err) // wraps latch.ErrCountMismatch if it exists with another count
	}

	// In each worker, once its share of the phase is done:
	if _, err := l.CountDown(ctx, "import-phase-1"); err != nil {
		log.Fatal(err)
	}

	// In the coordinator:
	if err := l.Wait(ctx, "import-phase-1"); err != nil {
		log.Fatal(err)
	}
	// Every worker has finished phase 1. Delete the latch once nobody
	// waits for it, so that the name can be created anew.
	if _, err := l.Delete(ctx, "import-phase-1"); err != nil {
		log.Fatal(err)
	}
}
