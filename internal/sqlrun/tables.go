package sqlrun

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// The tables the strategies call, built by Open from a dialect's
// declarations. Implementations of every interface here are safe for
// concurrent use; the conformance suite (dialecttest) checks each contract
// on every dialect.

// LeaseTable runs the statements on leases of a table with a row per lock
// name holding an owner, a fencing token, a hold count and an expiry on the
// database clock: the lock table and the version table. A lease is named by
// (name, owner, token); on the version table the token is the version.
// Every method is one statement (RenewMany: at most two), run on a
// connection of its own.
type LeaseTable interface {
	// RenewMany extends the live leases among ls to ttl from now and
	// reports, for each, whether it was renewed (Renewal.OK): not when the
	// lease is no longer held (expired, released, or taken over); and, for
	// a renewed lease, the release requested of it (ReleaseRequests),
	// where the table keeps requests. Callers pass at most
	// dialect.MaxRenewBatch leases.
	RenewMany(ctx context.Context, ls []dialect.Lease, ttl time.Duration) ([]Renewal, error)
	// Release drops one hold of the lease; the last hold frees the lock while
	// keeping what the next token must exceed. It reports false when the
	// lease was taken over or already fully released.
	//
	// A last hold released before the lease's acquisition time plus
	// minHold, on the database clock, does not free the lock at once: the
	// row keeps no hold and stays unexpired until that instant, so that
	// no one (its owner included) acquires it before; then it is free
	// like any expired lease, with nobody left to renew or release it.
	// With minHold 0 (or once it has passed) the lock is free at once.
	Release(ctx context.Context, l dialect.Lease, minHold time.Duration) (bool, error)
	// Guard checks, inside tx, that the lease is live, and share-locks its
	// row until tx ends so that no takeover can commit before tx does. It
	// reports false when the lease is not live.
	Guard(ctx context.Context, tx *sql.Tx, l dialect.Lease) (bool, error)
	// List returns the held locks, and the released ones within their
	// minimum hold, ordered by name.
	List(ctx context.Context) ([]dialect.LockInfo, error)
}

// LockTable is the lock table: a LeaseTable whose rows are granted by one
// upsert.
type LockTable interface {
	LeaseTable
	// Acquire grants a lease on p.Name to p.Owner in one statement: it
	// inserts the row, takes over an expired or released row (with a new
	// token), or re-enters a live lease held by the same owner (same token,
	// one more hold). It returns the lease's token, or 0 when another owner
	// holds a live lease. Expiry is computed from the database clock. If ctx
	// ends while the statement runs, the statement is cancelled on the
	// server and Acquire returns only once it has ended: with the token if
	// it was applied anyway, else with an error wrapping ctx's (or
	// ErrOutcomeUnknown if the server could not be told).
	Acquire(ctx context.Context, p dialect.AcquireParams) (token int64, err error)
	// Remaining reports how long the live lease on name has left on the
	// database clock; ok is false when there is no row. Only waiters ask:
	// a dialect that announces releases marks the row as waited for.
	Remaining(ctx context.Context, name string) (d time.Duration, ok bool, err error)
	// Break ends the live lease on name now, whoever holds it, for an
	// operator: the row keeps its token, so the next grant's is larger;
	// the holder's renewals and guards fail from then on, and its release
	// reports the lease gone. A lock released within its minimum hold is
	// freed as well. It returns the lease it ended, and false (with no
	// error) when nothing held name.
	//
	// A token other than 0 scopes the break to that lease: when another
	// lease holds name, nothing is broken, and Break returns that lease
	// with false.
	Break(ctx context.Context, name string, token int64) (broken dialect.LockInfo, ok bool, err error)
}

