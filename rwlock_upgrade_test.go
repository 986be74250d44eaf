package sqllock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/internal/testutil"
)

// siblingRW returns a read/write locker on a pool of its own, as another
// process's.
func (e *env) siblingRW(t *testing.T, opts sqllock.LeaseOptions) *sqllock.RWLock {
	t.Helper()
	_, d := e.sibling(t, 0)
	l, err := sqllock.NewRWLock(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A downgraded writer reads on, with its token and lease: a reader of
// another process waiting is woken and let in; a writer waiting before
// the downgrade stays out until the readers leave.
func TestRWLockDowngrade(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const name = "dg"
		l := e.rwLocker(t, sqllock.LeaseOptions{})
		// An hour of backoff: only a wake-up lets the reader in soon.
		readers := e.siblingRW(t, sqllock.LeaseOptions{TTL: time.Hour, MaxBackoff: time.Hour})
		w := held(t).of(l.TryAcquire(ctx, name))
		gotR := make(chan *sqllock.Lock, 1)
		go func() {
			k, err := readers.AcquireShared(ctx, name)
			if err != nil {
				t.Errorf("reader: %v", err)
			}
			gotR <- k
		}()
		waitForWaiters(t, ctx, readers, name, 1)
		token := w.Token()
		if err := w.Downgrade(ctx); err != nil {
			t.Fatalf("Downgrade: %v", err)
		}
		if w.Token() != token || w.Context().Err() != nil {
			t.Fatalf("after Downgrade: token %d (want %d), context %v", w.Token(), token, w.Context().Err())
		}
		r := <-gotR
		if r == nil {
			t.FailNow()
		}
		if r.Token() <= token {
			t.Fatalf("reader's token %d, want > %d", r.Token(), token)
		}
		if err := w.Downgrade(ctx); !errors.Is(err, sqllock.ErrUnsupported) {
			t.Fatalf("second Downgrade: %v, want ErrUnsupported", err)
		}
		if err := w.Upgrade(ctx); !errors.Is(err, sqllock.ErrUnsupported) {
			t.Fatalf("Upgrade of a plain read: %v, want ErrUnsupported", err)
		}
		if _, err := l.TryAcquire(ctx, name); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("writer beside the downgraded reader: %v, want ErrLocked", err)
		}
		release(t, ctx, w, r)

		// A writer waiting when the holder downgrades does not get in
		// between, nor do new readers behind its intent.
		w = held(t).of(l.TryAcquire(ctx, name))
		gotW := acquireAsync(ctx, e.siblingRW(t, sqllock.LeaseOptions{}), name)
		waitForIntent(t, ctx, e, name)
		if err := w.Downgrade(ctx); err != nil {
			t.Fatalf("Downgrade beside a waiting writer: %v", err)
		}
		if _, err := l.TryAcquireShared(ctx, name); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("new reader behind the writer's intent: %v, want ErrLocked", err)
		}
		select {
		case <-gotW:
			t.Fatal("the waiting writer got in beside the downgraded reader")
		default:
		}
		release(t, ctx, w)
		w2 := <-gotW
		if w2 == nil {
			t.Fatal("writer failed")
		}
		if w2.Token() <= token {
			t.Fatalf("writer's token %d, want > %d", w2.Token(), token)
		}
		release(t, ctx, w2)
		if err := w2.Downgrade(ctx); !errors.Is(err, sqllock.ErrNotHeld) {
			t.Fatalf("Downgrade after Release: %v, want ErrNotHeld", err)
		}
	})
}

// Only a read/write lock's write hold downgrades, and only while it is
// not re-entered.
func TestRWLockDowngradeRefuses(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		tb, err := sqllock.NewTable(e.d, sqllock.TableOptions{})
		if err != nil {
			t.Fatal(err)
		}
		k := held(t).of(tb.TryAcquire(ctx, "table"))
		if err := k.Downgrade(ctx); !errors.Is(err, sqllock.ErrUnsupported) {
			t.Fatalf("Downgrade of a table lock: %v, want ErrUnsupported", err)
		}
		if err := k.Upgrade(ctx); !errors.Is(err, sqllock.ErrUnsupported) {
			t.Fatalf("Upgrade of a table lock: %v, want ErrUnsupported", err)
		}
		release(t, ctx, k)
		l := e.rwLocker(t, sqllock.LeaseOptions{})
		wctx := sqllock.WithOwner(ctx, "owner")
		w := held(t).of(l.TryAcquire(wctx, "re"))
		re := held(t).of(l.TryAcquire(wctx, "re"))
		if err := w.Downgrade(ctx); !errors.Is(err, sqllock.ErrUnsupported) {
			t.Fatalf("Downgrade of a re-entered hold: %v, want ErrUnsupported", err)
		}
		release(t, ctx, re)
		if err := re.Downgrade(ctx); !errors.Is(err, sqllock.ErrNotHeld) {
			t.Fatalf("Downgrade of a released re-entrant hold: %v, want ErrNotHeld", err)
		}
		if err := w.Downgrade(ctx); err != nil {
			t.Fatalf("Downgrade once the hold is no longer re-entered: %v", err)
		}
		release(t, ctx, w)
	})
}

