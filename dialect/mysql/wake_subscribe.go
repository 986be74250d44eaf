package mysql

import (
	"context"
	"sync"

	"github.com/sqllock/sqllock/dialect"
)

var (
	_ dialect.Notifier        = (*Dialect)(nil)
	_ dialect.VersionNotifier = (*Dialect)(nil)
	_ dialect.Watcher         = (*watching)(nil)
)

// Subscribe implements dialect.Notifier. While any locker built on the
// dialect has waiters (and for half a second after), the dialect keeps one
// bell connection, taken from the pool, on which releases anywhere wake
// this process; see the README, "Wake-ups on MySQL and MariaDB". Close
// stops it. The subscription is a dialect.Watcher: only the names it
// watches are announced.
func (d *Dialect) Subscribe(s dialect.Subscriber) dialect.Subscription {
	if d.noWakeups {
		return unheard{}
	}
	return &watching{Subscription: d.bells.hub.Subscribe(s), b: d.bells, names: make(map[string]bool)}
}

// WithoutWakeups turns the wake-ups off: waiters poll, as they must where a
// release cannot reach the connection a waiting process sleeps on (a proxy
// that spreads connections over several servers, a multi-primary cluster
// other than Galera, which is detected), or where the dialect must never
// hold a connection of its own.
func WithoutWakeups() Option {
	return func(d *Dialect) error {
		d.noWakeups = true
		return nil
	}
}

// unheard is the subscription of a dialect without wake-ups: nothing is
// ever announced.
type unheard struct{}

func (unheard) Listening() bool { return false }
func (unheard) Unsubscribe()    {}

// Announced implements dialect.Notifier.
func (d *Dialect) Announced() uint64 { return d.bells.hub.Announced() }

// VersionsAnnounced implements dialect.VersionNotifier.
func (d *Dialect) VersionsAnnounced() {}

// watching is a subscription with the names it watches.
type watching struct {
	dialect.Subscription
	b     *bells
	mu    sync.Mutex
	names map[string]bool // nil once unsubscribed
}

// Watch implements dialect.Watcher.
func (w *watching) Watch(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.names != nil && !w.names[name] {
		w.names[name] = true
		w.b.watch(name)
	}
}

// Unwatch implements dialect.Watcher.
func (w *watching) Unwatch(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.names[name] {
		delete(w.names, name)
		w.b.unwatch(name)
	}
}

// Unsubscribe implements dialect.Subscription; it unwatches every name.
func (w *watching) Unsubscribe() {
	w.Subscription.Unsubscribe()
	w.mu.Lock()
	defer w.mu.Unlock()
	for name := range w.names {
		w.b.unwatch(name)
	}
	w.names = nil
}

// Close stops the bell connection, if one runs, and waits until the
// dialect's goroutines have ended or ctx ends (then it returns ctx's
// error). The *sql.DB belongs to the caller and stays open; lockers on
// the dialect keep working, but their waiters poll. Calling it again does
// no harm.
func (d *Dialect) Close(ctx context.Context) error {
	return d.bells.close(ctx)
}
