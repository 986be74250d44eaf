package sqllock

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/engine"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// MaxNameLen is the longest lock name or owner identity, in bytes.
const MaxNameLen = 255

// Locker acquires named locks. All strategies implement it ([Table],
// [Optimistic], [Pessimistic]), and are safe for concurrent use.
//
// Acquire waits until the lock is acquired or ctx ends; the error then wraps
// ctx.Err(). TryAcquire returns ErrLocked at once when another owner holds
// the lock. Each call acquires on behalf of a fresh owner identity, so two
// goroutines (or two calls in one goroutine) exclude each other, unless ctx
// carries an owner set with WithOwner: acquiring again under the same owner
// re-enters the lock (see Lock).
type Locker interface {
	Acquire(ctx context.Context, name string) (*Lock, error)
	TryAcquire(ctx context.Context, name string) (*Lock, error)
}

// ValidateName reports whether name is usable as a lock name: 1 to
// MaxNameLen bytes of valid UTF-8 without NUL bytes. The error wraps
// ErrInvalidName.
func ValidateName(name string) error {
	if err := validateString(name); err != "" {
		return fmt.Errorf("%w: %s", ErrInvalidName, err)
	}
	return nil
}

func validateString(s string) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > MaxNameLen:
		return fmt.Sprintf("%d bytes, longer than %d", len(s), MaxNameLen)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return "contains a NUL byte"
		}
	}
	return ""
}

type ownerKey struct{}

// WithOwner returns a context that makes lockers acquire on behalf of owner.
// Acquiring a name again under an owner that already holds it re-enters the
// lock: the hold count goes up, the fencing token stays, and the lock is freed
// when every hold has been released. Owners are compared across processes, so
// an owner must be unique to the logical holder (Lock.Owner of an earlier
// acquisition is a good choice). Invalid owners are reported by Acquire and
// TryAcquire with ErrInvalidOwner.
func WithOwner(ctx context.Context, owner string) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

// ownerSource hands out owner identities unique to this process and call.
type ownerSource struct {
	prefix string
	n      atomic.Uint64
}

func newOwnerSource() *ownerSource {
	host, _ := os.Hostname()
	if len(host) > 64 {
		host = host[:64]
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &ownerSource{prefix: host + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b[:]) + ":"}
}

// owner returns the owner the caller set on ctx with WithOwner, or a new
// unique one.
func (o *ownerSource) owner(ctx context.Context) (string, error) {
	if v, ok := ctx.Value(ownerKey{}).(string); ok {
		if err := validateString(v); err != "" {
			return "", fmt.Errorf("%w: %s", ErrInvalidOwner, err)
		}
		return v, nil
	}
	return o.fresh(), nil
}

// fresh returns a new unique owner.
func (o *ownerSource) fresh() string {
	return o.prefix + strconv.FormatUint(o.n.Add(1), 36)
}

// Do acquires name with l (waiting as Acquire does), runs fn with the lock's
// context, and releases the lock even if ctx has ended. The lock's context is
// cancelled with cause ErrLockLost if the lock is lost while fn runs. Do
// returns fn's error joined with the release error, if any.
func Do(ctx context.Context, l Locker, name string, fn func(ctx context.Context) error) error {
	lock, err := l.Acquire(ctx, name)
	if err != nil {
		return err
	}
	ferr := fn(lock.Context())
	return errors.Join(ferr, lock.Release(context.WithoutCancel(ctx)))
}

// TryDo runs fn under the lock name if the lock is free: it acquires name
// with l.TryAcquire, runs fn with the lock's context, and releases the lock
// even if ctx has ended. When another owner holds the lock it returns
// (false, nil) at once, without running fn: skipping is the expected
// outcome of a job that another replica runs. Otherwise ran is true once
// fn ran, and err is fn's error joined with the release error, if any; an
// error of the acquisition itself is returned with ran false.
//
// For a job that every replica starts at the same time (cron, a ticker),
// give the locker a minimum hold (MinHold) a little below the
// job's period: a replica whose start is late by less than that finds the
// lock still taken after a short job released it, and skips, so the job
// runs once per period; the lock is free again before the next period,
// even if the replica that ran the job has exited.
//
//	locker, _ := sqllock.NewTable(d, sqllock.TableOptions{MinHold: 50 * time.Minute})
//	ran, err := sqllock.TryDo(ctx, locker, "report:hourly", report) // every hour, on every replica
func TryDo(ctx context.Context, l Locker, name string, fn func(ctx context.Context) error) (ran bool, err error) {
	lock, err := l.TryAcquire(ctx, name)
	if errors.Is(err, ErrLocked) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	ferr := fn(lock.Context())
	return true, errors.Join(ferr, lock.Release(context.WithoutCancel(ctx)))
}

