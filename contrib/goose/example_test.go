package sqllockgoose_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/sqlite"

	sqllockgoose "github.com/sqllock/sqllock/contrib/goose"
)

// Every replica runs the same Up at start-up; the lock makes them migrate
// one after the other, so the first applies the migrations and the others
// find nothing left to do.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqllock-goose")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	// goose holds a connection of the pool while it migrates, and the
	// lease is taken and renewed beside it: sqlite.Open's single
	// connection is not enough.
	db.SetMaxOpenConns(2)
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

	for replica := range 2 {
		p, err := goose.NewProvider(goose.DialectSQLite3, db, migrations,
			goose.WithLocker(sqllockgoose.NewLocker(locker, "goose")))
		if err != nil {
			log.Fatal(err)
		}
		results, err := p.Up(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("replica %d applied %d migrations\n", replica, len(results))
	}
	// Output:
	// replica 0 applied 3 migrations
	// replica 1 applied 0 migrations
}
