package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/sqlite"
)

// The processes of one host share a lock database file; at most one of them
// runs the nightly report at a time.
func ExampleOpen() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqllock-example") // e.g. /var/lib/myapp
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	db, err := sqlite.Open(filepath.Join(dir, "locks.db"))
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
	locker, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Second}})
	if err != nil {
		log.Fatal(err)
	}
	lock, err := locker.TryAcquire(ctx, "job:nightly-report")
	if errors.Is(err, sqllock.ErrLocked) {
		return // another process runs it
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(context.WithoutCancel(ctx))

	fmt.Println("running the report with fencing token", lock.Token())
	// Output: running the report with fencing token 1
}