// Bounds bound one run of TryDoBounded, as ShedLock's lockAtLeastFor and
// lockAtMostFor bound a scheduled task's: per call, not per locker. The
// zero value bounds nothing.
type Bounds struct {
	// AtLeast keeps the lock taken until AtLeast after its grant, on the
	// database clock, however soon fn returns: the minimum hold of this
	// run, in place of the locker's MinHold. A replica whose timer fires
	// later within AtLeast skips the run. Read/write and pessimistic locks
	// have no minimum hold and refuse it (ErrUnsupported).
	AtLeast time.Duration
	// AtMost ends fn's context AtMost after the grant, with a cause that
	// names the bound: the longest a run may go on. The lock is released
	// once fn returns. 0: no bound.
	AtMost time.Duration
}

// TryDoBounded is TryDo with per-run bounds b: the lock is held for at
// least b.AtLeast and fn's context ends after b.AtMost. A negative bound
// is ErrInvalidOptions; b.AtLeast on a read/write or pessimistic locker is
// ErrUnsupported. Both are refused before anything is acquired. A run that
// re-enters an acquisition its owner holds (see WithOwner) sets the minimum
// hold of that acquisition, applied by its last release.
//
//	// Every replica's cron starts it at 02:00; one replica runs it, for an
//	// hour at most, and the name stays taken for 23 hours.
//	ran, err := sqllock.TryDoBounded(ctx, locker, "report:nightly",
//		sqllock.Bounds{AtLeast: 23 * time.Hour, AtMost: time.Hour}, report)
func TryDoBounded(ctx context.Context, l Locker, name string, b Bounds, fn func(ctx context.Context) error) (ran bool, err error) {
	if b.AtLeast < 0 || b.AtMost < 0 {
		return false, fmt.Errorf("%w: Bounds must not be negative", ErrInvalidOptions)
	}
	if _, ok := l.(noMinHold); ok && b.AtLeast > 0 {
		return false, fmt.Errorf("%w: Bounds.AtLeast: a %T has no minimum hold", ErrUnsupported, l)
	}
	lock, err := l.TryAcquire(ctx, name)
	if errors.Is(err, ErrLocked) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if mh, ok := lock.h.(minHolding); ok && b.AtLeast > 0 {
		mh.SetMinHold(b.AtLeast)
	}
	fctx := lock.Context()
	if b.AtMost > 0 {
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeoutCause(fctx, b.AtMost,
			fmt.Errorf("sqllock: the run of %q went on for its Bounds.AtMost, %v", name, b.AtMost))
		defer cancel()
	}
	ferr := fn(fctx)
	return true, errors.Join(ferr, lock.Release(context.WithoutCancel(ctx)))
}

// noMinHold is implemented by the lockers that keep no minimum hold
// (RWLock, Pessimistic): TryDoBounded refuses them Bounds.AtLeast.
type noMinHold interface{ noMinHold() }

// minHolding is a holding that keeps a minimum hold: a lease.
type minHolding interface{ SetMinHold(d time.Duration) }

// holding is one acquisition behind Lock handles: a lease (table and
// optimistic strategies) or a row lock (pessimistic).
type holding interface {
	Ident() dialect.Lease
	Context() context.Context
	Tx() *sql.Tx
	// ReleaseHold releases one hold; if the acquisition was lost meanwhile
	// it returns ErrLockLost, and after an error that leaves the hold
	// counted it may be called again. rollback asks for the lock's
	// transaction, if it has one, to be rolled back rather than committed.
	ReleaseHold(ctx context.Context, rollback bool) error
	Guard(ctx context.Context, tx *sql.Tx) error
	Released() bool // released, by this handle or lost: Release must not retry
	TrustedUntil() time.Time
	Events() *engine.Events
}

