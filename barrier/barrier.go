// Package barrier offers double barriers on the database that holds
// sqllock's locks: N processes enter a barrier and wait until all N have
// entered, do their work, then leave it and wait until all have left
// (Curator's DistributedDoubleBarrier, etcd's double barrier recipe).
//
// A member's presence is a lease, renewed in the background while it is
// inside: a member that dies ends by its TTL, and the members waiting for
// it are told (ErrMemberLost) rather than left waiting forever.
package barrier

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// MaxSize is the largest size New accepts: sizes are 32-bit on every
// database's statements.
const MaxSize = math.MaxInt32

// Errors of barrier operations. Test for them with errors.Is.
var (
	// ErrSizeMismatch means Enter found the barrier's current round
	// with members that entered it with another size.
	ErrSizeMismatch = errors.New("sqllock: barrier in use with another size")
	// ErrMemberLost means another member's lease ended (its process
	// died, or stopped renewing for longer than the TTL) while this one
	// waited to leave, or in a full round: the round cannot complete.
	// A member that loses its own lease is told with sqllock.ErrLockLost
	// instead.
	ErrMemberLost = errors.New("sqllock: a barrier member's lease ended")
)

// maxConflicts is how many times in a row Enter runs its entry again
// after the server rolled it back (sqllock.ErrTransient).
const maxConflicts = 3

// Options configure New. The zero value of each field selects its
// default.
type Options struct {
	// TTL is the lease of a member's presence, counted on the database
	// clock from its entry and each renewal; a member renews it every
	// TTL/3 from its entry until Leave returns. Default 30s; at least
	// 10ms.
	TTL time.Duration
	// MaxBackoff caps the wait between two reads of the barrier's members
	// in Enter and Leave: where the database announces nothing (MySQL,
	// MariaDB, SQLite), or while the listening connection is down, a
	// waiter reads them at least this often. Default 500ms; at least 1ms.
	MaxBackoff time.Duration
}

// Barrier is a double barrier of a size, under a name, in the database's
// barrier tables. Each process that takes part makes a Barrier with the
// same name and size and calls Enter, which returns once size members
// have entered (the round is full); each member then calls Leave, which
// returns once every member of the round has left. The next Enter after
// a round is over starts a new round, which may have another size.
//
// Every member is a lease: it renews its row every TTL/3 while inside.
// While a round is not yet full, a member whose lease ended is dropped
// from it by the next member to enter, and the others go on waiting for
// size live members. Once the round is full, a member whose lease ended
// is lost: every member waiting in Leave (or in an Enter that had
// already filled) fails with an error wrapping ErrMemberLost, and the
// round is over once its live members have left. A member that loses its
// own lease (its Context ends with sqllock.ErrLockLost) fails with an
// error wrapping sqllock.ErrLockLost.
//
// An Enter on a name whose round is full and not over yet (some of its
// members have not left) waits for that round to end, and joins the next,
// whatever its size. An Enter with another size than the members of a
// round that is not full is ErrSizeMismatch.
//
// Waiters are woken, not left to poll: on PostgreSQL the entry that fills
// a round and the leave of its last member inside are announced with
// NOTIFY; those of the same Barrier wake its own waiters on every
// database. Where the database announces nothing (MySQL, MariaDB,
// SQLite), and while PostgreSQL's listening connection is down, waiters
// also read the members with a jittered backoff up to MaxBackoff. TiDB's
// dialect has no barriers.
//
// A Barrier is safe for concurrent use: each Enter is a member of its
// own.
type Barrier struct {
	barriers   sqlrun.BarrierTable
	notifier   dialect.Notifier // nil: entries and leaves are not announced
	name       string
	size       int
	ttl        time.Duration
	maxBackoff time.Duration
	prefix     string        // of the members' owners
	n          atomic.Uint64 // members made

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when a member of this Barrier fills, leaves or quits
}

