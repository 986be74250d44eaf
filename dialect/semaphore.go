package dialect

import (
	"database/sql"
	"time"
)

// SemaphoreParams are the parameters of a semaphore's grant.
type SemaphoreParams struct {
	Name  string
	Owner string
	TTL   time.Duration
	// Limit is the number of holders the semaphore admits at once, at
	// least 1, for a name whose limit was never set (SemaphoreSQL.SetLimit):
	// the grant that finds the name without live holders makes it the
	// name's limit; beside live holders, the grant counts against the
	// limit stored in the name's head row.
	Limit int
}

// SemaphoreSQL declares the statements of the semaphore tables: a head row
// per name (its limit, whether that limit was set by SetLimit, and for
// dialects without a sequence the name's last token) and a holder row per
// (name, owner), whose lease statements are LeaseSQL's. A holder row
// counts as a holder while its lease is live; rows of ended leases stay
// until a grant of the name or the reaper deletes them.
//
// A name's limit is its head row's. A grant counts the name's live
// holders against it; a head row whose limit was never set by SetLimit
// takes the grant's :limit when the name has no live holder (so the first
// grant of a name, and the first after its holders drained, sets it).
// Every grant and every SetLimit of a name writes its head row, so that
// they take turns: a grant never counts against a limit a SetLimit
// committed before it replaced.
//
// An acquire is either one statement, Grant, or a short transaction in
// which the head row's lock serialises the grants of a name:
//
//	Draw      lock :name's head row, creating it with :limit, draw the
//	          name's next token (its number), and, if its limit was never
//	          set and the name has no live holder, set the limit to :limit
//	Expire    delete :name's holder rows whose lease has ended
//	Take      grant (:name, :owner) a permit with :token, if a permit is
//	          free under the head row's limit (its own row, if ended, is
//	          taken over), or re-enter its live row (one more hold, the
//	          row's token); its number is the token granted, 0 when
//	          refused
type SemaphoreSQL struct {
	LeaseSQL
	// Grant, if set, is the whole acquire in one statement, with no
	// transaction: it grants as Take does (setting the head row's limit
	// as Draw does, and deleting the rows of the name's ended leases
	// when it grants a new permit) and selects two numbers, the token
	// granted (0 when refused, -1 when a grant or a SetLimit of :name
	// committed since its snapshot began: it is run again) and the limit
	// it counted against.
	Grant              SQL
	Draw, Expire, Take SQL
	// SetLimit sets :name's limit to :limit and marks it set, creating
	// the head row if the name has none, in one statement that waits for
	// the grants of the name in progress (it writes the head row). Its
	// number says whom to wake, as a release's (LeaseSQL.Release): 1
	// nobody the statement did not wake itself, 2 the processes waiting
	// for :name, 3 the oldest ticket's (through Wake), 4 both. A raise
	// wakes waiters as a freed permit does; a dialect that announces
	// releases in its statements announces it in the same way.
	SetLimit SQL
	// Available selects :name's limit, the number of its live holders,
	// and whether its limit was set by SetLimit; no row for a name
	// without a head row.
	Available SQL
	// Remaining selects the microseconds until :name's first holder's
	// lease ends (0 or less: look again at once, as when a permit is
	// free), and no row when it has no holder.
	Remaining SQL
	// Limits selects the name and the limit of every head row, for
	// operators (package inspect).
	Limits SQL
	// Isolation is the isolation level of the acquire's transaction.
	Isolation sql.IsolationLevel
	// Announces says whether Release announces freed permits.
	Announces bool
}

// FairSemaphoreSQL declares the statements of the semaphore tables' queue
// of tickets (see FairSemaphoreTable in internal/sqlrun). Tickets travel
// as :ticket, a semaphore's limit as :limit, and the waker of the
// enqueueing process as :channel. A grant is the semaphore's acquire under the queue's rule:
//
//	Grant    the semaphore's Grant, which also refuses a new permit while
//	         a live ticket of :name comes before :ticket (any, for 0), and
//	         deletes :ticket when it grants one
//	Take     for a semaphore without Grant: its Take, which also refuses
//	         a new permit while a live ticket of :name comes before
//	         :ticket (any, for 0); Consume then deletes :ticket
//
// First, if set, runs before the grant: it selects 1 when no live
// ticket of :name comes before :ticket (0: none), or when :owner holds a
// live permit of :name (re-entry), else 0, so that the waiters a ring wakes
// but the queue does not serve are refused by one statement, without a
// transaction.
type FairSemaphoreSQL struct {
	Grant, Take, First, Consume SQL
	// Chain, if set, hands freed permits on: it wakes the process of
	// :name's oldest live ticket if a permit is free, and selects the
	// number of tickets it woke; or, for a dialect that cannot address a
	// wake-up to one process (see Hooks.AfterRelease), it selects 1 when the
	// processes waiting for :name are to be woken, else 0: when a live
	// ticket waits, none comes before :ticket (0: none does), and a
	// permit is free under :limit (0: whether or not).
	//
	// Chain runs in a statement of its own once a change that may leave
	// a permit free beside a waiting ticket committed: a grant to a
	// ticket (with :ticket 0 and the grant's :limit), a ticket given up
	// (with that ticket and :limit 0), and a release whose statement woke
	// a ticket (Release selects 2; :ticket and :limit 0). A statement sees
	// only what committed before it began: of two such changes committing
	// concurrently (two releases and the grant they wake, say), each may
	// miss the other, and a release may wake the ticket being granted
	// rather than the next one. The Chain of the one that commits last
	// sees both.
	Chain SQL
	// Enqueue, Wait, Renew and Channel are as FairSQL's, on the
	// semaphores' queue, with the sleep of FairSemaphoreTable.Wait in
	// internal/sqlrun; Dequeue deletes :ticket (Chain wakes the next).
	Enqueue, Wait, Dequeue, Renew SQL
	Channel                       string
	// Addressed is as FairSQL's.
	Addressed bool
	// Marks, if set, run one after the other before Wait: they mark the
	// rows of :name as waited for by tickets, so that a release reports
	// it (for a dialect whose Wait cannot mark them in the same
	// statement). With MarksStay, the marks are never unset and the rows
	// added later copy them: once the first mark's number is 1 (it found
	// the name's row, marked now or before) and the others ran, a process
	// does not run them again for the name.
	Marks     []SQL
	MarksStay bool
	// Release, when set, replaces the semaphore's Release: it also wakes
	// the process of the oldest live ticket when it frees a permit. It
	// selects 0 when it released nothing, 2 when it woke a ticket, and 1
	// otherwise.
	Release SQL
}

// SemaphoreState is what a semaphore's head row and holders say of one
// name (SemaphoreSQL.Available).
type SemaphoreState struct {
	// Limit is the name's limit, and Holders the number of its live
	// holders: more than Limit after a SetLimit lowered it.
	Limit, Holders int
	// Set says the limit was set by SetLimit: grants count against it
	// whatever limit their semaphore was built with.
	Set bool
}
