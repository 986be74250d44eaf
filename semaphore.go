package sqllock

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/observe"
)

// MaxSemaphoreLimit is the largest limit NewSemaphore accepts: the limit
// is stored in a 32-bit integer column on every database.
const MaxSemaphoreLimit = math.MaxInt32

// Semaphore is a counting semaphore: up to Limit holders per name at once,
// each with a lease of its own, in the database's semaphore tables. Every
// holder gets a Lock like any other locker's: an owner, a fencing token
// (per name, larger than every token granted on that name before, across
// releases and reaping), a context cancelled with ErrLockLost if the lease
// is lost, and Guard. Renewal is batched with the locker's other leases. A
// crashed holder stops renewing and its permit returns once its lease has
// expired: an acquire counts live leases only (and a grant deletes the
// rows of ended ones).
//
// A name's limit is kept in the database, and every grant counts the
// name's live holders against it, whatever limit its Semaphore was built
// with. Until SetLimit sets it, a name's limit is the limit of the
// Semaphore whose acquire found the name without live holders (the first,
// and the first after its holders drained): an acquire beside holders of
// another Semaphore's limit counts against theirs. SetLimit sets a name's
// limit for good (until the next SetLimit), at once and atomically with
// grants: a raise grants waiters at once; a lower limit ends no lease, its
// holders finish as usual, and nothing is granted until fewer than the
// new limit hold. Available reads the permits free.
//
// Re-entry: an owner (see WithOwner) that acquires a name it holds re-enters
// its permit, with the same token, instead of taking a second one: one
// owner holds at most one permit of a name, however often it acquires it,
// and the permit is free again once every hold is released. Distinct
// owners (every call without WithOwner is one) take distinct permits.
//
// Acquire waits while the semaphore is full. A release that frees a permit
// of a name someone waits for wakes a waiter, as for the lock table: on
// PostgreSQL a waiter refused at first takes a ticket, and the release
// wakes the oldest ticket's process alone (LISTEN/NOTIFY), which wakes the
// next one's if a permit is still free when it is granted; the permit
// still goes to whoever asks first. On MySQL and MariaDB the waiting
// processes' bells ring; on SQLite waiters poll, until a holder's lease
// ends or with a jittered backoff, and wake at once on releases by the
// same Semaphore. TiDB's dialect has no semaphores.
//
// With Fair, waiters are served in FIFO order, as a fair Table's:
// a waiter refused at first takes a ticket, a row of the semaphore's
// queue, and a name's permits go to its live tickets in ticket order (with
// k permits free, to the k oldest). On PostgreSQL whatever admits a ticket
// (a release, a ticket given up, a grant that leaves a permit free) wakes
// that ticket's process alone, so a hand-off costs the same few statements
// however many wait; on MySQL and MariaDB a release rings every waiting
// process, whose oldest waiter tries; on SQLite fair waiters poll. A
// crashed waiter's ticket expires and is skipped; a waiter whose context
// ends gives its ticket up at once. TryAcquire on a fair Semaphore is
// refused while live tickets would take every free permit. Fair and
// unfair Semaphores on one name do not queue together: an unfair one
// takes any free permit (on PostgreSQL its waiters' tickets, which order
// their wake-ups, also queue fair waiters behind them).
//
// A Semaphore is safe for concurrent use; it is a Locker, so Do and TryDo
// take it.
type Semaphore struct {
	leaseLocker
	sems  sqlrun.SemaphoreTable
	limit int
	fair  *fairQueue // nil unless Fair
	// waking orders the wake-ups of waiters without Fair, where the
	// dialect can (dialect.Catalogue.WakingSemaphores).
	waking *fairQueue
}

var _ Locker = (*Semaphore)(nil)

// NewSemaphore returns a semaphore locker on d admitting limit holders per
// name. The schema must have been migrated (see Migrate). A limit below 1
// or above MaxSemaphoreLimit is ErrInvalidOptions, refused here rather
// than by the database at the first acquire; a dialect without semaphores,
// or with Fair one without their FIFO queue, is ErrUnsupported
// (see dialect.Catalogue).
func NewSemaphore(d dialect.Dialect, limit int, opts SemaphoreOptions) (*Semaphore, error) {
	cat, tb, err := open(d)
	if err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxSemaphoreLimit {
		return nil, fmt.Errorf("%w: semaphore limit %d: want 1 to %d (MaxSemaphoreLimit)", ErrInvalidOptions, limit, MaxSemaphoreLimit)
	}
	if tb.Semaphores == nil {
		return nil, cat.Unsupported(d.Name(), "Semaphores")
	}
	s := &Semaphore{sems: tb.Semaphores, limit: limit}
	var fair sqlrun.FairSemaphoreTable
	if opts.Fair {
		if fair = tb.FairSemaphores; fair == nil {
			return nil, fmt.Errorf("SemaphoreOptions.Fair: %w", cat.Unsupported(d.Name(), "FairSemaphores"))
		}
		s.sems = fair // its Release wakes the ticket a freed permit admits
	}
	s.try = attempts{s}
	var notifier dialect.Notifier
	if s.sems.Announces() {
		notifier = cat.Notifier
	}
	if err := s.init(observe.StrategySemaphore, d, s.sems, notifier, opts.LeaseOptions.config(opts.MinHold, opts.Fair)); err != nil {
		return nil, err
	}
	switch {
	case fair != nil:
		s.fair = newFairQueue(&s.eng, observe.StrategySemaphore, semaphoreTickets{fair, limit, s.eng.Config().TTL})
		s.try = fairStrategy{s.fair}
	case tb.WakingSemaphores != nil:
		s.waking = newFairQueue(&s.eng, observe.StrategySemaphore, wakingSemaphoreTickets{
			semaphoreTickets{tb.WakingSemaphores, limit, s.eng.Config().TTL}, s.sems})
	}
	return s, nil
}

