package sqllock

// Hooks into a Table's waiting room, for tests that must tell a wake-up by
// notification from one by polling.

// RoomState reports whether t's room has a listener delivering
// notifications, how many times a listener became ready, how many calls wait
// for name, and how many notifications for name reached its queue.
func RoomState(t *Table, name string) (listening bool, connects, waiting, notified int) {
	r := t.room
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.up, r.connects, len(r.queues[name]), r.notified[name]
}

// RoomRetries reports how many refused attempts the heads waiting for name
// have made after a wait.
func RoomRetries(t *Table, name string) int {
	r := t.room
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.retries[name]
}
