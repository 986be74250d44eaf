package dialect

import (
	"database/sql"
	"time"
)

// RWAcquireParams are the parameters of a read/write lock's grant.
type RWAcquireParams struct {
	Name  string
	Owner string
	TTL   time.Duration
	// Shared asks for the read side; false for the write side.
	Shared bool
	// Upgradeable, with Shared, asks for an upgradeable read: a read
	// lease that coexists with plain readers but excludes writers and
	// other upgradeable readers, and that its owner may turn into the
	// write lease (RWLockTable.Upgrade). A waiting writer's intent keeps
	// it out, as it keeps plain readers out.
	Upgradeable bool
	// Wait says that the caller will wait if refused: a refused writer
	// then records (or refreshes) its intent to write, which keeps new
	// readers out for TTL, and a refused caller marks the name as waited
	// for, so that releases are announced.
	Wait bool
}

// RWGrant is the outcome of a read/write lock's grant.
type RWGrant struct {
	// Token is the lease's token; 0 when refused.
	Token int64
	// Shared reports the side of the granted lease: a read asked for by the
	// owner of the write side re-enters the write lease (Shared false).
	Shared bool
	// Upgrade reports a refusal because the owner holds the read side and
	// asked for the write side (nothing was changed): two such owners
	// would wait for each other forever.
	Upgrade bool
	// Marked reports a refusal that marked the name as waited for the
	// first time (the mark stays): a release that raced with it may have
	// read no mark and gone unannounced, so the waiter should look again
	// soon rather than sleep for Left.
	Marked bool
	// Lost reports an upgrade refused because the owner's upgradeable
	// lease with the token given is no longer live (nothing was changed).
	Lost bool
	// Left is, after a refusal, how long the longest of the leases (and
	// the writer's intent) in the way has left on the database clock.
	Left time.Duration
}

// RWUpgradeParams are the parameters of an upgrade: the owner's live
// upgradeable lease (Name, Owner, Token) becomes the write lease.
type RWUpgradeParams struct {
	Name  string
	Owner string
	Token int64
	TTL   time.Duration
	// Wait says that the caller will wait if refused: the refusal then
	// records the owner's intent to write (taking it over from a waiting
	// writer's, which the upgradeable lease keeps out anyway), which
	// keeps new readers out for TTL, and marks the name as waited for.
	Wait bool
}

// RWLockSQL declares the statements of read/write locks: a holders table
// (a lease table, one row per name and owner, with a shared flag) and a
// heads table (one row per name: the last token granted, a waiting
// writer's intent, and the waiters hint). Acquire runs them in one short
// transaction that locks the name's head row first, so that grants of a
// name take turns while releases and renewals, which touch only holder
// rows, never wait for them.
type RWLockSQL struct {
	// LeaseSQL are the holders table's lease statements.
	LeaseSQL
	// Head inserts :name's head row if it is missing, without an error (or
	// a duplicate-key message in the server's log) when it exists.
	Head SQL
	// LockHead selects, locking :name's head row until the transaction
	// ends: the intent's owner ('' if none), the microseconds the intent
	// has left (0 if none), and whether the name is marked as waited for.
	LockHead SQL
	// Holders selects owner, shared, upgradeable, token, holds and the
	// microseconds left (0 if none) of every holder row of :name, locking
	// the rows, so that a guarded transaction holding one is waited for.
	Holders SQL
	// Purge deletes :name's released and expired holder rows.
	Purge SQL
	// NextToken draws :name's next token, above every earlier one of the
	// name, and gives it as its number.
	NextToken SQL
	// InsertShared, InsertUpgradeable and InsertExclusive insert the
	// lease (:name, :owner, :token) of their side (a plain read, an
	// upgradeable read, the write side), with one hold, expiring :ttl
	// from now.
	InsertShared, InsertUpgradeable, InsertExclusive SQL
	// Upgrade turns the lease (:name, :owner, :token), an upgradeable
	// read, into the write lease, inside a grant that found no other live
	// holder of :name.
	Upgrade SQL
	// Downgrade turns the live write lease (:name, :owner, :token) into a
	// plain read lease in one statement, keeping its token, holds and
	// expiry, and announces the name if it is waited for and releases are
	// announced. Its number is 0 when no such live write lease is left, 2
	// when the name was waited for (so that Hooks.AfterRelease rings), 1
	// otherwise.
	Downgrade SQL
	// Reenter adds a hold to the lease (:name, :owner, :token) and
	// extends it to at least :ttl from now.
	Reenter SQL
	// Intent records :owner's intent to write on :name for :ttl, and marks
	// the name as waited for.
	Intent SQL
	// MarkWaiters marks :name as waited for.
	MarkWaiters SQL
	// ClearIntent removes :owner's intent on :name, inside a grant.
	ClearIntent SQL
	// Withdraw removes :owner's intent on :name on its own, announcing the
	// name if it was waited for and releases are announced. A number of
	// 2 says that the name was waited for, so that Hooks.AfterRelease
	// rings.
	Withdraw SQL
	// Readers selects the name, owner and token of every holder row of
	// the read side, for operators (package inspect): List lists the
	// holders of both sides.
	Readers SQL
	// Announces says that Release and Withdraw announce names on :channel.
	Announces bool
	// TxOptions are the options of the grant's transaction (nil: the
	// driver's default); it must see rows committed by others after its
	// own row locks were granted (READ COMMITTED, or SQLite's
	// whole-database write lock).
	TxOptions *sql.TxOptions
}