// New returns the barrier name of size members (1 to MaxSize) on d. The
// schema must have been migrated (see sqllock.Migrate). A bad name wraps
// sqllock.ErrInvalidName; a bad size or option sqllock.ErrInvalidOptions;
// a dialect without barriers is sqllock.ErrUnsupported (see
// dialect.Catalogue).
func New(d dialect.Dialect, name string, size int, opts Options) (*Barrier, error) {
	if d == nil || d.DB() == nil {
		return nil, sqllock.ErrNilDB
	}
	if err := sqllock.ValidateName(name); err != nil {
		return nil, err
	}
	if size < 1 || size > MaxSize {
		return nil, fmt.Errorf("%w: barrier size %d: want 1 to %d (MaxSize)", sqllock.ErrInvalidOptions, size, MaxSize)
	}
	if opts.TTL < 0 || (opts.TTL > 0 && opts.TTL < 10*time.Millisecond) {
		return nil, fmt.Errorf("%w: barrier TTL %v: want 0 (default) or at least 10ms", sqllock.ErrInvalidOptions, opts.TTL)
	}
	if opts.MaxBackoff < 0 || (opts.MaxBackoff > 0 && opts.MaxBackoff < time.Millisecond) {
		return nil, fmt.Errorf("%w: barrier MaxBackoff %v: want 0 (default) or at least 1ms", sqllock.ErrInvalidOptions, opts.MaxBackoff)
	}
	tb, err := sqlrun.Open(d)
	if err != nil {
		return nil, err
	}
	cat := d.Catalogue()
	if tb.Barriers == nil {
		return nil, cat.Unsupported(d.Name(), "Barriers")
	}
	b := &Barrier{barriers: tb.Barriers, name: name, size: size, ttl: opts.TTL, maxBackoff: opts.MaxBackoff,
		prefix: ownerPrefix(), changed: make(chan struct{})}
	if b.ttl == 0 {
		b.ttl = 30 * time.Second
	}
	if b.maxBackoff == 0 {
		b.maxBackoff = 500 * time.Millisecond
	}
	if tb.Barriers.Announces() {
		b.notifier = cat.Notifier
	}
	return b, nil
}

// ownerPrefix is the start of a Barrier's member owners: the host, the
// process and a random part, so that members of every process differ.
func ownerPrefix() string {
	host, _ := os.Hostname()
	if len(host) > 64 {
		host = host[:64]
	}
	var r [6]byte
	_, _ = crand.Read(r[:])
	return "barrier:" + host + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(r[:]) + ":"
}

// newOwner returns a new member owner, unique to the call.
func (b *Barrier) newOwner() string { return b.prefix + strconv.FormatUint(b.n.Add(1), 36) }

// Name returns the barrier's name.
func (b *Barrier) Name() string { return b.name }

// Size returns the number of members a round of the barrier waits for.
func (b *Barrier) Size() int { return b.size }