// VersionTable is the version table of the optimistic strategy: a
// LeaseTable whose rows change only by compare-and-swap on the version,
// which is the lease's token. The grants (Create, Take, Reenter) behave as
// LockTable.Acquire when ctx ends while they run.
type VersionTable interface {
	LeaseTable
	// Read returns name's row; ok is false when there is none.
	Read(ctx context.Context, name string) (row dialect.VersionRow, ok bool, err error)
	// Create inserts name's row, held by p.Owner for p.TTL, at a version
	// above the version floor: above every version of a row that was
	// deleted (reaped), so that a name's versions keep growing across
	// reaping. It returns the new row's version, or 0, without error or
	// log noise, if the row exists.
	Create(ctx context.Context, p dialect.AcquireParams) (version int64, err error)
	// Take sets owner, a new version, one hold and a new expiry if the row
	// still has p.Version and is free or expired, and returns the new
	// version, or 0 if it did not. The new version is greater than
	// p.Version; a dialect whose tokens carry an epoch (see the postgres
	// dialect's timeline) may make it larger than p.Version + 1.
	Take(ctx context.Context, p dialect.SwapParams) (version int64, err error)
	// Reenter adds a hold and extends the lease if the row still has
	// p.Version and a live lease held by p.Owner.
	Reenter(ctx context.Context, p dialect.SwapParams) (bool, error)
}

// FairTable is the lock table with a queue of tickets per name. A ticket is
// live until its expiry on the database clock; expired tickets are skipped,
// and deleted by Dialect.Reap. The lock is granted to a ticket only when no
// live ticket of the name is older, and without a ticket only when the name
// has no live ticket at all; re-entry of a live lease by its owner is
// granted regardless. Its Release (from LeaseTable) wakes the process of
// the oldest live ticket when it frees the lock, where the dialect can
// address one.
type FairTable interface {
	LeaseTable
	// Grant grants a lease as LockTable.Acquire does, under the queue's
	// rule above; ticket 0 means the caller has none. A grant to a ticket
	// deletes it atomically with the grant (one statement, or one short
	// transaction). It returns the token, or 0 when refused.
	Grant(ctx context.Context, p dialect.AcquireParams, ticket int64) (token int64, err error)
	// Enqueue takes a ticket for p.Owner on p.Name, live for p.TTL.
	Enqueue(ctx context.Context, p dialect.AcquireParams) (dialect.Ticket, error)
	// Wait reports how long the ticket's waiter may sleep before it tries
	// again when no wake-up comes: 0 when the lock is free and no live
	// ticket is older; else until the oldest live ticket ahead expires or,
	// if none, until the holder's lease ends. live is false when the
	// ticket is not live (expired, deleted, or never committed: a reply
	// can outrun a commit that then fails): its waiter has no place.
	Wait(ctx context.Context, t dialect.Ticket) (d time.Duration, live bool, err error)
	// Dequeue deletes the ticket, and wakes the next ticket's process when
	// the deleted one was the oldest live ticket and the lock is free.
	Dequeue(ctx context.Context, t dialect.Ticket) error
	// RenewTickets extends the tickets to ttl from now, in one statement;
	// callers pass at most dialect.MaxRenewBatch tickets.
	RenewTickets(ctx context.Context, ts []dialect.Ticket, ttl time.Duration) error
	// Waiting returns, for operators, the number of live tickets of each
	// name that has some; nil where the dialect counts none (no
	// FairSQL.Waiting).
	Waiting(ctx context.Context) (map[string]int, error)
}

