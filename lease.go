package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// leaseStore is what a lease-based strategy provides to keep a lease alive,
// end it, and check it inside a user's transaction.
type leaseStore interface {
	Renew(ctx context.Context, l dialect.Lease, ttl time.Duration) (bool, error)
	Release(ctx context.Context, l dialect.Lease) (bool, error)
	Guard(ctx context.Context, tx *sql.Tx, l dialect.Lease) (bool, error)
}

type leaseKey struct{ name, owner string }

// leases tracks this process's live leases of one locker, so that re-entering
// a lock shares the lease (one renewal loop, one context) of the first hold.
type leases struct {
	store leaseStore
	opts  Options
	freed func(name string) // called when a lock is released for good; may be nil
	batch *renewBatcher     // nil when the store renews one lease at a time
	epoch time.Time         // origin of the renewal grid

	mu    sync.Mutex
	byKey map[leaseKey]*lease
}

func newLeases(store leaseStore, opts Options) *leases {
	ls := &leases{store: store, opts: opts, byKey: make(map[leaseKey]*lease), epoch: time.Now()}
	if br, ok := store.(dialect.BatchRenewer); ok {
		ls.batch = &renewBatcher{store: br, ttl: opts.TTL, window: renewBatchWindow(opts.RenewInterval)}
	}
	return ls
}

// untilTick is the time to the next point of the renewal grid, every
// RenewInterval from the locker's creation. Renewing on the grid makes the
// leases of a locker fall due together, so that they renew in batches.
// Without batching each lease keeps its own pace.
func (ls *leases) untilTick() time.Duration {
	if ls.batch == nil {
		return ls.opts.RenewInterval
	}
	iv := ls.opts.RenewInterval
	return iv - time.Since(ls.epoch)%iv
}

// renewOne renews ref, in the open batch if the store renews in batches.
func (ls *leases) renewOne(ctx context.Context, ref dialect.Lease) (bool, error) {
	if ls.batch != nil {
		return ls.batch.renew(ctx, ref)
	}
	return ls.store.Renew(ctx, ref, ls.opts.TTL)
}

// trustMargin is how much earlier than its lease a holder stops trusting it,
// to cover scheduling delays and clock-rate differences.
func trustMargin(ttl time.Duration) time.Duration {
	return min(ttl/10, time.Second)
}

// grant records that the database granted token to (name, owner) by a
// statement sent at start, and returns a handle for that hold.
func (ls *leases) grant(ctx context.Context, name, owner string, token int64, start time.Time) *Lock {
	trust := start.Add(ls.opts.TTL - trustMargin(ls.opts.TTL))
	key := leaseKey{name, owner}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.byKey[key]; l != nil && l.ref.Token == token && l.addHold(trust) {
		return &Lock{lease: l}
	}
	// A lease under the same key with another token belongs to an earlier
	// acquisition; it learns its fate from its own renewals or release.
	l := &lease{
		ls:         ls,
		ref:        dialect.Lease{Name: name, Owner: owner, Token: token},
		holds:      1,
		trustUntil: trust,
	}
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	ls.byKey[key] = l
	l.mu.Lock()
	l.startRenewal()
	l.mu.Unlock()
	return &Lock{lease: l}
}

func (ls *leases) forget(l *lease) {
	ls.mu.Lock()
	if ls.byKey[leaseKey{l.ref.Name, l.ref.Owner}] == l {
		delete(ls.byKey, leaseKey{l.ref.Name, l.ref.Owner})
	}
	ls.mu.Unlock()
}

// lease is one acquisition (one token) and the local holds on it.
//
// Renewal runs on a time.AfterFunc timer rather than a goroutine per lease:
// nothing runs between renewals, and stopping renewal at release is a timer
// stop, not a goroutine hand-shake.
type lease struct {
	ls     *leases
	ref    dialect.Lease
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu         sync.Mutex
	holds      int       // unreleased handles in this process
	trustUntil time.Time // monotonic; the lease is not trusted from then on
	ended      bool      // lost, or every hold released
	renewing   bool      // renewal is wanted: the timer is armed or a renewal runs
	timer      *time.Timer
	inflight   chan struct{}      // closed when the running renewal ends; nil if none
	stopFlight context.CancelFunc // cancels the running renewal's statement
}

