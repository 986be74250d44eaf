package dialect

import (
	"time"
)

// MaxMultiAcquire is the most names one MultiLockTable.AcquireAll call
// takes.
const MaxMultiAcquire = 64

// MultiAcquireParams are the parameters of MultiLockTable.AcquireAll.
type MultiAcquireParams struct {
	// Names are the names to acquire: at least one, at most
	// MaxMultiAcquire, distinct, in ascending byte order (the order in
	// which every caller takes them, so that two callers asking for
	// overlapping sets never wait for each other in a cycle; a dialect
	// that locks rows in another statement, as ReleaseAll may, locks them
	// in the same byte order).
	Names []string
	Owner string
	TTL   time.Duration
}
