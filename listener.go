package sqllock

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// hub is the process's listening connection for one notifier (one dialect,
// so one pool and channel), shared by the waiting rooms of every locker on
// it. It runs while any room has waiters, reconnecting after failures, and
// fans each notification out to the rooms, which wake only the head waiting
// for that name.
type hub struct {
	n      dialect.Notifier
	key    any
	logger *slog.Logger
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	mu       sync.Mutex
	rooms    map[*waitRoom]struct{}
	up       bool // LISTEN is in effect: releases are announced
	connects int  // times the listener became ready (tests)
}

// hubs holds the running hubs, by notifier (or by room, for notifiers that
// cannot be map keys).
var hubs = struct {
	sync.Mutex
	m map[any]*hub
}{m: make(map[any]*hub)}

// subscribe adds r to its notifier's hub, starting the hub if needed.
func subscribe(r *waitRoom) *hub {
	hubs.Lock()
	defer hubs.Unlock()
	h := hubs.m[r.hubKey]
	if h == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h = &hub{n: r.notifier, key: r.hubKey, logger: r.logger, cancel: cancel, done: make(chan struct{}), rooms: make(map[*waitRoom]struct{})}
		hubs.m[r.hubKey] = h
		go h.run(ctx)
	}
	h.mu.Lock()
	h.rooms[r] = struct{}{}
	h.mu.Unlock()
	return h
}

// hubLinger is how long a hub keeps listening after its last room stopped
// waiting: lockers that take turns on a name would otherwise reconnect and
// LISTEN again at every hand-off.
const hubLinger = 500 * time.Millisecond

// unsubscribe removes r from h. A hub left without rooms stops after
// hubLinger unless a room subscribes meanwhile.
func unsubscribe(r *waitRoom, h *hub) {
	h.mu.Lock()
	delete(h.rooms, r)
	empty := len(h.rooms) == 0
	h.mu.Unlock()
	if empty {
		time.AfterFunc(hubLinger, h.retire)
	}
}

// retire stops h if it still has no rooms.
func (h *hub) retire() {
	hubs.Lock()
	defer hubs.Unlock()
	h.mu.Lock()
	empty := len(h.rooms) == 0
	if empty {
		h.up = false
	}
	h.mu.Unlock()
	if empty && hubs.m[h.key] == h {
		h.cancel()
		delete(hubs.m, h.key)
	}
}

func (h *hub) listening() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.up
}

// run keeps a listening connection while ctx lasts, reconnecting after
// failures with a growing pause; while it is down, heads poll at the
// normal pace.
func (h *hub) run(ctx context.Context) {
	defer close(h.done)
	pause := 50 * time.Millisecond
	for {
		err := h.n.Listen(ctx, h.ready, h.deliver)
		h.mu.Lock()
		h.up = false
		h.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		h.logger.Warn("sqllock: lost the listening connection; waiters poll until it is back", "err", err, "retry_in", pause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// ready marks the hub up and wakes every head: releases before LISTEN took
// effect were not announced.
func (h *hub) ready() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.up = true
	h.connects++
	for r := range h.rooms {
		r.kickAll()
	}
}

func (h *hub) deliver(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for r := range h.rooms {
		r.notify(name)
	}
}
