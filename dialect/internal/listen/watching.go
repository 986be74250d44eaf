package listen

import (
	"sync"

	"github.com/sqllock/sqllock/dialect"
)

// Watching returns sub with a record of the names it watches, for a
// dialect that must know which names anyone in the process waits for (to
// register a bell, or to pass a subscriber only those names' releases).
// Each Watch and Unwatch goes to sub, and to watch or unwatch the first
// time the subscription watches a name and when it stops; Unsubscribe
// unwatches every name still watched. watch and unwatch are called with
// the subscription's own lock held, never with the Hub's.
func Watching(sub dialect.Subscription, watch, unwatch func(name string)) dialect.Subscription {
	return &watching{Subscription: sub, watch: watch, unwatch: unwatch, names: make(map[string]bool)}
}

// watching is the subscription Watching returns.
type watching struct {
	dialect.Subscription
	watch, unwatch func(name string)

	mu    sync.Mutex
	names map[string]bool // nil once unsubscribed
}

// Watch implements dialect.Subscription.
func (w *watching) Watch(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.names != nil && !w.names[name] {
		w.names[name] = true
		w.Subscription.Watch(name)
		w.watch(name)
	}
}

// Unwatch implements dialect.Subscription.
func (w *watching) Unwatch(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.names[name] {
		delete(w.names, name)
		w.Subscription.Unwatch(name)
		w.unwatch(name)
	}
}

// Unsubscribe implements dialect.Subscription; it unwatches every name.
func (w *watching) Unsubscribe() {
	w.Subscription.Unsubscribe()
	w.mu.Lock()
	defer w.mu.Unlock()
	for name := range w.names {
		w.unwatch(name)
	}
	w.names = nil
}