// SemaphoreTable runs the statements of the semaphore tables: a row per
// name (its limit, and what its next token must exceed) and a row per
// holder, keyed by (name, owner), holding a lease like a row of the lock
// table. Its LeaseTable methods act on the holders' rows; List returns
// one entry per holder, ordered by name.
type SemaphoreTable interface {
	LeaseTable
	// Acquire grants p.Owner one of p.Limit permits of p.Name, in one
	// statement or one short transaction that serialises the grants of
	// p.Name (a database with one writer at a time, SQLite, serialises
	// all grants): it re-enters a live permit of the same owner (same
	// token, one more hold), or, if fewer than p.Limit of the name's
	// leases are live, grants p.Owner a permit with a new token, larger
	// than every token granted on p.Name before; a new permit's grant
	// deletes the rows of the name's ended leases. The limit counted
	// against is the name's (see dialect.SemaphoreSQL): p.Limit only for a
	// name whose limit was never set by SetLimit and that has no live
	// holder. It returns 0 when the semaphore is full. Expiry is computed
	// from the database clock. If ctx ends meanwhile, the transaction is
	// ended on the server and Acquire returns only once it has ended (see
	// LockTable.Acquire).
	Acquire(ctx context.Context, p dialect.SemaphoreParams) (token int64, err error)
	// Remaining reports how long the semaphore's first lease to end has
	// left on the database clock; ok is false when it has no holder. Only
	// waiters ask: a dialect that announces releases marks the name as
	// waited for.
	Remaining(ctx context.Context, name string) (d time.Duration, ok bool, err error)
	// Announces reports whether releases of permits are announced through
	// the dialect's Notifier, so that waiters need not poll.
	Announces() bool
	// Limits returns, for operators, each semaphore's limit by name; nil
	// where the dialect lists none (no SemaphoreSQL.Limits).
	Limits(ctx context.Context) (map[string]int, error)
	// SetLimit sets name's limit to limit (at least 1), for every grant
	// that follows, whatever limit it asks for: the grants of name in
	// progress finish first, under the old one. A raise wakes the
	// waiters of name, as a freed permit does. It is ErrUnsupported where
	// the dialect has no SemaphoreSQL.SetLimit.
	SetLimit(ctx context.Context, name string, limit int) error
	// Available reports name's limit and live holders; ok is false when
	// no grant or SetLimit ever wrote name's head row.
	Available(ctx context.Context, name string) (st dialect.SemaphoreState, ok bool, err error)
}

// FairSemaphoreTable is the semaphore tables with a queue of tickets per
// name, kept apart from the lock table's queue. A ticket is live until its
// expiry on the database clock; expired tickets are skipped, and deleted
// by Dialect.Reap. A name's permits go to its live tickets in ticket
// order, one at a time: a ticket is granted only when a permit is free and
// no live ticket of the name is older, and a caller without a ticket only
// when a permit is free and the name has no live ticket at all; re-entry
// by a holder is granted regardless. Its Release (from LeaseTable) wakes
// the process of the oldest live ticket when it frees a permit, where the
// dialect can address one.
type FairSemaphoreTable interface {
	SemaphoreTable
	// Grant is Acquire under the queue's rule above; ticket 0 means the
	// caller has none. A grant to a ticket deletes it in the same
	// transaction and, if a permit is still free, wakes the process of
	// the next live ticket, where the dialect can address one.
	Grant(ctx context.Context, p dialect.SemaphoreParams, ticket int64) (token int64, err error)
	// Enqueue takes a ticket for p.Owner on p.Name, live for p.TTL.
	Enqueue(ctx context.Context, p dialect.AcquireParams) (dialect.Ticket, error)
	// Wait reports how long the ticket's waiter may sleep before it tries
	// again when no wake-up comes, for a semaphore of limit permits: 0 when
	// a permit is free and no live ticket is older; else until the oldest
	// live ticket ahead expires or, if none, the first holder's lease
	// ends. live is false when the ticket is not live (see
	// FairTable.Wait).
	Wait(ctx context.Context, t dialect.Ticket, limit int) (d time.Duration, live bool, err error)
	// Dequeue deletes the ticket, and wakes the next ticket's process
	// when the deleted one was the oldest live ticket and a permit is
	// free.
	Dequeue(ctx context.Context, t dialect.Ticket) error
	// RenewTickets extends the tickets to ttl from now, in one statement;
	// callers pass at most dialect.MaxRenewBatch tickets.
	RenewTickets(ctx context.Context, ts []dialect.Ticket, ttl time.Duration) error
}

