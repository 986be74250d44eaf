package sqllock

import (
	"sync"

	"github.com/sqllock/sqllock/internal/engine"
)

// Hooks into a Table's waiting room, for tests that must tell a wake-up by
// notification from one by polling.

// RoomState reports whether notifications reach t's waiting room, and how
// many calls wait for name.
func RoomState(l Locker, name string) (listening bool, waiting int) {
	return roomOf(l).State(name)
}

// roomOf returns the lease engine, and so the waiting room, of a Table,
// a Semaphore or an RWLock.
func roomOf(l Locker) *engine.Locker {
	switch l := l.(type) {
	case *Table:
		return &l.eng
	case *Semaphore:
		return &l.eng
	case *RWLock:
		return &l.eng
	case *Optimistic:
		return &l.eng
	}
	panic("not a Table, an Optimistic, a Semaphore or an RWLock")
}

// RoomProbe counts what a locker's waiting room sees.
type RoomProbe struct {
	mu       sync.Mutex
	connects int            // times the listening connection became ready
	losses   int            // times the listening connection was lost
	notified map[string]int // notifications that reached a queue, by name
	retries  map[string]int // refused attempts by heads after a wait, by name
	// events counts what the room was told and did; woken and refused
	// hold the count at the last wake-up (Ready, or a notification) and
	// at the last refused attempt after a wait, by name (Settled).
	events  int
	woken   map[string]int
	anyWake int
	refused map[string]int
}

// ProbeRoom returns a probe of the waiting room of l, a Table, an
// Optimistic, a Semaphore or an RWLock. Call it before l is used.
func ProbeRoom(l Locker) *RoomProbe { return probe(roomOf(l)) }

// ProbeElection returns a probe of the waiting room of e's campaigns.
// Call it before e is used.
func ProbeElection(e *Election) *RoomProbe { return probe(&e.table.eng) }

func probe(r *engine.Locker) *RoomProbe {
	p := &RoomProbe{notified: make(map[string]int), retries: make(map[string]int),
		woken: make(map[string]int), refused: make(map[string]int)}
	r.SetHooks(&engine.Hooks{
		Ready: func() {
			p.mu.Lock()
			p.connects++
			p.events++
			p.anyWake = p.events
			p.mu.Unlock()
		},
		Notified: func(name string) {
			p.mu.Lock()
			p.notified[name]++
			p.events++
			p.woken[name] = p.events
			p.mu.Unlock()
		},
		Lost: func() {
			p.mu.Lock()
			p.losses++
			p.mu.Unlock()
		},
		Retried: func(name string) {
			p.mu.Lock()
			p.retries[name]++
			p.events++
			p.refused[name] = p.events
			p.mu.Unlock()
		},
	})
	return p
}

// Settled reports whether the head waiting for name was refused after
// a wait since the last wake-up the room was told of (the listening
// connection ready, or a notification of name): it has nothing left to
// try for, and sleeps until the next wake-up or its timer.
func (p *RoomProbe) Settled(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused[name] > p.woken[name] && p.refused[name] > p.anyWake
}

// Connects reports how many times the room was told that a listening
// connection became ready.
func (p *RoomProbe) Connects() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.connects
}

// Losses reports how many times the room was told that its listening
// connection was lost (its heads poll until it is back).
func (p *RoomProbe) Losses() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.losses
}

// Notified reports how many notifications for name reached the queue of
// its waiters.
func (p *RoomProbe) Notified(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.notified[name]
}

// Retries reports how many refused attempts the heads waiting for name have
// made after a wait.
func (p *RoomProbe) Retries(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.retries[name]
}
