package sqllock

import (
	"log/slog"
	"time"

	"github.com/sqllock/sqllock/internal/engine"
	"github.com/sqllock/sqllock/observe"
)

// TableOptions configure NewTable. The zero value of each field selects
// its default. The other lease-based constructors' options have the same
// fields, with the same meanings, where they apply.
type TableOptions struct {
	// TTL is the lease length, counted on the database clock from each
	// grant or renewal. Default 30s; at least 10ms.
	TTL time.Duration
	// RenewInterval is how often a held lease is renewed. Default TTL/3;
	// it must satisfy TTL >= 3*RenewInterval.
	RenewInterval time.Duration
	// MaxBackoff caps the jittered wait between attempts of a blocking
	// acquire when the holder's lease does not end sooner. Default 500ms.
	MaxBackoff time.Duration
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
	// Logger receives renewal warnings, lost-lock reports, broken locks
	// (Table.Break), fall-backs (info), and at debug level every
	// acquisition, release and renewal. Default: none.
	Logger *slog.Logger
	// Observer receives lock events through the interfaces of package
	// observe it implements: AcquiredObserver, ReleasedObserver,
	// LostObserver, AcquireTracer, ReleaseTracer, GuardTracer,
	// HandoffObserver, WaitingObserver, RenewedObserver, RenewBatchTracer,
	// ListenerObserver and BreakObserver (Table.Break). Package sqllockotel
	// provides one that records
	// OpenTelemetry metrics and traces. Default: none.
	Observer observe.Observer
}

// OptimisticOptions configure NewOptimistic; the fields are those of
// TableOptions.
type OptimisticOptions struct {
	TTL           time.Duration
	RenewInterval time.Duration
	MaxBackoff    time.Duration
	MinHold       time.Duration
	Logger        *slog.Logger
	Observer      observe.Observer
}

// SemaphoreOptions configure NewSemaphore; the fields are those of
// TableOptions. MinHold and Fair apply to each permit.
type SemaphoreOptions struct {
	TTL           time.Duration
	RenewInterval time.Duration
	MaxBackoff    time.Duration
	MinHold       time.Duration
	Fair          bool
	Logger        *slog.Logger
	Observer      observe.Observer
}

// RWLockOptions configure NewRWLock; the fields are those of
// TableOptions. Read/write locks have no minimum hold and no FIFO queue:
// they prefer writers.
type RWLockOptions struct {
	TTL           time.Duration
	RenewInterval time.Duration
	MaxBackoff    time.Duration
	Logger        *slog.Logger
	Observer      observe.Observer
}

// ElectionOptions configure NewElection; the fields are those of
// TableOptions. TTL bounds how long a leader that died keeps the office;
// MaxBackoff also paces Observe's polling where the database announces
// nothing.
type ElectionOptions struct {
	TTL           time.Duration
	RenewInterval time.Duration
	MaxBackoff    time.Duration
	Logger        *slog.Logger
	Observer      observe.Observer
}

func (o TableOptions) config() engine.Config {
	return engine.Config{TTL: o.TTL, RenewInterval: o.RenewInterval, MaxBackoff: o.MaxBackoff, MinHold: o.MinHold, Fair: o.Fair, Logger: o.Logger, Observer: o.Observer}
}

func (o OptimisticOptions) config() engine.Config {
	return engine.Config{TTL: o.TTL, RenewInterval: o.RenewInterval, MaxBackoff: o.MaxBackoff, MinHold: o.MinHold, Logger: o.Logger, Observer: o.Observer}
}

func (o SemaphoreOptions) config() engine.Config {
	return engine.Config{TTL: o.TTL, RenewInterval: o.RenewInterval, MaxBackoff: o.MaxBackoff, MinHold: o.MinHold, Fair: o.Fair, Logger: o.Logger, Observer: o.Observer}
}

func (o RWLockOptions) config() engine.Config {
	return engine.Config{TTL: o.TTL, RenewInterval: o.RenewInterval, MaxBackoff: o.MaxBackoff, Logger: o.Logger, Observer: o.Observer}
}

func (o ElectionOptions) config() engine.Config {
	return engine.Config{TTL: o.TTL, RenewInterval: o.RenewInterval, MaxBackoff: o.MaxBackoff, Logger: o.Logger, Observer: o.Observer}
}
