package sqllock

// Hooks into a Table's waiting room, for tests that must tell a wake-up by
// notification from one by polling.

// RoomState reports whether notifications reach t's waiting room, how many
// times its listener became ready, how many calls wait for name, and how
// many notifications for name reached the queue.
func RoomState(t *Table, name string) (listening bool, connects, waiting, notified int) {
	r := t.room
	r.mu.Lock()
	h := r.hub
	waiting, notified = len(r.queues[name]), r.notified[name]
	r.mu.Unlock()
	if h != nil {
		h.mu.Lock()
		listening, connects = h.up, h.connects
		h.mu.Unlock()
	}
	return listening, connects, waiting, notified
}

// RoomRetries reports how many refused attempts the heads waiting for name
// have made after a wait.
func RoomRetries(t *Table, name string) int {
	r := t.room
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.retries[name]
}

// RetireListeners stops every idle listening connection now rather than
// after hubLinger, and waits for them: for leak checks at the end of tests.
func RetireListeners() {
	hubs.Lock()
	all := make([]*hub, 0, len(hubs.m))
	for _, h := range hubs.m {
		all = append(all, h)
	}
	hubs.Unlock()
	for _, h := range all {
		h.retire()
		h.mu.Lock()
		idle := len(h.rooms) == 0
		h.mu.Unlock()
		if idle {
			<-h.done
		}
	}
}
