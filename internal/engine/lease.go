package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/observe"
)

type leaseKey struct{ name, owner string }

// Leases tracks this process's live leases of one locker, so that re-entering
// a lock shares the lease (one renewal loop, one context) of the first hold.
type Leases struct {
	store sqlrun.LeaseTable
	opts  Config
	freed func(name string) // called when a lock is released for good; may be nil
	batch *renewBatcher
	epoch time.Time // origin of the renewal grid
	ev    *Events

	mu    sync.Mutex
	byKey map[leaseKey]*Lease
}

// NewLeases returns the leases of a locker on store.
func NewLeases(store sqlrun.LeaseTable, opts Config) *Leases {
	return &Leases{store: store, opts: opts, byKey: make(map[leaseKey]*Lease), epoch: time.Now(),
		batch: &renewBatcher{store: store, ttl: opts.TTL, window: renewBatchWindow(opts.RenewInterval)}}
}

// untilTick is the time to the next point of the renewal grid, every
// RenewInterval from the locker's creation. Renewing on the grid makes the
// leases of a locker fall due together, so that they renew in batches.
func (ls *Leases) untilTick() time.Duration {
	iv := ls.opts.RenewInterval
	return iv - time.Since(ls.epoch)%iv
}

// renewOne renews ref, in the open batch.
func (ls *Leases) renewOne(ctx context.Context, ref dialect.Lease) (sqlrun.Renewal, error) {
	return ls.batch.renew(ctx, ref)
}

// trustMargin is how much earlier than its lease a holder stops trusting it,
// to cover scheduling delays and clock-rate differences.
func trustMargin(ttl time.Duration) time.Duration {
	return min(ttl/10, time.Second)
}

// Grant records that the database granted token to (name, owner) by a
// statement sent at start, and returns that hold.
func (ls *Leases) Grant(ctx context.Context, name, owner string, token int64, start time.Time) Grant {
	trust := start.Add(ls.opts.TTL - trustMargin(ls.opts.TTL))
	key := leaseKey{name, owner}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.byKey[key]; l != nil && l.ref.Token == token && l.addHold(trust) {
		return Grant{Lease: l, Reentered: true}
	}
	// A lease under the same key with another token belongs to an earlier
	// acquisition; it learns its fate from its own renewals or release.
	l := &Lease{
		ls:         ls,
		ref:        dialect.Lease{Name: name, Owner: owner, Token: token},
		holds:      1,
		trustUntil: trust,
		granted:    time.Now(),
		minHold:    ls.opts.MinHold,
	}
	inner, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	l.ctx, l.cancel = &leaseContext{Context: inner, l: l}, cancel
	ls.byKey[key] = l
	l.mu.Lock()
	l.startRenewal()
	l.mu.Unlock()
	return Grant{Lease: l}
}

func (ls *Leases) forget(l *Lease) {
	ls.mu.Lock()
	if ls.byKey[leaseKey{l.ref.Name, l.ref.Owner}] == l {
		delete(ls.byKey, leaseKey{l.ref.Name, l.ref.Owner})
	}
	ls.mu.Unlock()
}

// Lease is one acquisition (one token) and the local holds on it.
//
// Renewal runs on a time.AfterFunc timer rather than a goroutine per lease:
// nothing runs between renewals, and stopping renewal at release is a timer
// stop, not a goroutine hand-shake.
type Lease struct {
	ls     *Leases
	ref    dialect.Lease
	ctx    context.Context
	cancel context.CancelCauseFunc

	granted time.Time // for events

	mu         sync.Mutex
	minHold    time.Duration // of the last release: the locker's MinHold, or a run's (TryDoBounded)
	holds      int           // unreleased handles in this process
	trustUntil time.Time     // monotonic; the lease is not trusted from then on
	ended      bool          // lost, or every hold released
	renewing   bool          // renewal is wanted: the timer is armed or a renewal runs
	failing    bool          // the last renewal failed (for events)
	timer      *time.Timer
	inflight   chan struct{}      // closed when the running renewal ends; nil if none
	stopFlight context.CancelFunc // cancels the running renewal's statement
	asked      bool               // a renewal learnt that a release was requested
	told       bool               // and its event was sent (see Revoked)
	reason     string             // the request's reason, once told
	revoked    chan struct{}      // closed once told; made by Revoked
}