// RWLockTable runs the statements of read/write locks: a table of holders,
// one row (a lease) per holder and name, and a head row per name that
// serialises grants and keeps a waiting writer's intent. Its LeaseTable
// methods act on the holders' leases, named by (name, owner, token).
type RWLockTable interface {
	LeaseTable
	// Acquire grants p.Owner a lease on the side of p.Name that p asks
	// for, in one short transaction that locks the name's head row: the
	// read side when no live writer holds the name and no other owner's
	// writer intent is live; the write side when no other owner holds a
	// live lease of either side. An owner that holds a live lease of the
	// name re-enters it (same token, one more hold), except that an owner
	// holding the read side asking for the write side, or a plain reader
	// asking for an upgradeable read, is refused (Upgrade). An upgradeable
	// read is granted as a read, and also only when no other owner holds
	// one. A new lease's token exceeds every token granted for the name
	// before. A write grant clears the owner's intent. Expiry is computed
	// on the database clock. An error leaves nothing granted unless it
	// wraps ErrOutcomeUnknown (the commit's reply was lost).
	Acquire(ctx context.Context, p dialect.RWAcquireParams) (dialect.RWGrant, error)
	// Upgrade turns the owner's live upgradeable lease p (same token,
	// holds and expiry) into the write lease, in one transaction as
	// Acquire's, when no other owner holds a live lease of the name;
	// refused, it records the owner's intent if p.Wait. The grant is Lost
	// when the lease is not live any more, Upgrade when it is a plain
	// read; a lease that is the write lease already is granted.
	Upgrade(ctx context.Context, p dialect.RWUpgradeParams) (dialect.RWGrant, error)
	// Downgrade turns the live write lease l into a read lease in one
	// statement (same token, holds and expiry), announcing the name where
	// releases are announced; false when l is not a live write lease.
	Downgrade(ctx context.Context, l dialect.Lease) (bool, error)
	// Withdraw removes owner's writer intent on name, if it has one, in
	// one statement, announcing it where releases are announced.
	Withdraw(ctx context.Context, name, owner string) error
	// Announces reports whether the releases of this table (and
	// withdrawn intents) reach the dialect's Notifier.
	Announces() bool
	// Readers returns, for operators, the leases of the read side; nil
	// where the dialect lists none (no RWLockSQL.Readers).
	Readers(ctx context.Context) ([]dialect.Lease, error)
}

// MultiLockTable grants several names of the lock table at once: all of
// them, or none.
type MultiLockTable interface {
	// AcquireAll grants leases on every name of p.Names to p.Owner, or on
	// none. Each name is granted as LockTable.Acquire grants it (insert,
	// take over an expired or released row with a new token, or re-enter
	// a live lease of the same owner), by the same statement, run for each
	// name in the order given inside one short transaction that commits
	// only if every name was granted. It returns the tokens, in the order
	// of p.Names; when another owner holds a live lease on a name, nothing
	// is granted, and refused is that name (the first such in p.Names).
	//
	// If ctx ends while a statement runs, the statement is cancelled on
	// the server and the transaction rolled back: nothing is granted and
	// the error wraps ctx's. The commit itself is never cancelled. When the
	// commit's outcome is unknown, the error wraps ErrOutcomeUnknown and
	// tokens are those the commit would have granted, for the caller to
	// release (ReleaseAll) so that nothing is left behind.
	AcquireAll(ctx context.Context, p dialect.MultiAcquireParams) (tokens []int64, refused string, err error)
	// ReleaseAll drops one hold of each lease of ls (distinct names, at
	// most MaxMultiAcquire, ascending by name), as LeaseTable.Release
	// does for one, in one statement (a dialect may split a large set
	// into a few): releases of names someone waits for are announced as
	// Release announces them. It reports, for each lease, whether a hold
	// was dropped: false when the lease was taken over or already fully
	// released.
	ReleaseAll(ctx context.Context, ls []dialect.Lease, minHold time.Duration) ([]bool, error)
}

