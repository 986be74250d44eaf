// Package sqllock provides distributed locks kept in the SQL database an
// application already runs: PostgreSQL (through pgx) and MySQL or MariaDB
// (through go-sql-driver/mysql); or, among the processes of one host, an
// embedded SQLite file (dialect/sqlite, pure Go).
//
// A dialect adapts a pool to a database:
//
//	db, _ := sql.Open("pgx", os.Getenv("DATABASE_URL"))
//	d, _ := postgres.New(db)
//	defer d.Close(ctx) // stops its listening connection, if one runs
//	if err := sqllock.Migrate(ctx, d); err != nil { ... }
//
// A strategy turns it into a Locker. The lock-table strategy (NewTable) keeps
// a row per lock name with an owner, a fencing token, a hold count and a lease
// whose expiry is computed on the database clock:
//
//	locker, _ := sqllock.NewTable(d, sqllock.Options{TTL: 30 * time.Second})
//	lock, err := locker.TryAcquire(ctx, "job:nightly-report")
//	if errors.Is(err, sqllock.ErrLocked) {
//		return nil // another replica runs it
//	}
//	defer lock.Release(context.WithoutCancel(ctx))
//	work(lock.Context()) // cancelled with cause ErrLockLost if the lease is lost
//
// The optimistic strategy (NewOptimistic) offers the same Locker through
// compare-and-swap on a version column, the version being the fencing token.
// For users' own rows, CheckUpdate and RetryOnConflict make version-checked
// updates (read, then UPDATE ... WHERE version = ?) retry on conflict.
//
// Properties: mutual exclusion; expiry, so a crashed holder cannot block
// everyone; explicit reentrancy (WithOwner); non-blocking TryAcquire and
// blocking Acquire bounded by a context; background renewal with a local
// trust window; loss reported through the lock's context; fencing tokens
// that only grow per name; and guarded writes (Lock.Guard), which let a
// holder's own transaction commit only while it still holds the lock.
package sqllock