// Lock is a held lock: one hold of one acquisition. It is safe for
// concurrent use.
//
// A lease-based lock (NewTable, NewOptimistic) is renewed in the background
// while any hold is unreleased. If it is lost — taken over after expiring,
// or not renewed within its trust window of TTL minus a small margin since
// the last renewal that succeeded — the lock's Context is cancelled with
// cause ErrLockLost. The holder must then stop acting as the owner; Guard
// and the fencing Token let the data refuse a holder that has not noticed
// yet. A pessimistic lock (NewPessimistic) lives as long as its transaction
// and connection; its Context is cancelled with ErrLockLost when the
// connection is found dead.
type Lock struct {
	h holding

	reentered bool              // a re-entrant hold, for events
	values    sqlrun.LockValues // where SetValue writes; nil: the lock keeps no value
	rw        *rwHandle         // the side of a read/write lock's hold; nil for other locks

	mu       sync.Mutex
	released bool
}

// Name returns the lock's name.
func (k *Lock) Name() string { return k.h.Ident().Name }

// Owner returns the owner identity the lock is held by. Pass it to WithOwner
// to re-enter the lock.
func (k *Lock) Owner() string { return k.h.Ident().Owner }

// Token returns the fencing token: fixed for this acquisition (re-entrant
// holds share it) and greater than every token granted for this name before.
// Storing it with data written under the lock, and refusing writes that carry
// a smaller one, keeps a paused former holder from corrupting the data.
func (k *Lock) Token() int64 { return k.h.Ident().Token }

// Context returns a context that is cancelled when the lock ends: with cause
// ErrLockLost if it is lost, ErrNotHeld once every hold is released. It
// carries the values of the context the lock was acquired with.
//
// For a lease-based lock, the context's own Err also checks the trust window
// when called: after a pause longer than the window (a stopped process, a
// starved goroutine), Err reports the loss at once rather than after the
// renewal timer has run. Check Context().Err() right before acting as the
// holder; contexts derived from it learn of the loss only when it is
// cancelled.
func (k *Lock) Context() context.Context { return k.h.Context() }

// TrustedUntil returns the instant, on this process's monotonic clock, until
// which a lease-based lock can be trusted from what its renewals have
// heard: the start of the last successful renewal (or of the acquisition)
// plus the TTL less a margin of min(TTL/10, 1s). Renewals move it forward;
// while they fail it stays put, and the lock is lost when it passes. A
// holder that hands the lease's protection to something it cannot cancel
// at once (a child process, say) can stop that work by this instant. It
// returns the zero time once the lock has ended, and for a pessimistic
// lock, which has no lease: it lasts as long as its connection.
func (k *Lock) TrustedUntil() time.Time { return k.h.TrustedUntil() }

// Done is shorthand for Context().Done().
func (k *Lock) Done() <-chan struct{} { return k.h.Context().Done() }

// Tx returns the transaction holding a pessimistic lock, nil for the other
// strategies. Statements run in it commit exactly when the lock's last hold
// is released, and roll back if the lock is lost or released with Abort.
// Do not commit or roll it back yourself: that releases the lock, and
// Release then returns an error wrapping sql.ErrTxDone. It serialises
// concurrent use, like any *sql.Tx.
//
// A statement that fails inside Tx affects the transaction differently on
// each database. PostgreSQL aborts the whole transaction: later statements
// fail, and Release rolls back and returns an error wrapping ErrRolledBack
// (the lock is released all the same). MySQL and MariaDB undo only the
// failed statement (a deadlock, though, rolls back the whole transaction,
// and with it the lock's row lock): the transaction goes on, and Release
// commits the statements that succeeded. sqllock cannot see your
// statements, so it does not choose for you: after a failed statement,
// call Abort to roll everything back on both databases alike, or go on and
// Release if the MySQL behaviour is what you want.
func (k *Lock) Tx() *sql.Tx { return k.h.Tx() }