// semaphoreTickets is the queue of a fair semaphore of limit permits
// whose leases last ttl.
type semaphoreTickets struct {
	sqlrun.FairSemaphoreTable
	limit int
	ttl   time.Duration
}

// Grant implements ticketQueue.
func (q semaphoreTickets) Grant(ctx context.Context, name, owner string, ticket int64) (int64, error) {
	return q.FairSemaphoreTable.Grant(ctx, dialect.SemaphoreParams{Name: name, Owner: owner, TTL: q.ttl, Limit: q.limit}, ticket)
}

// wakingSemaphoreTickets is the queue of an unfair semaphore, where the
// dialect orders wake-ups by tickets (Catalogue.WakingSemaphores): a
// grant without a ticket is the semaphore's Acquire.
type wakingSemaphoreTickets struct {
	semaphoreTickets
	sems sqlrun.SemaphoreTable
}

// Grant implements ticketQueue.
func (q wakingSemaphoreTickets) Grant(ctx context.Context, name, owner string, ticket int64) (int64, error) {
	if ticket == 0 {
		return q.sems.Acquire(ctx, dialect.SemaphoreParams{Name: name, Owner: owner, TTL: q.ttl, Limit: q.limit})
	}
	return q.semaphoreTickets.Grant(ctx, name, owner, ticket)
}

// Wait reports how long the waiter of t may sleep (see
// sqlrun.FairSemaphoreTable.Wait).
func (q semaphoreTickets) Wait(ctx context.Context, t dialect.Ticket) (time.Duration, bool, error) {
	return q.FairSemaphoreTable.Wait(ctx, t, q.limit)
}

// Acquire acquires a permit of name, waiting while the semaphore is full
// (see Locker, and the Semaphore's doc for Fair). When ctx ends
// first, it returns an error wrapping ctx.Err() (and a waiter with a
// ticket gives it up at once).
func (s *Semaphore) Acquire(ctx context.Context, name string) (*Lock, error) {
	switch {
	case s.fair != nil:
		return s.acquireFair(ctx, s.fair, name)
	case s.waking != nil:
		return s.acquireFair(ctx, s.waking, name)
	}
	return s.leaseLocker.Acquire(ctx, name)
}

// Limit returns the number of holders the semaphore admits per name whose
// limit SetLimit never set (see the Semaphore's doc): the limit it was
// built with.
func (s *Semaphore) Limit() int { return s.limit }

// SetLimit sets name's limit to n for every Semaphore of the database,
// whatever limit each was built with, until the next SetLimit of name. It
// takes effect at once and atomically with grants: a grant in progress
// counts against the old limit and commits before SetLimit does, every
// later one against n. A raise wakes the name's waiters, in this process
// and (where releases wake them: see the Semaphore's doc) in others, so
// that up to n hold at once; a lower limit ends no lease: the holders
// finish as usual, and nothing is granted until fewer than n hold. The
// name's fencing tokens go on growing. An n below 1 or above
// MaxSemaphoreLimit is ErrInvalidOptions; a name that is not valid is
// ErrInvalidName.
func (s *Semaphore) SetLimit(ctx context.Context, name string, n int) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if n < 1 || n > MaxSemaphoreLimit {
		return fmt.Errorf("%w: semaphore limit %d: want 1 to %d (MaxSemaphoreLimit)", ErrInvalidOptions, n, MaxSemaphoreLimit)
	}
	if err := s.sems.SetLimit(ctx, name, n); err != nil {
		return fmt.Errorf("sqllock: set the limit of semaphore %q: %w", name, err)
	}
	s.eng.Kick(name)
	return nil
}

// Available returns how many permits of name an acquire by this Semaphore
// could be granted now: the name's limit less its live holders, 0 when as
// many or more hold (after SetLimit lowered the limit below the holders).
// For a name without live holders whose limit SetLimit never set, it is
// the Semaphore's own limit, which its next grant gives the name. It is a
// reading: the permits may be taken, or freed, as soon as it returns;
// tickets of fair waiters hold no permit and are not counted.
func (s *Semaphore) Available(ctx context.Context, name string) (int, error) {
	if err := ValidateName(name); err != nil {
		return 0, err
	}
	st, ok, err := s.sems.Available(ctx, name)
	switch {
	case err != nil:
		return 0, fmt.Errorf("sqllock: read the permits of semaphore %q: %w", name, err)
	case !ok || (!st.Set && st.Holders == 0):
		return s.limit, nil
	}
	return max(st.Limit-st.Holders, 0), nil
}

// tryOnce runs the acquire transaction, and after a refusal, for a caller
// that will wait, asks how long the first holder's lease has left (which,
// where releases are announced, marks the name as waited for).
func (s *Semaphore) tryOnce(ctx context.Context, name, owner string, waiting bool) (int64, time.Time, time.Duration, error) {
	p := dialect.SemaphoreParams{Name: name, Owner: owner, TTL: s.eng.Config().TTL, Limit: s.limit}
	return attemptLease(ctx, name, waiting, s.eng.Config().Logger, observe.StrategySemaphore,
		func() (int64, error) { return s.sems.Acquire(ctx, p) },
		func() (time.Duration, bool, error) { return s.sems.Remaining(ctx, name) })
}
