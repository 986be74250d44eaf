package dialect

// LatchSQL declares the statements of the latch table: one row per latch
// name, holding the count it was created with (:limit) and the count left.
// Every statement is one statement, with no transaction:
//
//	Create     insert :name's row with :limit as both counts, unless it
//	           exists (then nothing)
//	Initial    select the count :name was created with, -1 when it has
//	           no row
//	Count      select the count :name has left, -1 when it has no row
//	CountDown  take one from :name's count if it is above 0; its number
//	           is the count before it, 0 when it changed nothing (the
//	           count was 0 already, or :name has no row)
//	Delete     delete :name's row; its number is the rows deleted
//	Announce   if set, announce on :channel that :name reached 0, as a
//	           release is announced to the Notifier's subscribers
type LatchSQL struct {
	Create, Initial, Count, CountDown, Delete SQL
	Announce                                  SQL
	// Channel is the value of :channel.
	Channel string
}
