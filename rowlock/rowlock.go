// Package rowlock helps with concurrency control on your own rows, beside
// sqllock's named locks:
//
//   - optimistic: [CheckUpdate] turns a version-checked write
//     (UPDATE … WHERE id = ? AND version = ?) into [ErrConflict] when it
//     matched no row, [ConflictOrMissing] tells a moved version from a
//     missing row ([ErrNotFound]), and [RetryOnConflict] reruns the read and
//     the write, with jittered backoff, until no conflict is left;
//   - pessimistic: [InTx] runs a function in a transaction whose lock waits
//     are bounded ([TxOptions].LockTimeout) and which is run again after
//     deadlocks and serialization failures.
//
// Errors of the database keep sqllock's sentinels (sqllock.ErrLocked,
// sqllock.ErrTransient, sqllock.ErrOutcomeUnknown, …).
package rowlock

import (
	"errors"
	"reflect"

	"github.com/sqllock/sqllock/dialect"
)

var (
	// ErrConflict means a version-checked write matched no row: another
	// writer changed the row since it was read (or the row is gone).
	ErrConflict = errors.New("sqllock: version conflict")
	// ErrNotFound means the row a version-checked write targets does not
	// exist. It does not wrap ErrConflict, so RetryOnConflict does not
	// retry it.
	ErrNotFound = errors.New("sqllock: row not found")
)

// isNil reports whether d is nil or a nil pointer.
func isNil(d dialect.Dialect) bool {
	if d == nil {
		return true
	}
	v := reflect.ValueOf(d)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