func (l *lease) logger() *slog.Logger { return l.ls.opts.Logger }

// addHold adds a re-entrant hold; false if the lease has ended.
func (l *lease) addHold(trust time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return false
	}
	l.holds++
	if trust.After(l.trustUntil) {
		l.trustUntil = trust
	}
	return true
}

// startRenewal arms renewal unless it is on or the lease ended. l.mu must be
// held.
func (l *lease) startRenewal() {
	if l.ended || l.renewing {
		return
	}
	l.renewing = true
	l.arm(l.ls.untilTick())
}

// arm schedules the next renewal in d. l.mu must be held.
func (l *lease) arm(d time.Duration) {
	if l.timer == nil {
		l.timer = time.AfterFunc(d, l.renew)
		return
	}
	l.timer.Reset(d)
}

// stopRenewal turns renewal off and waits for a renewal in flight to end.
func (l *lease) stopRenewal() {
	l.mu.Lock()
	l.renewing = false
	if l.timer != nil {
		l.timer.Stop()
	}
	inflight, stop := l.inflight, l.stopFlight
	l.mu.Unlock()
	if inflight != nil {
		stop()
		<-inflight
	}
}

// renew runs one renewal, on the timer's goroutine, and decides what next:
// the next renewal, a retry inside the trust window, or loss.
func (l *lease) renew() {
	o := l.ls.opts
	l.mu.Lock()
	if !l.renewing || l.ended || l.inflight != nil {
		l.mu.Unlock()
		return
	}
	start := time.Now()
	deadline := l.trustUntil
	if !start.Before(deadline) {
		l.mu.Unlock()
		l.lose("no successful renewal within the trust window")
		return
	}
	ctx, stop := context.WithDeadline(context.Background(), deadline)
	done := make(chan struct{})
	l.inflight, l.stopFlight = done, stop
	l.mu.Unlock()

	ok, err := l.ls.renewOne(ctx, l.ref)
	stop()

	l.mu.Lock()
	l.inflight, l.stopFlight = nil, nil
	close(done)
	if !l.renewing || l.ended { // stopped while renewing: no verdict
		l.mu.Unlock()
		return
	}
	var lost string
	switch {
	case err == nil && ok:
		l.trustUntil = start.Add(o.TTL - trustMargin(o.TTL))
		l.arm(l.ls.untilTick())
	case err == nil:
		lost = "the lease expired or was taken over"
	case !time.Now().Before(deadline):
		lost = "renewal failed until the trust window closed: " + err.Error()
	default:
		l.logger().Warn("sqllock: lease renewal failed; retrying within the trust window",
			"name", l.ref.Name, "token", l.ref.Token, "trust_left", time.Until(deadline), "err", err)
		l.arm(min(max(o.RenewInterval/4, time.Millisecond), time.Until(deadline)))
	}
	l.mu.Unlock()
	if lost != "" {
		l.lose(lost)
	}
}

// lose ends the lease as lost: its context is cancelled with ErrLockLost.
func (l *lease) lose(reason string) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.ended, l.renewing = true, false
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.ls.forget(l)
	l.cancel(ErrLockLost)
	l.logger().Warn("sqllock: lock lost", "name", l.ref.Name, "owner", l.ref.Owner, "token", l.ref.Token, "reason", reason)
}

// dropHold records a hold released in the database. lost says the database
// no longer knew the lease.
func (l *lease) dropHold(lost bool) {
	if lost {
		l.lose("release found the lease taken over")
		return
	}
	l.mu.Lock()
	l.holds--
	last := l.holds == 0 && !l.ended
	if last {
		l.ended = true
	} else {
		l.startRenewal() // in case a final release paused it and a new hold came in
	}
	l.mu.Unlock()
	if last {
		l.ls.forget(l)
		l.cancel(ErrNotHeld)
		if l.ls.freed != nil {
			l.ls.freed(l.ref.Name)
		}
	}
}