// Elections stores a value with each lease of the lock table (schema
// version 11), on which sqllock.NewElection builds leader
// election: a leader is the holder of a live lease on the election's name
// that has proclaimed a value for its token. Acquire's takeover of a row
// gives it a new token, so a value proclaimed for an earlier token is never
// read as the new holder's.
type Elections interface {
	// Campaign grants a lease as LockTable.Acquire does, and stores value
	// as the value of the lease it grants (or re-enters), in the same
	// statement: a Campaign's lease is a leader from its grant on.
	Campaign(ctx context.Context, p dialect.AcquireParams, value string) (token int64, err error)
	// Proclaim stores value as the value of the live lease l, in one
	// guarded statement that changes nothing unless l is still live (not
	// expired, released or taken over; on PostgreSQL, granted on the
	// current timeline). It reports false when l is not live.
	Proclaim(ctx context.Context, l dialect.Lease, value string) (bool, error)
	// Leader reads the live lease on name that has proclaimed a value;
	// ok is false when there is none (no row, an expired or released row,
	// or a holder that has not proclaimed).
	Leader(ctx context.Context, name string) (info dialect.LeaderInfo, ok bool, err error)
	// Values returns, for operators, the values proclaimed for the
	// tokens of the held leases, by lease; nil where the dialect lists
	// none (no LockSQL.Values).
	Values(ctx context.Context) (map[dialect.Lease]string, error)
}

// A Renewal is the outcome of one lease's renewal (LeaseTable.RenewMany).
type Renewal struct {
	OK bool // the lease was live, and is renewed
	// Asked says that a release was requested of the lease, for its
	// token (ReleaseRequests), and Reason is the request's reason.
	Asked  bool
	Reason string
}

// ReleaseRequests are the requests that holders of the lock table's
// leases release them (schema version 33): asked by anyone, kept for the
// token of the lease asked, and read back by its holder's renewals
// (LeaseTable.RenewMany).
type ReleaseRequests interface {
	// RequestRelease asks the holder of name's held lease to release it,
	// for reason, in one statement. It reports false when no lease holds
	// name.
	RequestRelease(ctx context.Context, name, reason string) (bool, error)
}

// LockValues are the values holders keep on the lock table's leases
// (schema version 31), apart from elections' values: what a holder says
// about its hold, read by anyone without acquiring. A value is set for
// the lease's token, so a takeover never shows an earlier holder's.
type LockValues interface {
	// SetValue stores value as the value of the live lease l, in one
	// guarded statement that changes nothing unless l is still live (as
	// Elections.Proclaim). It reports false when l is not live.
	SetValue(ctx context.Context, l dialect.Lease, value string) (bool, error)
	// Value reads name's live lease (held, or released within its minimum
	// hold) with the value set for its token, if any; ok is false when no
	// live lease holds name.
	Value(ctx context.Context, name string) (info dialect.LockInfo, ok bool, err error)
}

