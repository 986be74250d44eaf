package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"github.com/sqllock/sqllock"
)

// A transfer between two accounts takes both accounts' locks at once, so
// that two transfers in opposite directions never wait for each other.
func ExampleTable_AcquireAll() {
	ctx := context.Background()
	var (
		db     *sql.DB        // the application's pool
		locker *sqllock.Table // from sqllock.NewTable
	)
	set, err := locker.AcquireAll(ctx, "account:42", "account:7")
	if err != nil {
		log.Fatal(err)
	}
	defer set.Release(context.WithoutCancel(ctx))

	tx, err := db.BeginTx(set.Context(), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if err := set.Guard(ctx, tx); err != nil {
		log.Fatal(err) // ErrLockLost: a lease of the set was lost
	}
	for _, lock := range set.Locks() {
		// Each lock has a fencing token of its own.
		fmt.Println(lock.Name(), lock.Token())
	}
	// ... move the money, storing the tokens with the rows ...
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}

// TryAcquireAll takes every name or none, at once.
func ExampleTable_TryAcquireAll() {
	ctx := context.Background()
	var locker *sqllock.Table // from sqllock.NewTable
	set, err := locker.TryAcquireAll(ctx, "shard:1", "shard:2", "shard:3")
	if errors.Is(err, sqllock.ErrLocked) {
		return // another owner holds one of them; nothing was taken
	}
	if err != nil {
		log.Fatal(err)
	}
	defer set.Release(context.WithoutCancel(ctx))
	runShards(set.Context()) // its context ends if any lease of the set is lost
}

func runShards(ctx context.Context) {}
