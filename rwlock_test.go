package sqllock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/testutil"
)

// rwLocker returns a read/write locker on e's dialect.
func (e *env) rwLocker(t *testing.T, opts sqllock.LeaseOptions) *sqllock.RWLock {
	t.Helper()
	l, err := sqllock.NewRWLock(e.d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// held(t).of(l.TryAcquire(...)) is the lock acquired, or fails t.
func held(t *testing.T) heldT { return heldT{t} }

type heldT struct{ t *testing.T }

func (h heldT) of(k *sqllock.Lock, err error) *sqllock.Lock {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
	return k
}

func release(t *testing.T, ctx context.Context, ks ...*sqllock.Lock) {
	t.Helper()
	for _, k := range ks {
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRWLockReadersShareWriterExcludes(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.rwLocker(t, sqllock.LeaseOptions{})
		r1 := held(t).of(l.TryAcquireShared(ctx, "doc"))
		r2 := held(t).of(l.TryAcquireShared(ctx, "doc"))
		if r2.Token() <= r1.Token() {
			t.Fatalf("second reader's token %d, want > %d", r2.Token(), r1.Token())
		}
		if _, err := l.TryAcquire(ctx, "doc"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("writer beside readers: got %v, want ErrLocked", err)
		}
		if ls, err := l.List(ctx); err != nil || len(ls) != 2 || ls[0].Name != "doc" || ls[1].Name != "doc" {
			t.Fatalf("List: %+v, %v, want the two readers", ls, err)
		}
		release(t, ctx, r1)
		if _, err := l.TryAcquire(ctx, "doc"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("writer beside a reader: got %v, want ErrLocked", err)
		}
		release(t, ctx, r2)
		w := held(t).of(l.TryAcquire(ctx, "doc"))
		if w.Token() <= r2.Token() {
			t.Fatalf("writer's token %d, want > %d", w.Token(), r2.Token())
		}
		if _, err := l.TryAcquireShared(ctx, "doc"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("reader beside a writer: got %v, want ErrLocked", err)
		}
		if _, err := l.TryAcquire(ctx, "doc"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("second writer: got %v, want ErrLocked", err)
		}
		// Another name is independent.
		other := held(t).of(l.TryAcquire(ctx, "doc2"))
		release(t, ctx, w, other)
		r3 := held(t).of(l.TryAcquireShared(ctx, "doc"))
		if r3.Token() <= w.Token() {
			t.Fatalf("reader after the writer: token %d, want > %d", r3.Token(), w.Token())
		}
		release(t, ctx, r3)
	})
}

func TestRWLockReentrancy(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.rwLocker(t, sqllock.LeaseOptions{})
		rctx := sqllock.WithOwner(ctx, "reader-1")
		r1 := held(t).of(l.TryAcquireShared(rctx, "res"))
		r2 := held(t).of(l.AcquireShared(rctx, "res"))
		if r1.Token() != r2.Token() {
			t.Fatalf("re-entered read: token %d, want %d", r2.Token(), r1.Token())
		}
		if _, err := l.TryAcquire(rctx, "res"); !errors.Is(err, sqllock.ErrUpgrade) {
			t.Fatalf("write while holding read (try): got %v, want ErrUpgrade", err)
		}
		if _, err := l.Acquire(rctx, "res"); !errors.Is(err, sqllock.ErrUpgrade) {
			t.Fatalf("write while holding read: got %v, want ErrUpgrade", err)
		}
		release(t, ctx, r1, r2)

		wctx := sqllock.WithOwner(ctx, "writer-1")
		w1 := held(t).of(l.TryAcquire(wctx, "res"))
		w2 := held(t).of(l.Acquire(wctx, "res"))
		rw := held(t).of(l.TryAcquireShared(wctx, "res"))
		if w2.Token() != w1.Token() || rw.Token() != w1.Token() {
			t.Fatalf("re-entered write: tokens %d, %d, want %d", w2.Token(), rw.Token(), w1.Token())
		}
		release(t, ctx, w1, w2)
		if _, err := l.TryAcquireShared(ctx, "res"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("reader while the writer keeps a read hold: got %v, want ErrLocked", err)
		}
		release(t, ctx, rw)
		release(t, ctx, held(t).of(l.TryAcquireShared(ctx, "res")))
	})
}

// intentOwner reads the writer intent recorded for name.
func intentOwner(t *testing.T, e *env, name string) string {
	t.Helper()
	var owner []byte
	if err := e.db.QueryRowContext(ctxT(t), e.q("SELECT intent_owner FROM {sqllock_rwlock_heads} WHERE name = ?"), name).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	return string(owner)
}

// waitForIntent waits until a writer's intent on name is recorded. It polls
// the database, a condition the test can observe, bounded by the test's
// context.
func waitForIntent(t *testing.T, ctx context.Context, e *env, name string) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for intentOwner(t, e, name) == "" {
		select {
		case <-ctx.Done():
			t.Fatal("no writer intent recorded")
		case <-tick.C:
		}
	}
}