// Release releases this hold. For a lease-based lock it is one statement
// scoped to the lock's name, owner and token; for a pessimistic lock the
// last hold commits the lock's transaction (see Tx). When it is the last
// hold the lock is freed and its context is cancelled with cause ErrNotHeld.
// With MinHold, a last release sooner than MinHold after the grant
// leaves the lock taken, by nobody, until then: the handle and its context
// end at once all the same.
//
// A second Release of the same handle returns ErrNotHeld. If the lock was
// lost meanwhile (for a lease: taken over), Release returns ErrLockLost.
//
// If the release of a lease's last hold fails (the database unreachable,
// failing over, or the reply lost), the lease is given up all the same:
// renewal stops at once, so the lease ends by its TTL at the latest, the
// lock's context is cancelled with ErrNotHeld, the handle counts as
// released, and the release is retried in the background a few times,
// each attempt reported to the Logger. The error says what happened: it
// wraps ErrUnavailable when nothing was sent, ErrOutcomeUnknown when the
// statement may have been applied. When the release of one of several
// re-entrant holds fails, the lease stays renewed for the others and the
// hold is still counted: Release may be called again (after an
// ErrOutcomeUnknown that may drop one hold too many; the lease then ends
// with the remaining holds' releases reporting ErrLockLost). A pessimistic lock
// is released either way; if its session had died (the lock was lost, and
// its context is cancelled with ErrLockLost), the error wraps ErrLockLost,
// and ErrOutcomeUnknown as well if the commit may have been applied.
//
// For a pessimistic lock, Release returns an error wrapping ErrRolledBack
// when the transaction was rolled back instead of committed (PostgreSQL
// after a failed statement, or after Abort of a re-entered hold), and one
// wrapping sql.ErrTxDone when Tx was committed or rolled back by its
// caller; either way the lock is released, and the outcome is known.
func (k *Lock) Release(ctx context.Context) error {
	return k.release(ctx, false)
}

// Abort releases this hold as Release does, but rolls the lock's
// transaction back (see Tx) instead of committing it: when it is the last
// hold, the lock is freed and nothing run in Tx is applied; an earlier
// hold's Abort marks the transaction for rollback, and the last hold's
// Release then rolls back and returns an error wrapping ErrRolledBack. For
// a lease-based lock, which has no transaction, Abort is Release.
//
// A second Abort or Release of the same handle returns ErrNotHeld; if the
// lock was lost meanwhile, Abort returns ErrLockLost (its transaction was
// rolled back by the database).
func (k *Lock) Abort(ctx context.Context) error {
	return k.release(ctx, true)
}