func (l *Lease) logger() *slog.Logger { return l.ls.opts.Logger }

// addHold adds a re-entrant hold; false if the lease has ended.
func (l *Lease) addHold(trust time.Time) bool {
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
func (l *Lease) startRenewal() {
	if l.ended || l.renewing {
		return
	}
	l.renewing = true
	l.arm(l.ls.untilTick())
}

// arm schedules the next renewal in d. l.mu must be held.
func (l *Lease) arm(d time.Duration) {
	if l.timer == nil {
		l.timer = time.AfterFunc(d, l.renew)
		return
	}
	l.timer.Reset(d)
}

// StopRenewal turns renewal off and waits for a renewal in flight to end.
func (l *Lease) StopRenewal() {
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
func (l *Lease) renew() {
	o := l.ls.opts
	l.mu.Lock()
	if !l.renewing || l.ended || l.inflight != nil {
		l.mu.Unlock()
		return
	}
	start := time.Now()
	deadline := l.trustUntil
	if !start.Before(deadline) {
		cause := observe.LostTrustWindow
		if l.failing {
			cause = observe.LostRenewFailed
		}
		l.mu.Unlock()
		l.lose(cause, "no successful renewal within the trust window")
		return
	}
	// Not cancelled with the lease, but carrying the values (and span) it
	// was acquired with, for events.
	ctx, stop := context.WithDeadline(context.WithoutCancel(l.ctx), deadline)
	done := make(chan struct{})
	l.inflight, l.stopFlight = done, stop
	l.mu.Unlock()

	r, err := l.ls.renewOne(ctx, l.ref)
	stop()

	l.mu.Lock()
	l.inflight, l.stopFlight = nil, nil
	close(done)
	if !l.renewing || l.ended { // stopped while renewing: no verdict
		l.mu.Unlock()
		return
	}
	var (
		lost  string
		cause observe.LostCause
	)
	switch {
	case err == nil && r.OK:
		l.trustUntil = start.Add(o.TTL - trustMargin(o.TTL))
		l.arm(l.ls.untilTick())
		l.failing = false
		l.ls.ev.renewed(l.ctx, l.ref, observe.RenewOK, time.Until(deadline), nil)
		if r.Asked && !l.asked {
			l.asked = true
			defer l.revoke(r.Reason)
		}
	case err == nil:
		cause, lost = observe.LostExpired, "the lease expired or was taken over"
		l.ls.ev.renewed(l.ctx, l.ref, observe.RenewRefused, 0, nil)
	case errors.Is(err, dialect.ErrReadOnly):
		// A standby, or a primary demoted by a failover: whatever the
		// new primary knows of the lease, it cannot be renewed here.
		cause, lost = observe.LostReadOnly, "renewal reached a read-only server: "+err.Error()
		l.ls.ev.renewed(l.ctx, l.ref, observe.RenewFailed, 0, err)
	case !time.Now().Before(deadline):
		cause, lost = observe.LostRenewFailed, "renewal failed until the trust window closed: "+err.Error()
		l.ls.ev.renewed(l.ctx, l.ref, observe.RenewFailed, 0, err)
	default:
		l.logger().Warn("sqllock: lease renewal failed; retrying within the trust window",
			"name", l.ref.Name, "token", l.ref.Token, "trust_left", time.Until(deadline), "err", err)
		l.arm(min(max(o.RenewInterval/4, time.Millisecond), time.Until(deadline)))
		l.failing = true
		l.ls.ev.renewed(l.ctx, l.ref, observe.RenewFailed, 0, err)
	}
	l.mu.Unlock()
	if lost != "" {
		l.lose(cause, lost)
	}
}

// revoke tells of the release requested of the lease, for reason: the
// event first, then Revoked's channel, so that a holder woken by the
// channel finds the event told. l.mu is not held.
func (l *Lease) revoke(reason string) {
	l.ls.ev.Revoked(l.ctx, l.ref, l.granted, reason)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.told, l.reason = true, reason
	if l.revoked != nil {
		close(l.revoked)
	}
}

// Revoked returns a channel closed once a renewal learns that a release
// of the lease was requested (sqlrun.ReleaseRequests).
func (l *Lease) Revoked() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.revoked == nil {
		l.revoked = make(chan struct{})
		if l.told {
			close(l.revoked)
		}
	}
	return l.revoked
}

// RevokeReason returns the reason of the release requested of the lease;
// "" until one is (see Revoked).
func (l *Lease) RevokeReason() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reason
}