// A waiting writer keeps new readers out, and gets the lock when the
// readers in leave.
func TestRWLockWaitingWriterBlocksNewReaders(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.rwLocker(t, sqllock.LeaseOptions{})
		r := held(t).of(l.TryAcquireShared(ctx, "table"))
		got := make(chan *sqllock.Lock, 1)
		go func() {
			w, err := l.Acquire(sqllock.WithOwner(ctx, "writer"), "table")
			if err != nil {
				t.Error(err)
			}
			got <- w
		}()
		waitForIntent(t, ctx, e, "table")
		other := e.rwLocker(t, sqllock.LeaseOptions{})
		if _, err := other.TryAcquireShared(ctx, "table"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("new reader while a writer waits: got %v, want ErrLocked", err)
		}
		// The reader in re-enters all the same: it must be able to finish.
		re := held(t).of(l.TryAcquireShared(sqllock.WithOwner(ctx, r.Owner()), "table"))
		release(t, ctx, re, r)
		w := <-got
		if w == nil {
			return
		}
		if w.Token() <= r.Token() {
			t.Fatalf("writer's token %d, want > %d", w.Token(), r.Token())
		}
		if o := intentOwner(t, e, "table"); o != "" {
			t.Fatalf("intent of %q left after the writer's grant", o)
		}
		release(t, ctx, w)
		release(t, ctx, held(t).of(other.TryAcquireShared(ctx, "table")))
	})
}

// A writer that gives up withdraws its intent: readers come in again.
func TestRWLockWriterWithdrawsIntent(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.rwLocker(t, sqllock.LeaseOptions{})
		r := held(t).of(l.TryAcquireShared(ctx, "w"))
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := l.Acquire(wctx, "w")
			done <- err
		}()
		waitForIntent(t, ctx, e, "w")
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled writer: got %v, want context.Canceled", err)
		}
		if o := intentOwner(t, e, "w"); o != "" {
			t.Fatalf("intent of %q left after the writer gave up", o)
		}
		release(t, ctx, held(t).of(l.TryAcquireShared(ctx, "w")), r)
	})
}

// A crashed reader's lease ends with its TTL; a crashed waiting writer's
// intent too.
func TestRWLockCrashedHolderExpires(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		rw := testutil.Tables(t, e.d).RWLocks
		// A reader that nobody renews, and a writer's intent nobody
		// refreshes.
		g, err := rw.Acquire(ctx, dialect.RWAcquireParams{Name: "c", Owner: "crashed-reader", TTL: 3600e9, Shared: true})
		if err != nil || g.Token == 0 {
			t.Fatalf("grant: %+v, %v", g, err)
		}
		g2, err := rw.Acquire(ctx, dialect.RWAcquireParams{Name: "c", Owner: "crashed-writer", TTL: 3600e9, Wait: true})
		if err != nil || g2.Token != 0 || g2.Left <= 0 {
			t.Fatalf("refused writer: %+v, %v", g2, err)
		}
		l := e.rwLocker(t, sqllock.LeaseOptions{})
		if _, err := l.TryAcquireShared(ctx, "c"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("reader behind a live intent: got %v, want ErrLocked", err)
		}
		past := map[string]string{
			"postgres": "now() - INTERVAL '1 second'",
			"mysql":    "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND",
			"sqlite":   "CAST(unixepoch('subsec') * 1000000 AS INTEGER) - 1000000",
		}[e.kind]
		if _, err := e.db.ExecContext(ctx, e.q("UPDATE {sqllock_rwlock_heads} SET intent_expires_at = "+past+" WHERE name = ?"), "c"); err != nil {
			t.Fatal(err)
		}
		r := held(t).of(l.TryAcquireShared(ctx, "c"))
		if _, err := l.TryAcquire(ctx, "c"); !errors.Is(err, sqllock.ErrLocked) {
			t.Fatalf("writer beside readers: got %v, want ErrLocked", err)
		}
		release(t, ctx, r)
		if _, err := e.db.ExecContext(ctx, e.q("UPDATE {sqllock_rwlock_holders} SET expires_at = "+past+" WHERE name = ?"), "c"); err != nil {
			t.Fatal(err)
		}
		w := held(t).of(l.TryAcquire(ctx, "c"))
		if w.Token() <= g.Token {
			t.Fatalf("writer's token %d, want > %d", w.Token(), g.Token)
		}
		if ok, err := testutil.Renewed(rw.RenewMany(ctx, []dialect.Lease{{Name: "c", Owner: "crashed-reader", Token: g.Token}}, 3600e9)); err != nil || ok[0] {
			t.Fatalf("renewal of the expired reader: %v, %v", ok, err)
		}
		release(t, ctx, w)
		if n, err := e.d.Reap(ctx, dialect.ReapParams{Limit: 100}); err != nil || n == 0 {
			t.Fatalf("reap: %d, %v", n, err)
		}
	})
}