func (k *Lock) release(ctx context.Context, rollback bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.released {
		return ErrNotHeld
	}
	ev, ref := k.h.Events(), k.h.Ident()
	ctx = ev.StartRelease(ctx, ref)
	err := k.h.ReleaseHold(ctx, rollback)
	ev.EndRelease(ctx, ref, err)
	if err == nil || errors.Is(err, ErrLockLost) || k.h.Released() {
		k.released = true
	}
	return err
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
// Once the lock has reported its loss — its Context cancelled with cause
// ErrLockLost, or its trust window passed — Guard refuses at once with
// ErrLockLost, without sending a statement, even if the database still
// holds the lease: a holder told the lock is lost never sees a guarded
// write succeed. Guard also returns ErrLockLost when the loss is reported
// while its statement runs.
//
// While tx keeps the row share-locked, renewals of this lease wait too: keep
// guarded transactions well shorter than the TTL.
//
// A pessimistic lock guards only its own transaction (Tx), and returns an
// error wrapping ErrUnsupported for any other. Its lock lives as long as
// Tx's session, so Guard checks the session with one statement on Tx: if
// the session is gone (terminated, killed, cut off), the lock is lost —
// another owner may hold it already — and Guard returns an error wrapping
// ErrLockLost (the lock's context is then cancelled with that cause). If
// Tx was aborted by a failed statement, the error says so.
func (k *Lock) Guard(ctx context.Context, tx *sql.Tx) error {
	k.mu.Lock()
	released := k.released
	k.mu.Unlock()
	if released {
		return ErrNotHeld
	}
	ev, ref := k.h.Events(), k.h.Ident()
	ctx = ev.StartGuard(ctx, ref)
	err := k.h.Guard(ctx, tx)
	ev.EndGuard(ctx, ref, err)
	return err
}

// revocable is a holding whose holder can be asked to release it
// (Table.RequestRelease): a lease.
type revocable interface {
	Revoked() <-chan struct{}
	RevokeReason() string
}

// Revoked returns a channel that is closed when someone asked this lock's
// holder to release it (Table.RequestRelease; the sqllock command's
// unlock --ask), which the lock learns from its renewals, within one
// RenewInterval of the request. The lock is still held: the holder
// should finish what it is doing, or stop at a safe point, and Release
// it. RevokeReason tells why it was asked. Re-entrant holds share the
// channel. Only the lock table's leases (NewTable, lock sets) can be
// asked; for any other lock the channel is never closed.
func (k *Lock) Revoked() <-chan struct{} {
	if r, ok := k.h.(revocable); ok {
		return r.Revoked()
	}
	return nil
}

// RevokeReason returns the reason given by the request that the lock be
// released (see Revoked), or "" while none was made.
func (k *Lock) RevokeReason() string {
	if r, ok := k.h.(revocable); ok {
		return r.RevokeReason()
	}
	return ""
}

// SetValue stores value on the lock, for anyone to read without acquiring
// it (Table.Value, Table.List, the sqllock command's locks): which host
// holds it, since when, doing what. The value is fenced: it is written in
// one statement that succeeds only while this lock's lease is live, for
// its token, so a paused former holder never overwrites its successor's
// value, and a takeover (a new token) never shows an earlier holder's.
// Re-entrant holds share one value; the last SetValue wins.
//
// value is validated as ValidateValue says (ErrInvalidValue). SetValue
// returns ErrNotHeld after Release, ErrLockLost when the lease is no
// longer live, and an error wrapping ErrUnsupported for a lock that keeps
// no value: only the lock table's leases do (NewTable, lock sets), on a
// dialect that keeps them (not TiDB).
func (k *Lock) SetValue(ctx context.Context, value string) error {
	if err := ValidateValue(value); err != nil {
		return err
	}
	if k.values == nil {
		return fmt.Errorf("%w: a value on this lock (only the lock table's leases keep values)", ErrUnsupported)
	}
	k.mu.Lock()
	released := k.released
	k.mu.Unlock()
	if released {
		return ErrNotHeld
	}
	if err := k.Context().Err(); err != nil {
		return context.Cause(k.Context())
	}
	ok, err := k.values.SetValue(ctx, k.h.Ident(), value)
	switch {
	case err != nil:
		return fmt.Errorf("sqllock: set the value of %q: %w", k.Name(), err)
	case !ok:
		return ErrLockLost
	}
	return nil
}

// Downgrade turns a read/write lock's write hold (Acquire, TryAcquire, or
// a read upgraded with Upgrade) into a plain read hold, in one statement:
// the lease stays, with its token, holds and expiry, and goes on being
// renewed, so that no writer can enter in between, while readers waiting
// for the name are let in (unless another writer's intent keeps them out,
// as for any reader: see RWLock) and woken as by a release. Release ends
// the read hold as any other. The token keeps growing for the readers and
// writers granted after it, as before.
//
// It returns ErrNotHeld after Release, ErrLockLost when the lease is no
// longer live, and an error wrapping ErrUnsupported for a lock that is not
// a read/write lock's write hold, and for a re-entered one (an owner's
// several holds share one lease: release the others first). After an
// error wrapping ErrOutcomeUnknown the side is unknown: the handle changes
// sides no more, and Release ends it.
func (k *Lock) Downgrade(ctx context.Context) error { return downgrade(ctx, k) }

// Upgrade turns an upgradeable read hold (RWLock.AcquireUpgradeable) into
// the write hold once the other readers have left: it waits, woken by
// their releases as Acquire's waiters are, until ctx ends; then it returns
// an error wrapping ctx.Err() and the hold stays an upgradeable read. While
// it waits, it records an intent to write as a waiting writer does, so new
// plain readers queue behind it (writer preference); no writer can enter
// meanwhile, as the upgradeable read keeps writers out. The lease stays,
// with its token, holds and expiry, and goes on being renewed: the token
// exceeds every earlier writer's (writers were kept out since the grant),
// though not the tokens of readers granted beside it, who have all left
// when the write begins. Downgrade turns the write hold back into a plain
// read.
//
// It returns ErrNotHeld after Release, ErrLockLost when the lease is no
// longer live, and an error wrapping ErrUnsupported for a lock that is not
// a read/write lock's upgradeable read, and for a re-entered one. After an
// error (one wrapping ErrOutcomeUnknown, or ctx's end while an attempt
// ran) the hold may have become the writer all the same, which keeps
// everyone else out: Upgrade again to settle it, which returns at once if
// so.
func (k *Lock) Upgrade(ctx context.Context) error { return upgrade(ctx, k) }
