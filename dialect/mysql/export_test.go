package mysql

// Test seams of the wake-ups.

// GateBell makes every later attempt to start d's bell call gate first,
// and fail with its error, if any.
func GateBell(d *Dialect, gate func() error) {
	d.bells.mu.Lock()
	defer d.bells.mu.Unlock()
	d.bells.gate = gate
}

// BellID returns the connection id of d's running bell, or 0.
func BellID(d *Dialect) int64 {
	d.bells.mu.Lock()
	defer d.bells.mu.Unlock()
	return d.bells.bell.id
}

// Subscribers returns the number of subscriptions to d's bells.
func Subscribers(d *Dialect) int { return d.bells.hub.Subscribers() }

// For the tests of package mysql_test.
const MigrationLockName = migrationLockName

var IsTiDB = isTiDB

var WrapTiDB = wrapTiDB

// BellTag returns the tag of d's running bell, or "".
func BellTag(d *Dialect) string {
	d.bells.mu.Lock()
	defer d.bells.mu.Unlock()
	return d.bells.bell.tag
}