// RunLedger is the run ledger's tables (package ledger, schema version 17
// on PostgreSQL, 16 on MySQL, 15 on SQLite; a job's life, version 20): one row per attempt of an
// occurrence of a job, and one per job with its period. The ledger holds
// each attempt's lease on the lock table; the writes run in the caller's
// transaction, which the caller has guarded by that lease
// (LeaseTable.Guard) before, so that an attempt whose lease ended records
// nothing. Times are the database's, in UTC, to the microsecond.
type RunLedger interface {
	// Now returns the database's time.
	Now(ctx context.Context) (time.Time, error)
	// Attempts returns, inside tx, the attempts of (job, occurrence),
	// the first first, and the database's time as it read them (zero
	// when there are none).
	Attempts(ctx context.Context, tx *sql.Tx, job, occurrence string) ([]dialect.RunRecord, time.Time, error)
	// Abandon marks, inside tx, the running attempts of (job, occurrence)
	// abandoned, finished now, and returns how many it marked.
	Abandon(ctx context.Context, tx *sql.Tx, job, occurrence string) (int, error)
	// Replace marks, inside tx, job's running attempts of owner (the
	// owner of a broken job lease) replaced, finished now, and returns
	// how many it marked (schema version 21).
	Replace(ctx context.Context, tx *sql.Tx, job, owner string) (int, error)
	// Start inserts, inside tx, the attempt r (Job, Occurrence, Attempt,
	// Owner, Token), running since now, and records the job's schedule s
	// (Job, Period, Phase, Grace): a job seen first, or whose period or
	// phase changed, is first seen now; every start sets last seen to now.
	// An s without Job (a manual occurrence's) changes no job's row.
	Start(ctx context.Context, tx *sql.Tx, r dialect.RunRecord, s dialect.JobSchedule) error
	// Finish records, inside tx, the outcome of the running attempt r
	// (named by Job, Occurrence, Attempt and Token): r.State and r.Err,
	// finished now. It reports false when no such attempt is running.
	Finish(ctx context.Context, tx *sql.Tx, r dialect.RunRecord) (bool, error)
	// Runs returns up to limit attempts of job (of every job for ""),
	// the latest started first.
	Runs(ctx context.Context, job string, limit int) ([]dialect.RunRecord, error)
	// Jobs returns the schedules of job (of every job for "") that have a
	// period, and the database's time.
	Jobs(ctx context.Context, job string) ([]dialect.JobSchedule, time.Time, error)
	// Occurrences returns the distinct occurrences of job that have an
	// attempt, from from to to (both included, compared byte for byte),
	// in ascending order.
	Occurrences(ctx context.Context, job, from, to string) ([]string, error)
	// Reap deletes up to limit attempts that finished (or, unfinished,
	// started) more than age ago, and moves the first seen time of every
	// job first seen before then to then. It returns the number of
	// attempts deleted.
	Reap(ctx context.Context, age time.Duration, limit int) (int, error)
	// Job returns the database's time and whether job is paused or has
	// a pending manual occurrence, in one statement (schema version 20).
	Job(ctx context.Context, job string) (JobState, error)
	// Schedule records the job's schedule s as Start does, on its own.
	Schedule(ctx context.Context, s dialect.JobSchedule) error
	// Pause pauses job, unless it is paused; it reports false when job
	// has no row or is paused already.
	Pause(ctx context.Context, job string) (bool, error)
	// Resume resumes paused job; it reports false when job has no row or
	// is not paused.
	Resume(ctx context.Context, job string) (bool, error)
	// Forget deletes job's row (its schedule, pause and pending manual
	// occurrence), and with attempts its attempts too. It reports
	// whether job had a row, and the attempts it deleted.
	Forget(ctx context.Context, job string, attempts bool) (bool, int, error)
	// Trigger sets job's pending manual occurrence to occurrence unless
	// one is pending (read it back with Job).
	Trigger(ctx context.Context, job, occurrence string) error
	// Clear ends, inside tx, job's pending manual occurrence if it is
	// occurrence.
	Clear(ctx context.Context, tx *sql.Tx, job, occurrence string) error
	// Backfill asks job's replicas for a backfill of the occurrences from
	// from to to, unless one is asked for already; it reports whether it
	// set it (schema version 26).
	Backfill(ctx context.Context, job, from, to string) (bool, error)
	// EndBackfill ends job's backfill request if it is from to to.
	EndBackfill(ctx context.Context, job, from, to string) error
}

// JobState is a job's state as a claim reads it (RunLedger.Job).
type JobState struct {
	Now     time.Time // the database's time
	Known   bool      // the job has a row
	Paused  bool
	Pending string // the pending manual occurrence, "" for none
	// BackfillFrom and BackfillTo are the range of a backfill asked for
	// ("" for none).
	BackfillFrom, BackfillTo string
	// The recorded schedule: Period and Phase (0 for none), Spec.
	Period, Phase time.Duration
	Spec          string
}

// Tables are a dialect's tables, one per primitive of its catalogue; nil
// where the catalogue has no declaration.
type Tables struct {
	Locks            LockTable
	Multi            MultiLockTable  // the lock table's, with LockSQL.ReleaseAll
	Elections        Elections       // the lock table's, with LockSQL.Leader
	LockValues       LockValues      // the lock table's, with LockSQL.SetValue
	Requests         ReleaseRequests // the lock table's, with LockSQL.RequestRelease
	Fair             FairTable
	Waking           FairTable
	Versions         VersionTable
	Semaphores       SemaphoreTable
	FairSemaphores   FairSemaphoreTable
	WakingSemaphores FairSemaphoreTable
	RWLocks          RWLockTable
	Runs             RunLedger
	Latches          LatchTable
	Barriers         BarrierTable
}

// A TableSource is a dialect that hands out tables of its own: one that
// wraps another dialect's, to count or fail its statements in a test.
type TableSource interface {
	Tables() (*Tables, error)
}

