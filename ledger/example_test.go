package ledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/ledger"
)

// Every replica runs the same code from its own hourly timer; one of them
// runs each hour's report, the others skip it.
func ExampleLedger_Run() {
	ctx := context.Background()
	var d dialect.Dialect // postgres.New, mysql.New or sqlite.New, migrated
	l, err := ledger.New(d, ledger.Options{TTL: 30 * time.Second, Retries: 2, RetryBackoff: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	res, err := l.Run(ctx, "hourly-report", ledger.Every(time.Hour), func(ctx context.Context, r *ledger.Run) error {
		return sendReport(ctx, r.Occurrence)
	})
	switch {
	case err != nil:
		log.Printf("report %s failed: %v", res.Occurrence, err)
	case !res.Ran:
		log.Printf("report %s: %s elsewhere", res.Occurrence, res.State)
	}
}

func sendReport(ctx context.Context, occurrence string) error { return nil }

// A scheduler that knows its schedule names the occurrence itself; the
// function's writes are fenced by the attempt's lease.
func ExampleRun_Guard() {
	ctx := context.Background()
	var (
		l  *ledger.Ledger
		db *sql.DB
	)
	scheduled := time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)
	_, err := l.Run(ctx, "nightly-billing", ledger.At(scheduled), func(ctx context.Context, r *ledger.Run) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "UPDATE invoices SET billed = true WHERE period = $1", r.Occurrence); err != nil {
			return err
		}
		if err := r.Guard(ctx, tx); err != nil {
			return err // the attempt's lease ended: another replica may run it
		}
		return tx.Commit()
	})
	if err != nil {
		log.Fatal(err)
	}
}

// An alert on the occurrences no replica claimed: a dead man's switch.
func ExampleLedger_Missed() {
	ctx := context.Background()
	var l *ledger.Ledger
	missed, err := l.Missed(ctx, "", 0)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range missed {
		fmt.Printf("%s missed its run of %s\n", m.Job, m.Occurrence)
	}
}

// Occurrences at 02:00 UTC every day, derived on the database's clock.
func ExampleOccurrence_Phase() {
	daily := ledger.Every(24 * time.Hour).Phase(2 * time.Hour)
	fmt.Println(daily)
	// Output: every 24h0m0s (phase 2h0m0s)
}

// The occurrence of a scheduled time is its key in ledger.TimeFormat.
func ExampleAt() {
	fmt.Println(ledger.At(time.Date(2026, 11, 26, 3, 0, 0, 0, time.FixedZone("CET", 3600))))
	// Output: 2026-11-26T02:00:00.000000Z
}
