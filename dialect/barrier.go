package dialect

import "database/sql"

// BarrierSQL declares the statements of the barriers' tables: a head row
// per barrier name, holding the barrier's size (:limit) and whether its
// round is full, and a member row per name and owner, a lease (an expiry
// on the database clock) with a flag saying whether the member is leaving.
// Enter runs Head, LockHead, Members, Expire, Resize, Join and Fill in one
// short transaction that locks the name's head row first, so that the
// members of a name enter one at a time; every other statement is one
// statement, with no transaction.
//
//	Head      insert :name's head row with size :limit, not full, unless
//	          it exists (then nothing, with no error)
//	LockHead  select :name's size and whether it is full, locking the head
//	          row until the transaction ends
//	Members   select, of :name's member rows, how many are live and not
//	          leaving, how many expired and not leaving, how many live and
//	          leaving, how many of :owner are live (0 or 1), and whether
//	          :name's round is full (false with no head row)
//	Expire    delete :name's expired member rows
//	Resize    set :name's size to :limit, not full
//	Join      insert the member row (:name, :owner), not leaving, expiring
//	          :ttl from now
//	Fill      set :name full
//	Renew     extend the live member row (:name, :owner) to :ttl from now;
//	          its number is the rows changed
//	Leave     mark the live member row (:name, :owner) leaving; its number
//	          is the rows changed
//	Quit      delete the member row (:name, :owner)
//	Announce  if set, announce on :channel that :name's members may go on
//	          (it filled, or its last member is leaving), as a release is
//	          announced to the Notifier's subscribers
//
// The statements of the transaction must see rows committed by others
// after the head row's lock was granted (READ COMMITTED, or SQLite's
// whole-database write lock): TxOptions are its options.
type BarrierSQL struct {
	Head, LockHead, Members, Expire, Resize, Join, Fill SQL
	Renew, Leave, Quit                                  SQL
	Announce                                            SQL
	// Channel is the value of :channel.
	Channel string
	// TxOptions are the options of Enter's transaction (nil: the
	// driver's default).
	TxOptions *sql.TxOptions
}
