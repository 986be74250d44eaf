package dialect

import "context"

// Notifier is implemented by dialects that can announce released locks to
// waiting processes, such as PostgreSQL with LISTEN/NOTIFY. Strategies
// without it fall back to polling.
type Notifier interface {
	// Listen holds one connection and calls wake with the name of every
	// lock that is released (or reaped) while some process had been
	// waiting for it, until ctx ends or the connection fails; it returns
	// the reason. It calls ready once notifications are being delivered:
	// releases from then on are not missed.
	Listen(ctx context.Context, ready func(), wake func(name string)) error
}
