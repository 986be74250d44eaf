package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

// A job that every replica starts each hour runs on one of them. The
// minimum hold, a little below the period, keeps the lock taken after a
// short job released it, so a replica that starts late skips; the loop ends
// with ctx, so shutdown does not wait for the next tick.
func ExampleTryDo() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var d dialect.Dialect // postgres.New(db), mysql.New(db) or sqlite.New(db)

	locker, err := sqllock.NewTable(d, sqllock.TableOptions{MinHold: 50 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	ticker := time.NewTicker(time.Hour)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		ran, err := sqllock.TryDo(ctx, locker, "report:hourly", hourlyReport)
		if err != nil {
			slog.Error("hourly report", "err", err)
		} else if !ran {
			slog.Debug("hourly report: another replica has it")
		}
	}
}

func hourlyReport(ctx context.Context) error { return nil }

// Selling from a stock needs no lock when the check and the write fit in
// one statement: the database checks the condition on the row it updates,
// under its row lock, so two buyers never both take the last item. For
// values computed in Go from what was read, see rowlock.RetryOnConflict
// and rowlock.InTx.
func Example_inventory() {
	ctx := context.Background()
	var db *sql.DB // the application's pool
	errSoldOut := errors.New("sold out")
	buy := func(id, qty int) error {
		res, err := db.ExecContext(ctx,
			`UPDATE items SET stock = stock - $1 WHERE id = $2 AND stock >= $1`, qty, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return errSoldOut // too few left, or no such item: nothing changed
		}
		return nil
	}
	if err := buy(42, 1); errors.Is(err, errSoldOut) {
		log.Print("sold out")
	}
}
