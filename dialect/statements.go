package dialect

import "database/sql"

// Style is a dialect's placeholder syntax.
type Style int

const (
	// Question writes ? for every parameter, in order (MySQL, SQLite).
	Question Style = iota
	// Dollar writes $n, numbering parameters by first use (PostgreSQL).
	Dollar
)

// Kind is how a statement reports its outcome.
type Kind int

const (
	// Query selects rows; as a number, the first column of the first row
	// (no row counts as 0).
	Query Kind = iota
	// Exec changes rows; as a number, how many it affected.
	Exec
	// ExecID changes rows; as a number, the insert id it reports
	// (MySQL's LAST_INSERT_ID(expr) channel for statements without
	// RETURNING).
	ExecID
)

// SQL is a statement as a dialect declares it: text with named parameters,
// and the kind of its outcome. A dialect groups its statements in one
// struct per primitive (LockSQL, SemaphoreSQL, …), which its Catalogue
// hands to sqllock's runner; the runner binds the parameters, pins
// connections, cancels grants on the server and runs what follows a
// release, so the dialect writes SQL alone.
//
// Parameters are written :name; a colon next to another colon (a
// PostgreSQL cast, ::bigint) or followed by anything but a lower-case
// letter is text. Since the values are bound by name, the order in which a
// dialect's text uses them cannot drift from the order of the arguments.
// The parameters a statement may use:
//
//	:name :owner :token       a lease (on the version table, :token is the version)
//	:version                  the version a swap expects
//	:ttl :minhold             durations, in whole microseconds
//	:limit                    a batch's size, or a semaphore's limit
//	:channel                  the notification channel, or a process's waker
//	:ticket                   a waiter's ticket (see Ticket)
//	:value                    an election's value, or a lock's, or the
//	                          reason of a release request
//	:names :leases            lists, for IN (...): the leases' names, and
//	                          their (name, owner, token) tuples
//	:job :occurrence :attempt :state :error
//	:period :phase :grace :age :from :to
//	                          the run ledger's (see LedgerSQL)
type SQL struct {
	Text string
	Kind Kind
}

// Q declares a statement of kind Query.
func Q(text string) SQL { return SQL{text, Query} }

// X declares a statement of kind Exec.
func X(text string) SQL { return SQL{text, Exec} }

// XID declares a statement of kind ExecID.
func XID(text string) SQL { return SQL{text, ExecID} }

// A Queue is a queue of tickets, as Hooks.AfterTicketed names it.
type Queue int

// The queues of tickets.
const (
	LockQueue      Queue = iota // the lock table's (FairSQL)
	SemaphoreQueue              // the semaphores' (FairSemaphoreSQL)
)

// LeaseSQL declares the statements of a lease table: one row per lock name
// with owner, token, hold count and an expiry on the database clock. The
// lock table and the version table are both lease tables; one
// implementation, LeaseTable, runs the statements of either on every
// dialect.
type LeaseSQL struct {
	// RenewMany extends the live leases among :leases to :ttl from now
	// (:names lists their names, to narrow an index scan). A Query selects
	// the (name, owner, token) of each lease it renewed; an Exec is
	// followed, on the same connection, by Renewed, which selects the
	// leases among :leases that are live afterwards.
	RenewMany, Renewed SQL
	// Release drops one hold of (:name, :owner, :token), freeing the lock
	// with the last one, unless the row's acquired_at + :minhold is still
	// ahead on the database clock: then the row keeps no hold and expires
	// at that instant. Its number is 1 when it dropped a hold; when it
	// also freed a row marked as waited for, 2 (marked by waiters without
	// tickets: Hooks.AfterRelease rings), 3 (by waiters with tickets:
	// Wake runs, or Hooks.AfterTicketed), or 4 (by both).
	Release SQL
	// RingsOnChange says that Hooks.AfterRelease rings after every
	// Release that dropped a hold (number 1), for a dialect whose Release
	// cannot tell a freeing release apart as cheaply as it drops the hold
	// (SQLite: a RETURNING clause costs more than the ring it saves). A
	// ring that freed nothing costs each waiting process one look.
	RingsOnChange bool
	// Wake, if set, runs with :name after a release whose number is 3 or
	// 4 (also a Break's, and a lock set's release of the name): it wakes
	// the process of the oldest live ticket (on PostgreSQL), from a table
	// that the releases of names nobody waits for do not read. Without
	// it, Hooks.AfterTicketed does.
	Wake SQL
	// Guard selects a row, inside the caller's transaction, when the lease
	// (:name, :owner, :token) is live, and share-locks it until the
	// transaction ends.
	Guard SQL
	// List selects name, owner, token, holds, and the acquisition time, the
	// expiry time (microseconds since the Unix epoch) and the time left (in
	// microseconds) of every held row, ordered by name.
	List SQL
	// Channel is the value of :channel.
	Channel string
}