// leaseContext is a lease's context. Its Err checks the trust window on the
// spot, so that a holder asking after a pause (a stopped process, a starved
// goroutine) learns of the loss before the renewal timer has had a chance to
// run.
type leaseContext struct {
	context.Context
	l *Lease
}

func (c *leaseContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	c.l.checkTrust()
	return c.Context.Err()
}

// checkTrust ends the lease as lost if its trust window has passed.
func (l *Lease) checkTrust() {
	l.mu.Lock()
	passed := !l.ended && !time.Now().Before(l.trustUntil)
	l.mu.Unlock()
	if passed {
		l.lose(observe.LostTrustWindow, "the trust window passed without a successful renewal")
	}
}

// lose ends the lease as lost: its context is cancelled with Config.Lost.
func (l *Lease) lose(cause observe.LostCause, reason string) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.ended, l.renewing = true, false
	if l.timer != nil {
		l.timer.Stop()
	}
	// Cancelled under l.mu: a concurrent Err must not find the lease ended
	// and its context not yet cancelled.
	l.cancel(l.ls.opts.Lost)
	l.mu.Unlock()
	l.ls.forget(l)
	if l.ls.ev != nil {
		l.ls.ev.Lost(l.ctx, l.ref, l.granted, cause, reason, nil)
	} else {
		l.logger().Warn("sqllock: lock lost", "name", l.ref.Name, "owner", l.ref.Owner, "token", l.ref.Token, "reason", reason)
	}
}

// DropHold records a hold released in the database, and reports whether
// it was the last. lost says the database no longer knew the lease.
func (l *Lease) DropHold(lost bool) (last bool) {
	if lost {
		l.lose(observe.LostExpired, "release found the lease taken over")
		return false
	}
	l.mu.Lock()
	l.holds--
	last = l.holds == 0 && !l.ended
	if last {
		l.ended = true
		l.cancel(l.ls.opts.NotHeld)
	} else {
		l.startRenewal() // in case a final release paused it and a new hold came in
	}
	l.mu.Unlock()
	if last {
		l.ls.forget(l)
		if l.ls.freed != nil {
			l.ls.freed(l.ref.Name)
		}
	}
	return last
}

// ReleaseHold releases one hold in the database; the last one frees the
// lease. Local state changes only once the database has answered. If the
// lease was lost meanwhile it returns Config.Lost.
func (l *Lease) ReleaseHold(ctx context.Context) error {
	l.mu.Lock()
	last, minHold := l.holds == 1, l.minHold
	l.mu.Unlock()
	if last {
		// Renewing while the lock is being freed would report a false loss.
		l.StopRenewal()
	}
	ok, err := l.ls.store.Release(ctx, l.ref, minHold)
	if err != nil {
		err = fmt.Errorf("sqllock: release %q: %w", l.ref.Name, err)
		if last && l.Abandon(err) {
			return fmt.Errorf("%w (renewal stopped: the lease ends by its TTL at the latest; the release is retried in the background)", err)
		}
		return err
	}
	if freed := l.DropHold(!ok); ok {
		l.ls.ev.Released(ctx, l.ref, l.granted, freed)
	}
	if !ok {
		return l.ls.opts.Lost
	}
	return nil
}

// releaseRetries bounds the attempts to release, in the background, a lease
// whose last release failed.
const releaseRetries = 5

// Abandon ends the lease after its last hold's release failed with err:
// renewal stays stopped, so that the lease ends by its TTL at the latest
// (a failover, say, must not leave it renewed for as long as the process
// lives), its context is cancelled with Config.NotHeld, and the release is
// retried in the background a bounded number of times. It reports false,
// and renews again, if a hold was added meanwhile (re-entry under the same
// owner): the lease is then still wanted, and the failed hold stays
// counted.
//
// Retrying is safe although the failed release may have been applied: a
// release names the lease's token, and once the last hold is released the
// next grant of the name, even to the same owner, has another token.
func (l *Lease) Abandon(err error) bool {
	l.mu.Lock()
	if l.ended || l.holds != 1 {
		l.startRenewal()
		l.mu.Unlock()
		return false
	}
	l.holds = 0
	l.ended, l.renewing = true, false
	l.cancel(l.ls.opts.NotHeld)
	l.mu.Unlock()
	l.ls.forget(l)
	l.logger().Warn("sqllock: release failed; renewal stopped, the lease ends by its TTL at the latest; retrying the release",
		"name", l.ref.Name, "owner", l.ref.Owner, "token", l.ref.Token, "err", err)
	l.retryRelease(1)
	return true
}

