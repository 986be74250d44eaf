package mysql

import (
	"context"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/internal/listen"
)

// bellNotifier is the catalogue's Notifier: the bells.
type bellNotifier struct{ *Dialect }

var _ dialect.Notifier = bellNotifier{}

// Subscribe implements dialect.Notifier. While any locker built on the
// dialect has waiters (and for half a second after), the dialect keeps one
// bell connection, taken from the pool, on which releases anywhere wake
// this process. Close stops it. Only the names the subscription watches
// are announced.
func (d bellNotifier) Subscribe(s dialect.Subscriber) dialect.Subscription {
	if d.noWakeups {
		return unheard{}
	}
	return listen.Watching(d.bells.hub.Subscribe(s), d.bells.watch, d.bells.unwatch)
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
func (unheard) Watch(string)    {}
func (unheard) Unwatch(string)  {}
func (unheard) Pass(string)     {}

// Announced implements dialect.Notifier.
func (d bellNotifier) Announced() uint64 { return d.bells.hub.Announced() }

// Close stops the bell connection, if one runs, and waits until the
// dialect's goroutines have ended or ctx ends (then it returns ctx's
// error). The *sql.DB belongs to the caller and stays open; lockers on
// the dialect keep working, but their waiters poll. Calling it again does
// no harm.
func (d *Dialect) Close(ctx context.Context) error {
	return d.bells.close(ctx)
}
