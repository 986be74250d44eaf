package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/postgres"
)

// Only one replica runs the nightly job; the others skip it.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	d, err := postgres.New(db)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close(ctx) // stops its listening connection, if one runs
	if err := sqllock.Migrate(ctx, d); err != nil {
		log.Fatal(err)
	}
	// The job starts on every replica each night; the minimum hold, a
	// little below the period, keeps replicas whose clocks or timers run
	// late from running it again after a short run released the lock.
	locker, err := sqllock.NewTable(d, sqllock.TableOptions{MinHold: 23 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	ran, err := sqllock.TryDo(ctx, locker, "job:nightly-report", func(ctx context.Context) error {
		return runReport(ctx) // ctx ends if the lease is lost
	})
	if err != nil {
		log.Print(err)
	}
	if !ran {
		log.Print("another replica ran tonight's report")
	}
}

func runReport(ctx context.Context) error { return nil }

// A guarded write commits only while the lock is held by this acquisition:
// a takeover has to wait for the transaction, and a holder that lost the lock
// without noticing is refused.
func ExampleLock_Guard() {
	ctx := context.Background()
	var (
		db     *sql.DB        // the application's pool
		locker sqllock.Locker // any lease-based locker
	)
	lock, err := locker.Acquire(ctx, "account:42")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(context.WithoutCancel(ctx))

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if err := lock.Guard(ctx, tx); err != nil {
		return // ErrLockLost: someone else owns account:42 now
	}
	if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance - 10, fence = $1 WHERE id = 42", lock.Token()); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}

// Re-entering a lock needs an explicit owner: goroutines sharing a locker
// exclude each other by default.
func ExampleWithOwner() {
	ctx := context.Background()
	var locker sqllock.Locker
	outer, err := locker.Acquire(ctx, "tree:7")
	if err != nil {
		log.Fatal(err)
	}
	defer outer.Release(ctx)

	// A callee re-enters on behalf of the same owner: same token, one more hold.
	inner, err := locker.TryAcquire(sqllock.WithOwner(ctx, outer.Owner()), "tree:7")
	if err != nil {
		log.Fatal(err)
	}
	defer inner.Release(ctx)
}

// Do acquires, runs and releases.
func ExampleDo() {
	ctx := context.Background()
	var locker sqllock.Locker
	err := sqllock.Do(ctx, locker, "migrate:tenant-9", func(ctx context.Context) error {
		return nil // ctx is cancelled with cause ErrLockLost if the lock is lost
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Run one reaper per process (or a few per cluster) to reclaim rows of
// expired and released locks.
func ExampleReaper_Run() {
	ctx := context.Background()
	var d *postgres.Dialect
	r, err := sqllock.NewReaper(d, sqllock.ReaperOptions{Interval: time.Minute, Logger: slog.Default()})
	if err != nil {
		log.Fatal(err)
	}
	go r.Run(ctx) // returns when ctx ends
}

// The optimistic locker has the same API as the lock table; its fencing
// token is the lock row's version.
func ExampleNewOptimistic() {
	ctx := context.Background()
	var d *postgres.Dialect
	locker, err := sqllock.NewOptimistic(d, sqllock.OptimisticOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Second}})
	if err != nil {
		log.Fatal(err)
	}
	lock, err := locker.TryAcquire(ctx, "job:rebuild-index")
	if errors.Is(err, sqllock.ErrLocked) {
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(context.WithoutCancel(ctx))
	rebuildIndex(lock.Context(), lock.Token()) // fence its writes with the token
}

func rebuildIndex(ctx context.Context, token int64) {}

// A pessimistic lock is a row lock held by a transaction: writes made in
// the lock's transaction commit exactly when it is released, and the
// database frees the lock at once if this process dies.
func ExampleNewPessimistic() {
	ctx := context.Background()
	var d *postgres.Dialect
	locker, err := sqllock.NewPessimistic(d, sqllock.PessimisticOptions{})
	if err != nil {
		log.Fatal(err)
	}
	lock, err := locker.Acquire(ctx, "account:42") // waits in the database's lock queue
	if err != nil {
		log.Fatal(err)
	}
	_, err = lock.Tx().ExecContext(ctx, "UPDATE accounts SET balance = balance - 10, fence = $1 WHERE id = 42", lock.Token())
	if err != nil {
		_ = lock.Release(ctx) // commits nothing that failed; the lock is freed
		log.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil { // COMMIT
		log.Fatal(err)
	}
}

// Readers share a lock; a writer waits for them and excludes them.
func ExamplePessimistic_AcquireShared() {
	ctx := context.Background()
	var locker *sqllock.Pessimistic
	lock, err := locker.AcquireShared(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(context.WithoutCancel(ctx))
	// ... read while no writer holds "config" ...
}

// At most three workers transcode at once, across every replica; each holds
// one permit, with a fencing token of its own.
func ExampleNewSemaphore() {
	ctx := context.Background()
	var d *postgres.Dialect // postgres.New(db), migrated
	sem, err := sqllock.NewSemaphore(d, 3, sqllock.SemaphoreOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Second}})
	if err != nil {
		log.Fatal(err)
	}
	err = sqllock.Do(ctx, sem, "transcoder", func(ctx context.Context) error {
		return nil // transcode; ctx ends if the permit's lease is lost
	})
	if err != nil {
		log.Fatal(err)
	}
}

// An operator raises a semaphore's limit while its holders work: waiters
// are granted at once, and every process's Semaphore counts against the
// new limit, whatever limit it was built with.
func ExampleSemaphore_SetLimit() {
	ctx := context.Background()
	var d *postgres.Dialect // postgres.New(db), migrated
	sem, err := sqllock.NewSemaphore(d, 3, sqllock.SemaphoreOptions{})
	if err != nil {
		log.Fatal(err)
	}
	if err := sem.SetLimit(ctx, "transcoder", 8); err != nil {
		log.Fatal(err)
	}
	free, err := sem.Available(ctx, "transcoder")
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%d transcoder permits free", free)
}

// Operators list the holders of every semaphore name.
func ExampleSemaphore_List() {
	ctx := context.Background()
	var sem *sqllock.Semaphore // sqllock.NewSemaphore(d, 3, sqllock.SemaphoreOptions{})
	holders, err := sem.List(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range holders {
		log.Printf("%s: %s holds token %d, lease ends in %v", h.Name, h.Owner, h.Token, h.ExpiresIn)
	}
}

// An operator frees a lock held by mistake (a minimum hold of a day on a
// job that runs hourly, say). The holder learns of it at its next renewal;
// its guarded writes are refused at once.
func ExampleTable_Break() {
	ctx := context.Background()
	var locker *sqllock.Table // sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{Logger: auditLog}})
	broken, ok, err := locker.Break(ctx, "job:hourly-export")
	switch {
	case err != nil:
		log.Fatal(err)
	case !ok:
		log.Print("nobody held job:hourly-export")
	default:
		log.Printf("broke %s's lease (token %d); the next holder's token is larger", broken.Owner, broken.Token)
	}
}

// An operator breaks the lease they were shown, token 17, and no other:
// had the job ended and another replica taken the lock meanwhile, its
// lease would be left alone.
func ExampleTable_BreakToken() {
	ctx := context.Background()
	var locker *sqllock.Table // sqllock.NewTable(d, sqllock.TableOptions{})
	lease, ok, err := locker.BreakToken(ctx, "job:hourly-export", 17)
	switch {
	case err != nil:
		log.Fatal(err)
	case ok:
		log.Printf("broke %s's lease (token 17)", lease.Owner)
	case lease.Token != 0:
		log.Printf("left alone: %s holds it now, token %d", lease.Owner, lease.Token)
	default:
		log.Print("nobody holds job:hourly-export")
	}
}

// The migration's holder says which host and version runs it; anyone reads
// that without acquiring the lock.
func ExampleLock_SetValue() {
	ctx := context.Background()
	var locker *sqllock.Table // sqllock.NewTable(d, sqllock.TableOptions{})
	lock, err := locker.Acquire(ctx, "migrate")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(context.WithoutCancel(ctx))
	host, _ := os.Hostname()
	if err := lock.SetValue(ctx, host+", schema v42"); err != nil {
		log.Fatal(err) // ErrLockLost: the lease ended before the write
	}

	// In another process:
	info, held, err := locker.Value(ctx, "migrate")
	switch {
	case err != nil:
		log.Fatal(err)
	case held:
		log.Printf("%s since %v: %s", info.Owner, info.AcquiredAt, info.Value)
	}
}

// A deploy asks the old version's holder to let go; the holder stops at a
// safe point and releases, and the new version acquires.
func ExampleTable_RequestRelease() {
	ctx := context.Background()
	var locker *sqllock.Table // sqllock.NewTable(d, sqllock.TableOptions{})
	lock, err := locker.Acquire(ctx, "ingest")
	if err != nil {
		log.Fatal(err)
	}
	work, stop := context.WithCancel(lock.Context())
	go func() {
		select {
		case <-lock.Revoked():
			log.Printf("asked to let go: %s", lock.RevokeReason())
			stop() // the work ends at its next safe point
		case <-work.Done():
		}
	}()
	ingest(work)
	stop()
	_ = lock.Release(context.WithoutCancel(ctx))

	// In the deploy, in another process:
	asked, err := locker.RequestRelease(ctx, "ingest", "deploy v1.43")
	switch {
	case err != nil:
		log.Fatal(err)
	case !asked:
		log.Print("nobody holds ingest")
	}
}

// ingest stands for work that checks ctx at its safe points.
func ingest(ctx context.Context) { <-ctx.Done() }
