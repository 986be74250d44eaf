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
// The optimistic strategy ([NewOptimistic]) offers the same [Locker] through
// compare-and-swap on a version column, the version being the fencing token.
// For users' own rows, [CheckUpdate] and [RetryOnConflict] make
// version-checked updates (read, then UPDATE ... WHERE version = ?) retry on
// conflict. The pessimistic strategy ([NewPessimistic]) holds a row lock
// (SELECT ... FOR UPDATE) in an open transaction, [Lock.Tx], whose writes
// commit with the release; [InTx] runs a function in a transaction that is
// retried on deadlocks and serialization failures. A [Reaper] deletes the
// rows of expired and released locks.
//
// Properties: mutual exclusion; expiry, so a crashed holder cannot block
// everyone; explicit reentrancy ([WithOwner]); non-blocking TryAcquire and
// blocking Acquire bounded by a context; background renewal with a local
// trust window; loss reported through the lock's context ([ErrLockLost]);
// fencing tokens that only grow per name ([Lock.Token]); and guarded writes
// ([Lock.Guard]), which let a holder's own transaction commit only while it
// still holds the lock. A call that returns an error leaves nothing behind
// on the server, and its error says whether a statement may have been
// applied ([ErrOutcomeUnknown]) or none was sent ([ErrPoolExhausted],
// [ErrUnavailable]).
//
// Observability: a *slog.Logger in the options receives losses and
// fall-backs, and at debug level every acquisition, release and renewal; an
// [Observer] receives lock events as calls, and a [Tracer] everything the
// library does. Package sqllockotel is a Tracer that records OpenTelemetry
// metrics and spans.
package sqllock