// LockSQL declares the statements of the lock table.
type LockSQL struct {
	LeaseSQL
	// Acquire grants a lease on :name to :owner for :ttl in one statement
	// (insert, re-enter, or take over an expired or released row) and
	// gives its token as its number; 0 when another owner holds a live
	// lease. It runs as a grant (the runner cancels it on the server when
	// the caller gives up, and keeps what it granted anyway).
	Acquire SQL
	// AcquiredToken, if set, is for a database whose upsert cannot give
	// the token it granted (TiDB): Acquire is then an Exec that changes
	// a row when it grants, and AcquiredToken, run after it in the same
	// grant, selects the token of :owner's live lease on :name (no row: a
	// refusal). AcquireUndo drops one hold of :owner's live lease on
	// :name, for a grant whose token could not be read.
	AcquiredToken, AcquireUndo SQL
	// Remaining selects the microseconds the lease on :name has left (0
	// if none), and no row when there is no row.
	Remaining SQL
	// Holder selects, with List's columns, the row of :name if its lease
	// is live (held, or released within its minimum hold), else no row.
	Holder SQL
	// Break ends the live lease (:name, :owner, :token) now, keeping the
	// row and its token: no hold is left and the row expires as a
	// release past its minimum hold leaves it. Its number is 0 when no
	// such live lease is left, else as Release's.
	Break SQL
	// ReleaseAll drops one hold of each lease of :leases (:names lists
	// their names, in the same order) in one statement, as Release does
	// for one. Empty: no lock sets. A Query selects, for each lease it
	// released, the name and Release's number for it. An ExecID (a
	// database whose UPDATE returns no rows) is given at most 16 leases
	// and reports on them through the insert id it leaves: bit i says
	// that the i-th lease of :leases was released, bit 16+i that its
	// release freed a row marked as waited for, and the bits from 32 on
	// carry the call's nonce, :token. Each row adds its bits to the value
	// the rows before it left, recognised by the nonce; a value left by an
	// earlier statement on the connection has another nonce, and the
	// statement starts it over.
	ReleaseAll SQL
	// MultiTx are the options of the transaction in which AcquireAll
	// runs Acquire for each name of a set (nil: the driver's default).
	MultiTx *sql.TxOptions
	// Proclaim stores :value as the value of the live lease (:name,
	// :owner, :token), with the lease's token as the value's; its number
	// is 1 when it did (an Exec that changes the row whenever it
	// matches), 0 when the lease is not live.
	Proclaim SQL
	// Campaign, if set, is Acquire that also stores :value as the value of
	// the lease it grants or re-enters (see Elections.Campaign in
	// internal/sqlrun). Without it (a dialect that keeps values in a table
	// of their own), Campaign is Acquire, then Proclaim, in one
	// transaction.
	Campaign SQL
	// Leader selects the owner, the token, the value, the expiry
	// (microseconds since the Unix epoch) and the time left (in
	// microseconds) of :name's live lease whose value was proclaimed for
	// its token; no row without one. Empty: no elections.
	Leader SQL
	// Values selects the name, owner, token and value of every held
	// lease whose value was proclaimed for its token (an election's
	// leader), for operators (package inspect); declared with Leader.
	Values SQL
	// SetValue is Proclaim for the value a holder keeps on its lock
	// (Lock.SetValue), stored apart from an election's value so that a
	// lock with a value is not taken for a leader. Empty: no lock values.
	SetValue SQL
	// Value selects, with Holder's columns, :name's live lease and then
	// the value set for its token (NULL when its holder set none); no row
	// when no live lease holds :name. Declared with SetValue.
	Value SQL
	// LockValues is Values for the values set with SetValue, for List;
	// declared with SetValue.
	LockValues SQL
	// RequestRelease asks the holder of :name's held lease to release it
	// (sqllock's Table.RequestRelease): it stores :value as the request's
	// reason, for the lease's token, so that a takeover (a new token)
	// never inherits it. Its number is 1 when a held lease was asked (an
	// Exec that changes the row whenever it matches), 0 when none holds
	// :name. The holder learns of the request from its renewals: with
	// RequestRelease declared, the lock table's RenewMany (a Query) or
	// Renewed selects a fourth column, the reason asked of the lease's
	// token, NULL when none was. Empty: no release requests.
	RequestRelease SQL
}

// VersionSQL declares the statements of the version table, whose token
// column is the version.
type VersionSQL struct {
	LeaseSQL
	// Read selects version, owner, holds, whether the lease is live, and
	// the microseconds it has left, of :name's row.
	Read SQL
	// Create inserts :name's row one above the version floor (the largest
	// version of any deleted row, read such that a deletion cannot slip in
	// between), held by :owner for :ttl; its number is the new row's
	// version, 0 when the row exists (without an error). It runs as a
	// grant.
	Create SQL
	// Floor, if set, is for a database that cannot read the version floor
	// in Create's statement (TiDB): Create then runs in a READ COMMITTED
	// transaction after Floor, which selects the floor locking it, and
	// inserts the row with :version (one above the floor), changing no
	// row when :name has one.
	Floor SQL
	// Take sets :owner, a new version above :version, one hold and an
	// expiry :ttl from now if the row still has :version and is free or
	// expired; its number is the new version, 0 when it did not.
	Take SQL
	// Reenter adds a hold and extends the lease to :ttl from now if the row
	// still has :version and a live lease of :owner; number 1 when it did.
	Reenter SQL
}