// An upgradeable read shares the name with readers and keeps writers and
// other upgradeable readers out; Upgrade waits for the readers, keeping
// new ones out, and keeps the token; a cancelled Upgrade leaves the hold
// an upgradeable read, without an intent.
func TestRWLockUpgrade(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const name = "up"
		l := e.rwLocker(t, sqllock.LeaseOptions{})
		other := e.siblingRW(t, sqllock.LeaseOptions{})
		u := held(t).of(l.AcquireUpgradeable(ctx, name))
		r := held(t).of(other.TryAcquireShared(ctx, name))
		if _, err := other.TryAcquireUpgradeable(ctx, name); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("second upgradeable: %v, want ErrLocked", err)
		}
		if _, err := other.TryAcquire(ctx, name); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("writer beside the upgradeable: %v, want ErrLocked", err)
		}
		if _, err := other.TryAcquireUpgradeable(sqllock.WithOwner(ctx, r.Owner()), name); !errors.Is(err, sqllock.ErrUpgrade) {
			t.Fatalf("upgradeable by a plain reader's owner: %v, want ErrUpgrade", err)
		}
		if err := r.Upgrade(ctx); !errors.Is(err, sqllock.ErrUnsupported) {
			t.Fatalf("Upgrade of a plain read: %v, want ErrUnsupported", err)
		}
		// A cancelled upgrade withdraws its intent.
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- u.Upgrade(cctx) }()
		waitForIntent(t, ctx, e, name)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "sqllock: upgrade ") {
			t.Fatalf("cancelled Upgrade: %v, want context.Canceled, as an upgrade's", err)
		}
		if o := intentOwner(t, e, name); o != "" {
			t.Fatalf("intent of %q left after the upgrade gave up", o)
		}
		release(t, ctx, held(t).of(other.TryAcquireShared(ctx, name)))

		token := u.Token()
		go func() { done <- u.Upgrade(ctx) }()
		waitForIntent(t, ctx, e, name)
		if _, err := other.TryAcquireShared(ctx, name); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("new reader while the upgrade waits: %v, want ErrLocked", err)
		}
		select {
		case err := <-done:
			t.Fatalf("Upgrade beside a reader returned %v", err)
		default:
		}
		release(t, ctx, r)
		if err := <-done; err != nil {
			t.Fatalf("Upgrade: %v", err)
		}
		if u.Token() != token || u.Context().Err() != nil {
			t.Fatalf("after Upgrade: token %d (want %d), context %v", u.Token(), token, u.Context().Err())
		}
		if _, err := other.TryAcquireShared(ctx, name); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("reader beside the upgraded writer: %v, want ErrLocked", err)
		}
		if o := intentOwner(t, e, name); o != "" {
			t.Fatalf("intent of %q left after the upgrade", o)
		}
		if err := u.Upgrade(ctx); !errors.Is(err, sqllock.ErrUnsupported) {
			t.Fatalf("second Upgrade: %v, want ErrUnsupported", err)
		}
		if err := u.Downgrade(ctx); err != nil {
			t.Fatalf("Downgrade of the upgraded hold: %v", err)
		}
		r = held(t).of(other.TryAcquireShared(ctx, name))
		u2 := held(t).of(other.TryAcquireUpgradeable(ctx, name))
		release(t, ctx, u, r, u2)
	})
}

// A waiting AcquireUpgradeable is granted when the upgradeable reader
// ahead leaves, though writers of its locker wait for the name too, and
// beside plain readers.
func TestRWLockUpgradeableWaits(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const name = "upw"
		l := e.rwLocker(t, sqllock.LeaseOptions{})
		other := e.siblingRW(t, sqllock.LeaseOptions{})
		u := held(t).of(other.TryAcquireUpgradeable(ctx, name))
		r := held(t).of(other.TryAcquireShared(ctx, name))
		got := make(chan *sqllock.Lock, 1)
		go func() {
			k, err := l.AcquireUpgradeable(ctx, name)
			if err != nil {
				t.Errorf("AcquireUpgradeable: %v", err)
			}
			got <- k
		}()
		waitForWaiters(t, ctx, l, name, 1)
		tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := l.AcquireUpgradeable(tctx, name); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("third upgradeable: %v, want context.DeadlineExceeded", err)
		}
		release(t, ctx, u)
		u2 := <-got
		if u2 == nil {
			t.FailNow()
		}
		// The upgrade waits for the reader, not behind the locker's
		// writer waiting for the upgradeable read to leave.
		gotW := acquireAsync(ctx, l, name)
		waitForWaiters(t, ctx, l, name, 1)
		done := make(chan error, 1)
		go func() { done <- u2.Upgrade(ctx) }()
		waitForWaiters(t, ctx, l, name, 2)
		release(t, ctx, r)
		if err := <-done; err != nil {
			t.Fatalf("Upgrade: %v", err)
		}
		release(t, ctx, u2)
		if w := <-gotW; w == nil {
			t.Fatal("writer failed")
		} else {
			release(t, ctx, w)
		}
	})
}

// A waiting Upgrade is woken by the release of a reader of another
// process: its TTL and backoff are an hour, so only a wake-up lets it in
// before its deadline.
func TestRWLockUpgradeWokenByReaderElsewhere(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		const name = "upwake"
		l := e.rwLocker(t, sqllock.LeaseOptions{TTL: time.Hour, MaxBackoff: time.Hour})
		r := held(t).of(e.siblingRW(t, sqllock.LeaseOptions{}).TryAcquireShared(ctx, name))
		u := held(t).of(l.TryAcquireUpgradeable(ctx, name))
		uctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- u.Upgrade(uctx) }()
		testutil.Eventually(ctx, t, "the upgrade waiting, its room listening", func() bool {
			up, waiting := sqllock.RoomState(l, name)
			return up && waiting == 1
		})
		release(t, ctx, r)
		if err := <-done; err != nil {
			t.Fatalf("Upgrade after the reader left: %v", err)
		}
		release(t, ctx, u)
	})
}