// retryRelease makes the attempt-th background attempt to release an
// abandoned lease, after a growing delay, each bounded by RenewInterval.
func (l *Lease) retryRelease(attempt int) {
	iv := l.ls.opts.RenewInterval
	delay := min(max(iv/4, time.Millisecond)<<(attempt-1), iv)
	time.AfterFunc(delay, func() {
		ctx, cancel := context.WithTimeout(context.Background(), iv)
		l.mu.Lock()
		minHold := l.minHold
		l.mu.Unlock()
		ok, err := l.ls.store.Release(ctx, l.ref, minHold)
		cancel()
		log := l.logger().With("name", l.ref.Name, "owner", l.ref.Owner, "token", l.ref.Token, "attempt", attempt)
		switch {
		case err == nil && ok:
			log.Info("sqllock: released in the background after a failed release")
			if l.ls.freed != nil {
				l.ls.freed(l.ref.Name)
			}
		case err == nil:
			log.Info("sqllock: background release found the lease already released, expired or taken over")
		case attempt < releaseRetries:
			log.Warn("sqllock: background release failed; retrying", "err", err)
			l.retryRelease(attempt + 1)
		default:
			log.Warn("sqllock: background release failed; giving up: the lease ends by its TTL", "err", err)
		}
	})
}

// Guard checks the lease inside tx (the root package's Lock.Guard). A
// lease this process has already reported lost (its context cancelled
// with Config.Lost, or its trust window passed) is refused here, before
// any statement: the database may still hold the lease for a while (its
// clock started later than the trust window's, or renewals failed only on
// the client's side), but a holder told "lost" must not see a guarded
// write succeed. The check is made again once the database has answered,
// for a loss reported while the guard statement ran.
func (l *Lease) Guard(ctx context.Context, tx *sql.Tx) error {
	if err := l.refuseLocally(); err != nil {
		return err
	}
	ok, err := l.ls.store.Guard(ctx, tx, l.ref)
	if err != nil {
		return fmt.Errorf("sqllock: guard %q: %w", l.ref.Name, err)
	}
	if !ok {
		return l.ls.opts.Lost
	}
	return l.refuseLocally()
}

// refuseLocally returns Config.Lost (or Config.NotHeld) if the lease has ended
// in this process; it checks the trust window on the spot, as the lease's
// context's Err does.
func (l *Lease) refuseLocally() error {
	if l.ctx.Err() == nil {
		return nil
	}
	if cause := context.Cause(l.ctx); errors.Is(cause, l.ls.opts.Lost) {
		return fmt.Errorf("sqllock: guard %q: refused without asking the database: %w", l.ref.Name, l.ls.opts.Lost)
	}
	return l.ls.opts.NotHeld
}

// Ident returns the lease's name, owner and token.
func (l *Lease) Ident() dialect.Lease { return l.ref }

// Events returns the events of the lease's locker.
func (l *Lease) Events() *Events { return l.ls.ev }

// Context returns the lease's context: cancelled with Config.Lost when
// the lease is lost, Config.NotHeld once every hold is released.
func (l *Lease) Context() context.Context { return l.ctx }

// TrustedUntil returns when this process stops trusting the lease, on the
// local monotonic clock: the start of the last successful renewal (or of
// the grant) plus the TTL less the trust margin. Once the lease has ended
// it returns the zero time.
func (l *Lease) TrustedUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return time.Time{}
	}
	return l.trustUntil
}

// Granted returns when the lease was granted, on the local clock.
func (l *Lease) Granted() time.Time { return l.granted }

// Released reports whether the lease has ended: lost, or every hold
// released.
func (l *Lease) Released() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

// Holds returns the number of unreleased holds in this process.
func (l *Lease) Holds() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holds
}

// SetMinHold sets the minimum hold that the lease's last release applies,
// in place of the locker's MinHold.
func (l *Lease) SetMinHold(d time.Duration) {
	l.mu.Lock()
	l.minHold = d
	l.mu.Unlock()
}
