package dialect

import (
	"context"
	"fmt"
)

// Catalogue is what a dialect offers: a table per primitive, the hooks the
// strategies call, and facts about the database that change what a caller
// may expect. A nil table is a primitive the database cannot hold;
// Reasons says why. A Catalogue is built once, with its dialect, and is
// read-only afterwards.
type Catalogue struct {
	// Locks is the lock table (sqllock.NewTable); never nil.
	Locks LockTable
	// Multi grants sets of names on the lock table (sqllock lock sets).
	Multi MultiLockTable
	// Fair is the lock table with a FIFO queue of waiters (Options.Fair).
	Fair FairTable
	// Waking, if not nil, is the lock table with tickets that order the
	// wake-ups of an unfair lock's waiters, not its grants: its Grant
	// grants as LockTable.Acquire does, whatever tickets are live, and
	// deletes the ticket granted (with the grant, or just after it: then
	// the deletion wakes the next ticket's process if the lock is free
	// by then); its other methods are FairTable's. It
	// shares Fair's tickets. Once a ticket's waiter asked Wait, the lock
	// table's releases (Release, MultiLockTable.ReleaseAll, Break) wake
	// the oldest live ticket's process as Fair's do: one process per
	// hand-off, however many processes wait. nil: waiters of an unfair
	// lock wait for the Notifier's announcements of names.
	Waking FairTable
	// Versions is the version table of the optimistic strategy.
	Versions VersionTable
	// Semaphores are the counting semaphores' tables.
	Semaphores SemaphoreTable
	// FairSemaphores are the semaphores with a FIFO queue of waiters.
	FairSemaphores FairSemaphoreTable
	// WakingSemaphores, if not nil, are the semaphores with tickets that
	// order the wake-ups of an unfair semaphore's waiters, as Waking's do
	// a lock's: its Grant grants as SemaphoreTable.Acquire does, whatever
	// tickets are live, and deletes the ticket granted; its other methods
	// are FairSemaphoreTable's. Once a ticket's waiter asked Wait, a
	// release that frees a permit wakes the oldest live ticket's process
	// alone, and a grant to a ticket wakes the next one's while a permit
	// is free. nil: waiters of an unfair semaphore wait for the
	// Notifier's announcements of names.
	WakingSemaphores FairSemaphoreTable
	// RWLocks are the read/write locks' tables.
	RWLocks RWLockTable
	// Elections are the lock table's proclaimed values (leader election).
	Elections Elections
	// Pessimistic holds row locks in open transactions (the pessimistic
	// strategy and the transaction helper).
	Pessimistic Pessimistic
	// Runs is the run ledger's tables (package ledger).
	Runs RunLedger

	// Reasons says why a table is nil, by the name of its field
	// ("Semaphores"); see Unsupported.
	Reasons map[string]string

	// Notifier announces released names to waiting processes; nil: waiters
	// poll.
	Notifier Notifier
	// WatchesNames says that Notifier announces only the releases of
	// names some subscription watches (Subscription.Watch); otherwise it
	// announces those of names marked as waited for, which a waiter marks
	// by asking how long the lease has left (LockTable.Remaining).
	WatchesNames bool
	// AnnouncesVersions says that Notifier announces the version table's
	// releases too, so that optimistic waiters listen.
	AnnouncesVersions bool
	// CheckPessimistic, if not nil, returns an error wrapping
	// ErrUnsupported when the server cannot hold Pessimistic's locks
	// although the dialect has them (a Galera cluster: FOR UPDATE locks the
	// local node only), or another error when the server could not be
	// asked.
	CheckPessimistic func(ctx context.Context) error
	// Busy, if not nil, reports whether driverConn (as sql.Conn.Raw passes
	// it) is in the middle of a statement, its rows not all read: a ping
	// then would break the connection, so keep-alives skip it.
	Busy func(driverConn any) bool
	// Ping, if not nil, is the keep-alive of a connection holding a
	// Pessimistic row lock (shared or not), in place of the driver's Ping:
	// it fails as the driver's does on a dead connection, and may leave a
	// trace of the lock's mode where the server shows sessions (PostgreSQL's
	// pg_stat_activity, which sqllock locks reads).
	Ping func(ctx context.Context, driverConn any, shared bool) error

	// SingleWriter says that the database lets one transaction at a time
	// write (SQLite): a transaction that holds a guarded lease's row keeps
	// every other writer waiting.
	SingleWriter bool
	// NoSharedRowLock says that Pessimistic's row locks are exclusive only:
	// a shared one is refused with an error wrapping ErrUnsupported.
	NoSharedRowLock bool
}

// Unsupported returns an error wrapping ErrUnsupported that says why the
// dialect named name has no table field (a field name of Catalogue, such as
// "Semaphores").
func (c *Catalogue) Unsupported(name, field string) error {
	if why := c.Reasons[field]; why != "" {
		return fmt.Errorf("%w: %s: %s", ErrUnsupported, name, why)
	}
	return fmt.Errorf("%w: the %s dialect has no %s", ErrUnsupported, name, field)
}
