package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

// One replica of many runs the scheduler: each campaigns, the winner
// works until its leadership ends, and the others wait to take over.
func ExampleElection_Campaign() {
	ctx := context.Background()
	var d dialect.Dialect // postgres.New, mysql.New or sqlite.New, migrated
	election, err := sqllock.NewElection(d, sqllock.LeaseOptions{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	for ctx.Err() == nil {
		lead, err := election.Campaign(ctx, "scheduler", "10.0.0.7:8080")
		if err != nil {
			log.Fatal(err)
		}
		// Done closes when the lease is lost, before anyone else can be
		// elected; the term fences the leader's writes (see Guard).
		runScheduler(lead.Context(), lead.Term())
		_ = lead.Resign(context.WithoutCancel(ctx))
	}
}

func runScheduler(ctx context.Context, term int64) {}

// Followers find the leader to send it work.
func ExampleElection_Leader() {
	ctx := context.Background()
	var election *sqllock.Election
	info, err := election.Leader(ctx, "scheduler")
	if errors.Is(err, sqllock.ErrNoLeader) {
		return // an election is under way: try again later
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("leader %s, term %d, lease ends in %v\n", info.Value, info.Term, info.ExpiresIn)
}

// A proxy follows the leader: every change of leader, in order, until ctx
// ends. Term 0 means that nobody leads at the moment.
func ExampleElection_Observe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var election *sqllock.Election
	for info := range election.Observe(ctx, "scheduler") {
		if info.Term == 0 {
			fmt.Println("no leader")
			continue
		}
		fmt.Println("route to", info.Value)
	}
}

// A leader that moves announces its new address, guarded by its term.
func ExampleLeadership_Proclaim() {
	ctx := context.Background()
	var lead *sqllock.Leadership // from Election.Campaign
	if err := lead.Proclaim(ctx, "10.0.0.8:8080"); errors.Is(err, sqllock.ErrLockLost) {
		return // no longer the leader
	}
}

// The leader's writes commit only while it leads: a deposed leader that has
// not noticed yet is refused, and the term stored with the data tells later
// readers which leader wrote it.
func ExampleLeadership_Guard() {
	ctx := context.Background()
	var (
		db   *sql.DB             // the application's pool
		lead *sqllock.Leadership // from Election.Campaign
	)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE schedule SET next_run = now(), term = $1", lead.Term()); err != nil {
		log.Fatal(err)
	}
	if err := lead.Guard(ctx, tx); err != nil {
		return // no longer the leader: roll back
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}

// A program that only reads the leader needs an Election too: NewElection
// takes the lock table's options, of which Observe uses MaxBackoff as its
// polling bound.
func ExampleNewElection() {
	var d dialect.Dialect // postgres.New, mysql.New or sqlite.New, migrated
	election, err := sqllock.NewElection(d, sqllock.LeaseOptions{MaxBackoff: 200 * time.Millisecond})
	if errors.Is(err, sqllock.ErrUnsupported) {
		log.Fatal("this database offers no leader election (TiDB)")
	}
	if err != nil {
		log.Fatal(err)
	}
	_ = election
}