func TestRWLockGuardAndDo(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.rwLocker(t, sqllock.LeaseOptions{})
		r := held(t).of(l.TryAcquireShared(ctx, "g"))
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Guard(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		release(t, ctx, r)
		ran := false
		err = sqllock.Do(ctx, l, "g", func(ctx context.Context) error {
			ran = true
			if _, err := l.TryAcquireShared(context.WithoutCancel(ctx), "g"); !errors.Is(err, sqllock.ErrLocked) {
				t.Errorf("reader under Do: got %v, want ErrLocked", err)
			}
			return nil
		})
		if err != nil || !ran {
			t.Fatalf("Do: ran %v, %v", ran, err)
		}
	})
}

// A waiting reader gets the lock when the writer leaves.
func TestRWLockReaderWaitsForWriter(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.rwLocker(t, sqllock.LeaseOptions{})
		w := held(t).of(l.TryAcquire(ctx, "q"))
		got := make(chan *sqllock.Lock, 2)
		for range 2 {
			go func() {
				r, err := e.rwLocker(t, sqllock.LeaseOptions{}).AcquireShared(ctx, "q")
				if err != nil {
					t.Error(err)
				}
				got <- r
			}()
		}
		release(t, ctx, w)
		for range 2 {
			if r := <-got; r != nil {
				if r.Token() <= w.Token() {
					t.Errorf("reader's token %d, want > %d", r.Token(), w.Token())
				}
				release(t, ctx, r)
			}
		}
	})
}

func TestNewRWLockRefuses(t *testing.T) {
	t.Parallel()
	if _, err := sqllock.NewRWLock(nil, sqllock.LeaseOptions{}); !errors.Is(err, sqllock.ErrNilDB) {
		t.Fatalf("nil dialect: %v", err)
	}
	d, err := postgres.New(nonNilDB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqllock.NewRWLock(plainDialect{d}, sqllock.LeaseOptions{}); !errors.Is(err, sqllock.ErrUnsupported) {
		t.Fatalf("a dialect without read/write locks: %v", err)
	}
}

// Through PgBouncer in both pool modes: readers share, a writer waits for
// them (keeping new readers out) and gets the lock when they leave, without
// session state. Behind transaction pooling no announcement arrives, so the
// writer polls, and the lease is a minute long: a hand-off well under it
// shows the writer did not sleep on a lease it believed announced.
func TestRWLockThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range dbtest.PoolModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			var opts []postgres.Option
			if mode == dbtest.Transaction {
				opts = append(opts, postgres.WithPooler())
			}
			d := pgBouncerDialect(t, mode, opts...)
			ctx := ctxT(t)
			l, err := sqllock.NewRWLock(d, sqllock.LeaseOptions{TTL: time.Minute, MaxBackoff: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			r1 := held(t).of(l.TryAcquireShared(ctx, "pb"))
			r2 := held(t).of(l.TryAcquireShared(ctx, "pb"))
			got := make(chan *sqllock.Lock, 1)
			go func() {
				w, err := l.Acquire(ctx, "pb")
				if err != nil {
					t.Error(err)
				}
				got <- w
			}()
			// The test's own look at the intent goes to the server
			// directly: pgx prepares it, which a transaction pooler breaks.
			direct := dbtest.OpenPostgres(t, dbtest.PostgresURL(t))
			e := &env{kind: "postgres", db: direct, d: d, ns: d.Schema()}
			waitForIntent(t, ctx, e, "pb")
			if _, err := l.TryAcquireShared(ctx, "pb"); !errors.Is(err, sqllock.ErrLocked) {
				t.Fatalf("new reader while a writer waits: got %v, want ErrLocked", err)
			}
			released := time.Now()
			release(t, ctx, r1, r2)
			w := <-got
			if w == nil {
				return
			}
			if took := time.Since(released); took > 15*time.Second {
				t.Fatalf("the writer got the lock %v after the readers left", took)
			}
			if w.Token() <= r2.Token() {
				t.Fatalf("writer's token %d, want > %d", w.Token(), r2.Token())
			}
			release(t, ctx, w)
		})
	}
}

// waitForWaiters waits until n Acquire calls wait in l's waiting room for
// name, bounded by ctx.
func waitForWaiters(t *testing.T, ctx context.Context, l sqllock.Locker, name string, n int) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, waiting := sqllock.RoomState(l, name); waiting >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("fewer than %d waiters for %q", n, name)
		case <-tick.C:
		}
	}
}