// Open returns the tables of d: its own, if it is a TableSource, else
// those Build makes from its catalogue, once per catalogue with a Cache.
// The Tables are the caller's to change.
func Open(d dialect.Dialect) (*Tables, error) {
	if s, ok := d.(TableSource); ok {
		return s.Tables()
	}
	cat := d.Catalogue()
	key := built{d.DB(), cat.Locks, cat.Fair, cat.Waking, cat.Versions, cat.Semaphores,
		cat.FairSemaphores, cat.WakingSemaphores, cat.RWLocks, cat.Runs, cat.Latches, cat.Barriers}
	if cat.Cache != nil {
		if v, ok := cat.Cache.Load(key); ok {
			tb := *v.(*Tables)
			return &tb, nil
		}
	}
	tb, err := Build(d.DB(), cat)
	if err != nil {
		return nil, err
	}
	if cat.Cache != nil {
		cached := *tb
		cat.Cache.Store(key, &cached)
	}
	return tb, nil
}

// Ready reports the first error c kept, else builds d's tables (see
// Open): a dialect's constructor calls it last, so that it fails on a
// statement the runner cannot bind, and its lockers find the tables built.
func Ready(d dialect.Dialect, c *Compiler) error {
	if c.Err != nil {
		return c.Err
	}
	_, err := Open(d)
	return err
}

// built is what a catalogue's cached tables were built from: its pool and
// declarations (a catalogue's hooks do not change).
type built struct {
	db                   *sql.DB
	locks                *dialect.LockSQL
	fair, waking         *dialect.FairSQL
	versions             *dialect.VersionSQL
	sems                 *dialect.SemaphoreSQL
	fairSems, wakingSems *dialect.FairSemaphoreSQL
	rw                   *dialect.RWLockSQL
	runs                 *dialect.LedgerSQL
	latches              *dialect.LatchSQL
	barriers             *dialect.BarrierSQL
}

// Build compiles cat's declarations into tables whose statements run on
// db. It fails on a statement that uses a parameter the runner does not
// know, or on a catalogue without a lock table or a Wrap hook.
func Build(db *sql.DB, cat dialect.Catalogue) (*Tables, error) {
	if cat.Locks == nil || cat.Wrap == nil {
		return nil, fmt.Errorf("%w: a catalogue needs Locks and Wrap", dialect.ErrInvalidOptions)
	}
	run := &Runner{DB: db, Hooks: cat.Hooks}
	c := NewCompiler(cat)
	locks := newLockTable(run, c, *cat.Locks)
	t := &Tables{Locks: locks}
	if locks.releaseAll.declared() {
		t.Multi = locks
	}
	if locks.leader.declared() {
		t.Elections = locks
	}
	if locks.setValue.declared() {
		t.LockValues = locks
	}
	if locks.requestRelease.declared() {
		t.Requests = locks
	}
	if s := cat.Fair; s != nil {
		t.Fair = newFairTable(locks, c, *s)
	}
	if s := cat.Waking; s != nil {
		t.Waking = newFairTable(locks, c, *s)
	}
	if s := cat.Versions; s != nil {
		t.Versions = newVersionTable(run, c, *s)
	}
	if s := cat.Semaphores; s != nil {
		sems := newSemaphoreTable(run, c, *s)
		t.Semaphores = sems
		if q := cat.FairSemaphores; q != nil {
			t.FairSemaphores = newFairSemaphoreTable(sems, c, *q)
		}
		if q := cat.WakingSemaphores; q != nil {
			t.WakingSemaphores = newFairSemaphoreTable(sems, c, *q)
		}
	}
	if s := cat.RWLocks; s != nil {
		t.RWLocks = newRWLockTable(run, c, *s)
	}
	if s := cat.Runs; s != nil {
		t.Runs = newRunLedger(run, c, *s)
	}
	if s := cat.Latches; s != nil {
		t.Latches = newLatchTable(run, c, *s)
	}
	if s := cat.Barriers; s != nil {
		t.Barriers = newBarrierTable(run, c, *s)
	}
	if c.Err != nil {
		return nil, c.Err
	}
	return t, nil
}
