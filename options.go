package sqllock

import (
	"log/slog"
	"time"

	"github.com/sqllock/sqllock/internal/engine"
	"github.com/sqllock/sqllock/observe"
)

// LeaseOptions are the options every lease-based locker has: NewRWLock and
// NewElection take them as they are, and TableOptions, OptimisticOptions
// and SemaphoreOptions embed them. The zero value of each field selects
// its default.
//
//	locker, err := sqllock.NewTable(d, sqllock.TableOptions{
//		LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Second},
//		MinHold:      time.Minute,
//	})
type LeaseOptions struct {
	// TTL is the lease length, counted on the database clock from each
	// grant or renewal. Default 30s; at least 10ms. An election's TTL
	// bounds how long a leader that died keeps the office.
	TTL time.Duration
	// RenewInterval is how often a held lease is renewed. Default TTL/3;
	// it must satisfy TTL >= 3*RenewInterval.
	RenewInterval time.Duration
	// MaxBackoff caps the jittered wait between attempts of a blocking
	// acquire when the holder's lease does not end sooner; it also paces
	// Election.Observe's polling where the database announces nothing.
	// Default 500ms.
	MaxBackoff time.Duration
	// Logger receives renewal warnings, lost-lock reports, broken locks
	// (Table.Break), fall-backs (info), and at debug level every
	// acquisition, release and renewal. Default: none.
	Logger *slog.Logger
	// Observer receives lock events through the interfaces of package
	// observe it implements: AcquiredObserver, ReleasedObserver,
	// LostObserver, AcquireTracer, ReleaseTracer, GuardTracer,
	// HandoffObserver, WaitingObserver, RenewedObserver, RenewBatchTracer,
	// ListenerObserver, BreakObserver (Table.Break) and RevokedObserver
	// (Table.RequestRelease). One that
	// implements none of them is refused (see observe.Check). Package
	// sqllockotel provides one that records OpenTelemetry metrics and
	// traces. Default: none.
	Observer observe.Observer
}

// TableOptions configure NewTable: the lease options, and the two that
// only some lockers have. The zero value of each field selects its
// default.
type TableOptions struct {
	LeaseOptions
	// MinHold keeps a lock released sooner than MinHold after its grant
	// (on the database clock) taken until then — by nobody, its owner
	// included; then it is free. It makes a short periodic job run once
	// however far apart its replicas start within MinHold (see TryDo). A
	// holder that dies frees the lock when its lease expires, as without
	// MinHold. Default 0: a release frees the lock at once.
	MinHold time.Duration
	// Fair serves waiters in FIFO order: each waiter of Acquire takes a
	// ticket in the database, a grant goes only to the oldest live
	// ticket, and a release wakes that ticket's process alone where the
	// database can address it. TryAcquire is refused while anyone is
	// queued. Every locker of a name must agree on it. A dialect without
	// FIFO queues refuses it with ErrUnsupported. Default false.
	Fair bool
}

// OptimisticOptions configure NewOptimistic: the lease options, and
// MinHold as TableOptions has it. Optimistic lockers have no FIFO queue.
type OptimisticOptions struct {
	LeaseOptions
	// MinHold is TableOptions.MinHold.
	MinHold time.Duration
}

// SemaphoreOptions configure NewSemaphore; the fields are those of
// TableOptions. MinHold and Fair apply to each permit.
type SemaphoreOptions TableOptions

// config is the engine's configuration of a locker with these options,
// minHold and fair.
func (o LeaseOptions) config(minHold time.Duration, fair bool) engine.Config {
	return engine.Config{TTL: o.TTL, RenewInterval: o.RenewInterval, MaxBackoff: o.MaxBackoff,
		MinHold: minHold, Fair: fair, Logger: o.Logger, Observer: o.Observer}
}
