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
//	locker, _ := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Second}})
//	lock, err := locker.TryAcquire(ctx, "job:nightly-report")
//	if errors.Is(err, sqllock.ErrLocked) {
//		return nil // another replica runs it
//	}
//	if err != nil {
//		return err
//	}
//	defer lock.Release(context.WithoutCancel(ctx))
//	work(lock.Context()) // cancelled with cause ErrLockLost if the lease is lost
//
// # Strategies
//
// Every strategy is a [Locker] (Acquire waits, TryAcquire returns
// [ErrLocked] at once) handing out the same [*Lock]:
//
//   - [NewTable] returns a [Table]: a lease per name in a lock table, taken
//     by one upsert; fencing tokens from a sequence or a token floor. It
//     also takes sets of names at once, all or none ([Table.AcquireAll],
//     [Table.TryAcquireAll]), as a [LockSet].
//   - [NewOptimistic] returns an [Optimistic]: a lease per name in a version
//     table, taken by compare-and-swap on the version, which is the token.
//   - [NewPessimistic] returns a [Pessimistic]: the row lock (SELECT ...
//     FOR UPDATE, or FOR SHARE with AcquireShared) of an open transaction,
//     [Lock.Tx], whose statements commit with [Lock.Release] or roll back
//     with [Lock.Abort]. Its options are [PessimisticOptions].
//   - [NewSemaphore] returns a [Semaphore]: up to N holders per name, each
//     with a lease, an owner and a fencing token of its own ([Semaphore.List]
//     lists the holders); [Semaphore.SetLimit] resizes a name live, and
//     [Semaphore.Available] reads its free permits.
//   - [NewRWLock] returns an [RWLock]: a read/write lock, writer-preferring,
//     with a lease and a token per holder; Acquire takes the write side,
//     AcquireShared the read side.
//
// The lease strategies share their options in [LeaseOptions] (TTL,
// renewal, waiting backoff, logger, observer), which [NewRWLock] and
// [NewElection] take as it is and [TableOptions], [OptimisticOptions] and
// [SemaphoreOptions] embed beside the options only some have (a minimum
// hold, FIFO order), so a combination that cannot work does not compile;
// they list their locks for operators ([Table.List],
// [Optimistic.List], as [LockInfo]). Each strategy has its own tables, so a
// name held under one strategy does not exclude the same name under another.
//
// # Leader election
//
// [NewElection] returns an [Election] over the lock table: [Election.Campaign]
// waits to lead a name and returns a [Leadership], whose term is its lease's
// fencing token and whose context ends when the lease is lost, before anyone
// else can be elected; [Election.Leader] reads the current leader as a
// [LeaderInfo] ([ErrNoLeader] when none) and [Election.Observe] streams its
// changes. [ValidateValue] checks a leader's value ([MaxValueLen] bytes at
// most, [ErrInvalidValue] otherwise).
//
// # Helpers
//
//   - [Do] acquires (waiting), runs a function under the lock, releases.
//   - [TryDo] runs a function only if the lock is free, and reports a
//     skipped run without an error: the cron or ticker job that every
//     replica starts. With [TableOptions].MinHold a little below the job's period,
//     a short job runs once per period however late the other replicas
//     start within it. [TryDoBounded] takes the hold's [Bounds] per run
//     instead: at least so long (the minimum hold), at most so long (fn's
//     context ends).
//   - Package [github.com/sqllock/sqllock/ledger] runs each scheduled
//     occurrence of a periodic job once to success across replicas, with
//     takeover of a crashed run and a record of missed ones.
//   - [WithOwner] makes acquisitions re-entrant for an explicit owner.
//   - [ValidateName] checks a lock name ([MaxNameLen] bytes at most).
//   - Package [github.com/sqllock/sqllock/rowlock] has the helpers for
//     your own rows: version-checked updates retried on conflict, and
//     transactions retried on deadlocks with bounded lock waits.
//   - [NewReaper] returns a [Reaper] ([ReaperOptions]) that deletes the rows
//     of expired and released locks.
//   - [Migrate], [MigrateDown], [MigrationVersion] and [MigrateForce] manage
//     the schema.
//
// # Guarantees
//
// Mutual exclusion; expiry, so a crashed holder cannot block everyone;
// explicit reentrancy ([WithOwner]); non-blocking TryAcquire and blocking
// Acquire bounded by a context; background renewal with a local trust
// window; loss reported through the lock's context ([ErrLockLost]); fencing
// tokens that only grow per name ([Lock.Token]); and guarded writes
// ([Lock.Guard]), which let a holder's own transaction commit only while it
// still holds the lock. A call that returns an error leaves nothing behind
// on the server, and its error says whether a statement may have been
// applied ([ErrOutcomeUnknown]), none was sent ([ErrPoolExhausted],
// [ErrUnavailable]), or a transaction was rolled back ([ErrRolledBack]).
//
// Observability: a *slog.Logger in the options receives losses and
// fall-backs, and at debug level every acquisition, release and renewal.
// The Observer in the options receives lock events as calls: it implements
// the small interfaces of package [github.com/sqllock/sqllock/observe] for
// the events it cares about ([observe.LostObserver], say, for losses alone).
// Package sqllockotel implements them all, recording OpenTelemetry metrics
// and spans.
package sqllock