// kick wakes the waiters of b.
func (b *Barrier) kick() {
	b.mu.Lock()
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// Enter makes the caller a member of the barrier's round and returns
// once the round is full: size members, in any processes, have entered.
// The member renews its lease in the background until its Leave returns;
// call Leave once the work between the barriers is done.
//
// A read of the members that fails while Enter waits is made again at
// its backoff as long as the member's lease is renewed: a lasting outage
// ends the lease within the TTL, and Enter then fails.
//
// If the round is full and not over, Enter first waits for it to end. It
// fails with an error wrapping ErrSizeMismatch when the round, not full,
// has members of another size, with one wrapping sqllock.ErrLockLost when its own
// lease ended while it waited (a pause longer than the TTL), and with one
// wrapping ctx.Err() when ctx ends first. An Enter that fails withdraws
// its member: if the round filled meanwhile, that counts as its leave.
func (b *Barrier) Enter(ctx context.Context) (*Member, error) {
	w := b.watch()
	defer w.stop()
	owner := b.newOwner()
	backoff := time.Millisecond
	var e sqlrun.BarrierEntry
	for conflicts := 0; ; {
		changed := b.waitChan()
		var err error
		e, err = b.barriers.Enter(ctx, b.name, owner, b.size, b.ttl)
		if errors.Is(err, sqllock.ErrTransient) && conflicts < maxConflicts {
			// Rolled back by the server (a deadlock between entries of
			// a new name, say): nothing of it remains.
			conflicts++
			continue
		}
		if err != nil {
			// The entry may have committed unseen (a cancel raced with
			// its commit): withdraw it.
			b.withdraw(ctx, owner)
			return nil, b.ctxErr(ctx, err)
		}
		if e.Joined {
			break
		}
		if !e.Busy {
			return nil, fmt.Errorf("%w: barrier %q has members of size %d, not %d", ErrSizeMismatch, b.name, e.Size, b.size)
		}
		// The round is full and not over yet.
		if err := b.sleep(ctx, w, changed, &backoff); err != nil {
			return nil, err
		}
	}
	m := b.start(owner)
	if e.Filled {
		b.kick()
		return m, nil
	}
	backoff = time.Millisecond
	for {
		changed := b.waitChan()
		mem, err := b.barriers.Members(ctx, b.name, owner)
		switch {
		case ctx.Err() != nil:
			err = b.ctxErr(ctx, err)
		case m.ctx.Err() != nil:
			err = m.lost()
		case err != nil:
			// A failed read, while renewals keep the lease: read again.
			err = b.sleep(ctx, w, changed, &backoff)
		case !mem.Mine:
			err = m.lost()
		case mem.Filled:
			return m, nil
		default:
			err = b.sleep(ctx, w, changed, &backoff)
		}
		if err != nil {
			m.quit(ctx)
			return nil, err
		}
	}
}

// waitChan returns the channel that the next fill, leave or quit of a
// member of b closes. Take it before a read: a change after the read
// closes it.
func (b *Barrier) waitChan() chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// ctxErr is err, or, when ctx ended, an error wrapping ctx's.
func (b *Barrier) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("barrier %q: %w", b.name, ctx.Err())
	}
	return err
}

// sleep waits for a wake-up (changed, w's) or a jittered backoff, which
// it doubles up to b.maxBackoff, or until ctx ends (then it returns an
// error wrapping ctx.Err()).
func (b *Barrier) sleep(ctx context.Context, w *waiter, changed chan struct{}, backoff *time.Duration) error {
	*backoff = min(2**backoff, b.maxBackoff)
	timer := time.NewTimer(*backoff/2 + rand.N(*backoff/2+1))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("barrier %q: %w", b.name, ctx.Err())
	case <-changed:
	case <-w.wake:
	case <-timer.C:
	}
	return nil
}

// Member is a process's membership of a barrier's round, from Enter
// until its Leave returns. Its lease is renewed in the background
// meanwhile. A Member is safe for concurrent use.
type Member struct {
	b      *Barrier
	owner  string
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the renewal has stopped

	mu   sync.Mutex
	left bool // Leave was called
}

// start starts the membership of owner, renewed until it ends.
func (b *Barrier) start(owner string) *Member {
	ctx, cancel := context.WithCancelCause(context.Background())
	m := &Member{b: b, owner: owner, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go m.renew()
	return m
}

// Context returns a context that ends when the membership does: with
// cause sqllock.ErrLockLost when the member's lease ended (its renewal
// found no live row, or failed for longer than the TTL), and with
// context.Canceled once Leave has returned.
func (m *Member) Context() context.Context { return m.ctx }

// Owner returns the member's owner: its row's, unique to this Enter.
func (m *Member) Owner() string { return m.owner }

// renew renews the lease every TTL/3 until the membership ends; it ends
// it, with cause sqllock.ErrLockLost, when the lease cannot be trusted
// any more: a renewal found no live row, or none succeeded within the
// TTL of the start of the last one that did.
func (m *Member) renew() {
	defer close(m.done)
	interval := m.b.ttl / 3
	trusted := time.Now() // the start of the last successful renewal (or of the entry, before it)
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(m.ctx, interval)
		ok, err := m.b.barriers.Renew(rctx, m.b.name, m.owner, m.b.ttl)
		cancel()
		switch {
		case m.ctx.Err() != nil:
			return
		case err == nil && !ok:
			m.cancel(fmt.Errorf("barrier %q: the member's lease ended: %w", m.b.name, sqllock.ErrLockLost))
			return
		case err == nil:
			trusted = start
		case time.Since(trusted) >= m.b.ttl:
			m.cancel(fmt.Errorf("barrier %q: the member's lease could not be renewed within its TTL: %w: %w", m.b.name, sqllock.ErrLockLost, err))
			return
		}
		timer.Reset(interval)
	}
}

