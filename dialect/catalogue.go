package dialect

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"
)

// Catalogue is what a dialect offers: its statements, one declaration per
// primitive, from which sqllock's runner builds the tables; the hooks the
// runner and the strategies call; and facts about the database that change
// what a caller may expect. A nil declaration is a primitive the database
// cannot hold; Reasons says why. A Catalogue is built once, with its
// dialect, and is read-only afterwards.
type Catalogue struct {
	// Style is the placeholder syntax of the statements.
	Style Style
	// Lead are arguments passed before every statement's own, which the
	// driver takes as options of the statement: pgx's QueryExecMode, say,
	// through its database/sql driver. Nil for none.
	Lead []any
	// Expand, if set, rewrites each statement's text before it is
	// compiled: a dialect's macros (the postgres dialect's grant epoch).
	Expand func(string) string

	// Locks are the lock table's statements (sqllock.NewTable); never nil.
	// Its ReleaseAll statement makes lock sets, its Leader statement
	// elections: "Multi" and "Elections" in Reasons say why either is
	// missing.
	Locks *LockSQL
	// Fair is the lock table's FIFO queue of waiters (sqllock.TableOptions.Fair).
	Fair *FairSQL
	// Waking, if not nil, is the lock table's tickets that order the
	// wake-ups of an unfair lock's waiters, not its grants: its Grant
	// grants as LockSQL.Acquire does, whatever tickets are live, and
	// deletes the ticket granted (with the grant, or just after it, see
	// FairSQL.ConsumeApart); it shares Fair's tickets. Once a ticket's
	// waiter asked Wait, the lock table's releases (Release, ReleaseAll,
	// Break) wake the oldest live ticket's process as Fair's do: one
	// process per hand-off, however many processes wait. nil: waiters of
	// an unfair lock wait for the Notifier's announcements of names.
	Waking *FairSQL
	// Versions is the version table of the optimistic strategy.
	Versions *VersionSQL
	// Semaphores are the counting semaphores' tables.
	Semaphores *SemaphoreSQL
	// FairSemaphores are the semaphores' FIFO queue of waiters.
	FairSemaphores *FairSemaphoreSQL
	// WakingSemaphores, if not nil, are the semaphores' tickets that order
	// the wake-ups of an unfair semaphore's waiters, as Waking's do a
	// lock's: its Grant grants as SemaphoreSQL's acquire does, whatever
	// tickets are live, and deletes the ticket granted. Once a ticket's
	// waiter asked Wait, a release that frees a permit wakes the oldest
	// live ticket's process alone, and a grant to a ticket wakes the next
	// one's while a permit is free. nil: waiters of an unfair semaphore
	// wait for the Notifier's announcements of names.
	WakingSemaphores *FairSemaphoreSQL
	// RWLocks are the read/write locks' tables.
	RWLocks *RWLockSQL
	// Latches are the countdown latches' table (sqllock.NewLatch).
	Latches *LatchSQL
	// Barriers are the double barriers' tables (package barrier).
	Barriers *BarrierSQL
	// Runs is the run ledger's tables (package ledger).
	Runs *LedgerSQL
	// Pessimistic holds row locks in open transactions (the pessimistic
	// strategy and the transaction helper).
	Pessimistic Pessimistic
	// RowLocks, if not nil, lists the row locks held on Pessimistic's
	// row-lock table as the server shows them, for operators (package
	// inspect): Primitive "pessimistic", Owner the server session holding
	// the lock. An error wrapping ErrUnsupported says that this server,
	// or this user, cannot see them. Nil: the database shows none.
	RowLocks func(ctx context.Context) ([]Holder, error)

	// Reasons says why a declaration is nil, by the name of its field
	// ("Semaphores"; "Multi" and "Elections" for the lock table's
	// statements); see Unsupported.
	Reasons map[string]string

	// Hooks are the dialect's code around the runner's statements.
	Hooks
	// Cache, if not nil, keeps the tables the runner builds from the
	// catalogue, so that they are built once and the lockers of a dialect
	// share them. A dialect gives its catalogue a new Cache and leaves it
	// alone; a copy of the catalogue whose declarations differ (a test's
	// wrapper of a dialect) is built anew.
	Cache *Cache

	// Notifier announces released names to waiting processes; nil: waiters
	// poll.
	Notifier Notifier
	// WatchesNames says that Notifier announces only the releases of
	// names some subscription watches (Subscription.Watch); otherwise it
	// announces those of names marked as waited for, which a waiter marks
	// by asking how long the lease has left (LockSQL.Remaining).
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

// Hooks are a dialect's code that the runner calls around the statements
// it runs. Each may be nil but Wrap.
type Hooks struct {
	// Wrap maps a driver error onto the sentinels of this package
	// (ErrSchemaMissing, ErrTransient, ErrLocked, ErrUnavailable,
	// ErrOutcomeUnknown), wrapping the original; nil stays nil.
	Wrap func(error) error
	// Cancel prepares the cancelling of a grant about to run on conn: it
	// returns a text to put in front of the statement (a comment by which
	// the server's process list shows it, say; may be empty) and a
	// function that cancels the statement on the server when called while
	// it runs. Nil leaves it to the driver's reaction to the context.
	Cancel func(ctx context.Context, conn *sql.Conn) (prefix string, cancel func(context.Context) error, err error)
	// Check, if not nil, runs before every grant; its error is returned
	// as is, and no statement is sent.
	Check func(ctx context.Context) error
	// Durable says that grants must be durable on a synchronous standby
	// (see the postgres dialect's WithSynchronousCommit): a grant that
	// completed although a cancel request was sent for it may have been
	// committed locally only (PostgreSQL commits at once, with a warning,
	// when a wait for the standby is cancelled), so the runner undoes it
	// and reports an error.
	Durable bool
	// GrantTries, above 1, is how often a grant that failed with
	// ErrTransient (its transaction rolled back by the server: nothing of
	// it was committed) runs before the error is returned, while the
	// caller's context lasts.
	GrantTries int
	// AfterRelease, if not nil, is called after a statement freed a lock
	// that some process waits for, once it committed: a release whose
	// number is 2, a withdrawn intent likewise, a fair semaphore's grant
	// or ticket given up that leaves a permit to a waiting ticket. It
	// wakes the waiting processes where the statement cannot, before it
	// returns: the release returns after it, and its process may exit at
	// once, without Close, taking any goroutine with it. It must be
	// bounded (a few seconds at the most), and ctx may have ended.
	AfterRelease func(ctx context.Context, name string)
	// AfterTicketed, if not nil, is called after a statement freed a lock
	// or a permit whose waiters hold tickets of queue q, once it committed
	// (a release or break whose number is 3 or 4), and, with ifFree, after
	// a ticket of an addressed queue was deleted (given up, granted
	// leaving a permit free, or consumed apart from its grant, see
	// FairSQL.ConsumeApart): it wakes the process of the name's oldest
	// live ticket of q (with ifFree, only while the lock or a permit is
	// free), for a dialect without a Wake statement. It wakes it before
	// it returns, and is bounded, as AfterRelease; ctx may have ended.
	AfterTicketed func(ctx context.Context, q Queue, name string, ifFree bool)
	// Ticket, if not nil, is told when a ticket of the runner's queues
	// becomes live (taken, live) and when its waiter no longer holds it
	// (granted, given up, or found not live): a dialect whose wake-ups
	// reach a process, not a ticket, tells its one ticket's waiter at
	// once. It must not block.
	Ticket func(id int64, live bool)
	// Go, if not nil, runs f off the caller's path, in a goroutine that
	// the dialect owns and waits for when it is closed (work that follows
	// a grant, such as FairSQL.ConsumeApart's, which a release of the name
	// in this process waits for); nil: f runs in the caller.
	Go func(f func())
	// Full, if not nil, reports whether every connection the pool may open
	// is in use, for a pool that database/sql does not bound itself (a
	// pgxpool behind stdlib.OpenDBFromPool). Nil: the pool's Stats decide.
	Full func() (full bool, limit int)
	// StatementTimeout bounds each call of the runner — connecting, and
	// the statements of one grant, release, renewal, read or reap —
	// whatever the caller's context: when it passes first, the call
	// returns an error wrapping ErrNoAnswer (see there). A statement still
	// running then is cancelled on the server (Cancel) and, if that does
	// not end it, abandoned 2 s later: a call takes at most
	// StatementTimeout + 2 s. 0: the caller's context alone bounds the
	// call.
	StatementTimeout time.Duration
}

// DefaultStatementTimeout is the dialects' StatementTimeout unless told
// otherwise (their WithStatementTimeout option).
const DefaultStatementTimeout = 10 * time.Second

// Cache keeps what the runner built from a catalogue (see
// Catalogue.Cache): one value, stored with the key it was built for. It is
// safe for concurrent use.
type Cache struct {
	mu       sync.Mutex
	key, val any
	set      bool
}

// Load returns the value stored with key, if any.
func (c *Cache) Load(key any) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set || c.key != key {
		return nil, false
	}
	return c.val, true
}

// Store stores val with key, unless a value is stored already: the first
// one stays.
func (c *Cache) Store(key, val any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set {
		c.key, c.val, c.set = key, val, true
	}
}

// Unsupported returns an error wrapping ErrUnsupported that says why the
// dialect named name lacks field (a declaration of Catalogue, such as
// "Semaphores", or "Multi" or "Elections").
func (c *Catalogue) Unsupported(name, field string) error {
	if why := c.Reasons[field]; why != "" {
		return fmt.Errorf("%w: %s: %s", ErrUnsupported, name, why)
	}
	return fmt.Errorf("%w: the %s dialect has no %s", ErrUnsupported, name, field)
}
