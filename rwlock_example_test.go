package sqllock_test

import (
	"context"
	"log"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

// Many replicas read a shared configuration at once; a writer that
// rewrites it waits for the readers in, keeps new readers out meanwhile,
// and gets a token above every reader's.
func ExampleRWLock() {
	ctx := context.Background()
	var d dialect.Dialect // postgres.New(db), mysql.New(db) or sqlite.New(db), migrated
	rw, err := sqllock.NewRWLock(d, sqllock.LeaseOptions{})
	if err != nil {
		log.Fatal(err)
	}

	// A reader.
	r, err := rw.AcquireShared(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	readConfig(r.Context())
	_ = r.Release(context.WithoutCancel(ctx))

	// The writer: Acquire takes the write side, so Do works too.
	err = sqllock.Do(ctx, rw, "config", func(ctx context.Context) error {
		return writeConfig(ctx)
	})
	if err != nil {
		log.Fatal(err)
	}
}

func readConfig(ctx context.Context)        {}
func writeConfig(ctx context.Context) error { return nil }

// A migration reads the schema version beside other readers, decides,
// and only then writes, with no other writer in between: the upgradeable
// read keeps writers (and other upgraders) out from the start, Upgrade
// waits for the plain readers to leave, and Downgrade lets them back in
// while the migrator verifies its work.
func ExampleRWLock_AcquireUpgradeable() {
	ctx := context.Background()
	var d dialect.Dialect // postgres.New(db), mysql.New(db) or sqlite.New(db), migrated
	rw, err := sqllock.NewRWLock(d, sqllock.LeaseOptions{})
	if err != nil {
		log.Fatal(err)
	}
	k, err := rw.AcquireUpgradeable(ctx, "schema")
	if err != nil {
		log.Fatal(err)
	}
	defer k.Release(context.WithoutCancel(ctx))
	if !needsMigration(k.Context()) {
		return
	}
	if err := k.Upgrade(ctx); err != nil { // the writer now, same token
		log.Fatal(err)
	}
	if err := writeConfig(k.Context()); err != nil {
		log.Fatal(err)
	}
	if err := k.Downgrade(ctx); err != nil { // a plain reader again
		log.Fatal(err)
	}
	readConfig(k.Context())
}

func needsMigration(ctx context.Context) bool { return true }