// lost returns the error of a member whose own lease ended.
func (m *Member) lost() error {
	if err := context.Cause(m.ctx); err != nil && errors.Is(err, sqllock.ErrLockLost) {
		return err
	}
	return fmt.Errorf("barrier %q: the member's lease ended: %w", m.b.name, sqllock.ErrLockLost)
}

// quit ends the membership: it stops the renewal and deletes the
// member's row.
func (m *Member) quit(ctx context.Context) {
	m.cancel(context.Canceled)
	<-m.done
	m.b.withdraw(ctx, m.owner)
}

// withdraw deletes owner's member row, on a context of its own (bounded)
// so that an ended ctx still cleans up, and wakes b's waiters.
func (b *Barrier) withdraw(ctx context.Context, owner string) {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = b.barriers.Quit(qctx, b.name, owner) // a row left behind expires, and a later Enter drops it
	b.kick()
}

// Leave leaves the barrier and returns once every member of the round has
// left: nil then. It fails with an error wrapping ErrMemberLost when
// another member's lease ended before it left, with one wrapping
// sqllock.ErrLockLost when this member's did, and with one wrapping
// ctx.Err() when ctx ends first; in each case the member has left, and
// its lease is no longer renewed. A second Leave is sqllock.ErrNotHeld.
// An error in marking the member leaving (the database did not answer)
// leaves it inside: Leave may be called again. A read of the members
// that fails while Leave waits is made again, as in Enter.
func (m *Member) Leave(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.left {
		return fmt.Errorf("barrier %q: the member has left: %w", m.b.name, sqllock.ErrNotHeld)
	}
	b := m.b
	w := b.watch()
	defer w.stop()
	ok, err := b.barriers.Leave(ctx, b.name, m.owner)
	if err != nil {
		if m.ctx.Err() == nil {
			return b.ctxErr(ctx, err)
		}
		err = m.lost()
	} else if !ok {
		err = m.lost()
	} else {
		b.kick()
	}
	backoff := time.Millisecond
	for err == nil {
		changed := b.waitChan()
		mem, rerr := b.barriers.Members(ctx, b.name, m.owner)
		switch {
		case ctx.Err() != nil:
			err = b.ctxErr(ctx, rerr)
		case m.ctx.Err() != nil:
			err = m.lost()
		case rerr != nil:
			// A failed read, while renewals keep the lease: read again.
			err = b.sleep(ctx, w, changed, &backoff)
		case !mem.Mine:
			err = m.lost()
		case mem.Dead > 0:
			err = fmt.Errorf("barrier %q: %d member(s) lost: %w", b.name, mem.Dead, ErrMemberLost)
		case mem.Inside == 0:
			m.left = true
			m.quit(ctx)
			return nil
		default:
			err = b.sleep(ctx, w, changed, &backoff)
		}
	}
	m.left = true
	m.quit(ctx)
	return err
}

// watch subscribes a waiter to the announcements of b's name, where the
// database announces them.
func (b *Barrier) watch() *waiter {
	w := &waiter{name: b.name, wake: make(chan struct{}, 1)}
	if b.notifier != nil {
		w.sub = b.notifier.Subscribe(w)
		w.sub.Watch(b.name)
	}
	return w
}

// waiter is one Enter or Leave call: a dialect.Subscriber that wakes it
// on announcements of its name, and when a listening connection becomes
// ready (an announcement may have gone by unheard).
type waiter struct {
	name string
	wake chan struct{} // buffered 1: a pending wake-up
	sub  dialect.Subscription
}

// stop ends w's subscription.
func (w *waiter) stop() {
	if w.sub != nil {
		w.sub.Unsubscribe()
	}
}

func (w *waiter) kick() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Ready implements dialect.Subscriber.
func (w *waiter) Ready() { w.kick() }

// Released implements dialect.Subscriber.
func (w *waiter) Released(name string) {
	if name == w.name {
		w.kick()
	}
}

// Lost implements dialect.Subscriber: the waiter reads the members at its
// backoff until the next Ready.
func (w *waiter) Lost(error) {}