// A reader and a writer waiting on one RWLock are both served once the
// holder leaves: the writer first (its intent keeps the reader out), then
// the reader, each without waiting out a lease. The TTL is an hour, so a
// waiter stuck behind the other (the writer queued behind the reader its
// own intent keeps out) would hold the test until its deadline.
func TestRWLockQueuedReaderAndWriterHandOff(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.rwLocker(t, sqllock.LeaseOptions{TTL: time.Hour, RenewInterval: 20 * time.Minute})
		w1 := held(t).of(l.TryAcquire(ctx, "n"))
		type result struct {
			k      *sqllock.Lock
			err    error
			shared bool
		}
		got := make(chan result, 2)
		go func() {
			k, err := l.AcquireShared(ctx, "n")
			got <- result{k, err, true}
		}()
		waitForWaiters(t, ctx, l, "n", 1)
		go func() {
			k, err := l.Acquire(ctx, "n")
			got <- result{k, err, false}
		}()
		waitForIntent(t, ctx, e, "n")
		waitForWaiters(t, ctx, l, "n", 2)
		release(t, ctx, w1)
		first := <-got
		if first.err != nil {
			t.Fatal(first.err)
		}
		if first.shared {
			t.Fatalf("the reader was granted before the waiting writer")
		}
		release(t, ctx, first.k)
		second := <-got
		if second.err != nil {
			t.Fatal(second.err)
		}
		release(t, ctx, second.k)
	})
}

// A reader of another process, waiting behind a writer's intent and then
// its lease, is woken by the writer's release, not at its next poll: its
// polling is slowed to an hour, and the leases and intents last an hour,
// so only the release's announcement wakes it within the test. The writer
// waits behind a reader that crashed (nobody renews its lease), whose lease
// is then made to end: nothing announces that, so every announcement the
// reader's room hears after the writer's grant is the writer's release.
// (The test's name is short: on SQLite the wake-up sockets live beside the
// database file, in the test's temporary directory, and a socket's path
// has a length limit.)
func TestRWLockWakesReadersElsewhere(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		if cat := e.d.Catalogue(); cat.Notifier == nil || !cat.RWLocks.Announces {
			t.Fatalf("%s: the releases of read/write locks are not announced: readers of other processes poll", e.kind)
		}
		const name = "doc"
		rw := testutil.Tables(t, e.d).RWLocks
		if g, err := rw.Acquire(ctx, dialect.RWAcquireParams{Name: name, Owner: "crashed-reader", TTL: time.Hour, Shared: true}); err != nil || g.Token == 0 {
			t.Fatalf("grant: %+v, %v", g, err)
		}
		open := func(opts sqllock.LeaseOptions) *sqllock.RWLock {
			_, d := e.sibling(t, 0)
			l, err := sqllock.NewRWLock(d, opts)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		// The writer retries every 100 ms, to find the crashed reader gone.
		writers := open(sqllock.LeaseOptions{TTL: time.Hour, RenewInterval: 100 * time.Millisecond})
		readers := open(sqllock.LeaseOptions{TTL: time.Hour, MaxBackoff: time.Hour})
		probe := sqllock.ProbeRoom(readers)
		gotW := acquireAsync(ctx, writers, name)
		waitForWaiters(t, ctx, writers, name, 1) // refused once: its intent is recorded
		gotR := make(chan *sqllock.Lock, 1)
		go func() {
			k, err := readers.AcquireShared(ctx, name)
			if err != nil {
				t.Errorf("reader: %v", err)
			}
			gotR <- k
		}()
		testutil.Eventually(ctx, t, "the reader waiting, its room listening", func() bool {
			up, waiting := sqllock.RoomState(readers, name)
			return up && waiting == 1
		})
		past := map[string]string{
			"postgres": "now() - INTERVAL '1 second'",
			"mysql":    "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND",
			"sqlite":   "CAST(unixepoch('subsec') * 1000000 AS INTEGER) - 1000000",
		}[e.kind]
		if _, err := e.db.ExecContext(ctx, e.q("UPDATE {sqllock_rwlock_holders} SET expires_at = "+past+" WHERE name = ? AND owner = 'crashed-reader'"), name); err != nil {
			t.Fatal(err)
		}
		w := <-gotW
		if w == nil {
			t.Fatal("writer failed")
		}
		select {
		case <-gotR:
			t.Fatal("reader granted beside the writer")
		default:
		}
		before := probe.Notified(name)
		release(t, ctx, w)
		r := <-gotR
		if r == nil {
			t.Fatal("reader failed")
		}
		// Its backoff is an hour: the grant came of a wake-up. The
		// release's notification may reach the room a moment after a
		// wake-up of another cause (a spurious one is allowed: it costs
		// an acquire attempt), but it must arrive.
		testutil.Eventually(ctx, t, "the reader's room hearing the writer's release", func() bool {
			return probe.Notified(name) > before
		})
		release(t, ctx, r)
	})
}