// Lock is a held lock: one hold of one acquisition. It is safe for
// concurrent use.
//
// While any hold is unreleased, the lease is renewed in the background. If it
// is lost — taken over after expiring, or not renewed within its trust window
// of TTL minus a small margin since the last renewal that succeeded — the
// lock's Context is cancelled with cause ErrLockLost. The holder must then
// stop acting as the owner; Guard and the fencing Token let the data refuse a
// holder that has not noticed yet.
type Lock struct {
	lease *lease

	mu       sync.Mutex
	released bool
}

// Name returns the lock's name.
func (k *Lock) Name() string { return k.lease.ref.Name }

// Owner returns the owner identity the lock is held by. Pass it to WithOwner
// to re-enter the lock.
func (k *Lock) Owner() string { return k.lease.ref.Owner }

// Token returns the fencing token: fixed for this acquisition (re-entrant
// holds share it) and greater than every token granted for this name before.
// Storing it with data written under the lock, and refusing writes that carry
// a smaller one, keeps a paused former holder from corrupting the data.
func (k *Lock) Token() int64 { return k.lease.ref.Token }

// Context returns a context that is cancelled when the lock ends: with cause
// ErrLockLost if it is lost, ErrNotHeld once every hold is released. It
// carries the values of the context the lock was acquired with.
func (k *Lock) Context() context.Context { return k.lease.ctx }

// Done is shorthand for Context().Done().
func (k *Lock) Done() <-chan struct{} { return k.lease.ctx.Done() }

// Release releases this hold, in one statement scoped to the lock's name,
// owner and token. When it is the last hold the lock is freed and its context
// is cancelled with cause ErrNotHeld.
//
// A second Release of the same handle returns ErrNotHeld. If the lease was
// taken over meanwhile, Release returns ErrLockLost. Local state changes only
// once the database has answered: on any other error the hold is still
// counted and Release may be called again. An error wrapping
// ErrOutcomeUnknown means the statement may have been applied; a retry is
// then harmless for the last hold, while for a re-entered lock it may drop
// one hold too many (the lease then ends with the remaining holds' releases
// reporting ErrLockLost).
func (k *Lock) Release(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.released {
		return ErrNotHeld
	}
	l := k.lease
	l.mu.Lock()
	last := l.holds == 1
	l.mu.Unlock()
	if last {
		// Renewing while the lock is being freed would report a false loss.
		l.stopRenewal()
	}
	ok, err := l.ls.store.Release(ctx, l.ref)
	if err != nil {
		l.mu.Lock()
		l.startRenewal()
		l.mu.Unlock()
		return fmt.Errorf("sqllock: release %q: %w", l.ref.Name, err)
	}
	k.released = true
	l.dropHold(!ok)
	if !ok {
		return ErrLockLost
	}
	return nil
}

// Guard makes the caller's transaction tx safe to commit only while this
// acquisition holds the lock. It checks, inside tx, that the lease is live on
// the database clock and share-locks the lock's row until tx ends, so that no
// other owner can take the lock over before tx commits or rolls back. Call
// it in tx before (or after) the guarded writes and before Commit; it returns
// ErrLockLost if the lease is no longer held, in which case the caller must
// roll back (on MySQL/MariaDB under REPEATABLE READ the refused check still
// share-locks the row until then).
//
// While tx keeps the row share-locked, renewals of this lease wait too: keep
// guarded transactions well shorter than the TTL.
func (k *Lock) Guard(ctx context.Context, tx *sql.Tx) error {
	k.mu.Lock()
	released := k.released
	k.mu.Unlock()
	if released {
		return ErrNotHeld
	}
	ok, err := k.lease.ls.store.Guard(ctx, tx, k.lease.ref)
	if err != nil {
		return fmt.Errorf("sqllock: guard %q: %w", k.lease.ref.Name, err)
	}
	if !ok {
		return ErrLockLost
	}
	return nil
}
