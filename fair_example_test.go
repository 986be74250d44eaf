package sqllock_test

import (
	"context"
	"log"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

// Print jobs are served in the order they started waiting, and each release
// wakes only the next waiter.
func ExampleTableOptions_fair() {
	ctx := context.Background()
	var d dialect.Dialect // postgres.New, mysql.New or sqlite.New, migrated
	locker, err := sqllock.NewTable(d, sqllock.TableOptions{Fair: true})
	if err != nil {
		log.Fatal(err)
	}
	err = sqllock.Do(ctx, locker, "printer", func(ctx context.Context) error {
		return printJob(ctx)
	})
	if err != nil {
		log.Fatal(err)
	}
}

func printJob(ctx context.Context) error { return nil }

// Transcoding jobs take one of three permits in the order they started
// waiting.
func ExampleNewSemaphore_fair() {
	ctx := context.Background()
	var d dialect.Dialect // postgres.New, mysql.New or sqlite.New, migrated
	sem, err := sqllock.NewSemaphore(d, 3, sqllock.SemaphoreOptions{Fair: true})
	if err != nil {
		log.Fatal(err)
	}
	err = sqllock.Do(ctx, sem, "transcoder", func(ctx context.Context) error {
		return transcode(ctx)
	})
	if err != nil {
		log.Fatal(err)
	}
}

func transcode(ctx context.Context) error { return nil }
