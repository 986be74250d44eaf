package barrier_test

import (
	"context"
	"errors"
	"log"

	"github.com/sqllock/sqllock/barrier"
	"github.com/sqllock/sqllock/dialect"
)

// Five workers, each in a process of its own, start a load test together
// and finish it together: each enters the barrier, which returns once all
// five have entered, runs its share, and leaves, which returns once all
// five have left.
func ExampleBarrier() {
	ctx := context.Background()
	var d dialect.Dialect // postgres.New, mysql.New or sqlite.New, migrated
	b, err := barrier.New(d, "load-test", 5, barrier.Options{})
	if err != nil {
		log.Fatal(err)
	}
	m, err := b.Enter(ctx)
	if err != nil {
		log.Fatal(err) // wraps barrier.ErrSizeMismatch if its members have another size
	}
	// All five have entered. m.Context() ends if this member's lease is lost.
	runShare(m.Context())

	if err := m.Leave(ctx); errors.Is(err, barrier.ErrMemberLost) {
		log.Fatal("a worker died before it left: ", err)
	} else if err != nil {
		log.Fatal(err)
	}
	// All five have left.
}

// runShare stands for a worker's share of the work.
func runShare(context.Context) {}
