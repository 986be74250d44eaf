package sqllock

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/engine"
	"github.com/sqllock/sqllock/observe"
)

// PessimisticOptions configure NewPessimistic. The zero value of each field
// selects its default.
//
// There is no minimum hold (MinHold): a pessimistic lock is the row
// lock of a transaction, and ends when the transaction does. For a job that
// must keep its lock after it ended, use NewTable or NewOptimistic.
type PessimisticOptions struct {
	// KeepAlive is how often a held lock's connection is checked with a
	// ping, so that a dead connection is noticed (the lock's context is then
	// cancelled with ErrLockLost) and a healthy one is not closed by
	// idle_in_transaction_session_timeout (PostgreSQL) or wait_timeout
	// (MySQL) set below it. Default 1s. On MySQL and MariaDB, read every
	// result of the lock's Tx to its end within KeepAlive: a ping sent
	// while rows are still unread breaks the connection (PostgreSQL's pings
	// wait for a busy connection instead).
	KeepAlive time.Duration
	// Logger receives lost-lock reports, and at debug level every
	// acquisition and release. Default: none.
	Logger *slog.Logger
	// Observer receives lock events through the interfaces of package
	// observe it implements: AcquiredObserver, ReleasedObserver,
	// LostObserver, AcquireTracer, ReleaseTracer, GuardTracer and
	// WaitingObserver. Default: none.
	Observer observe.Observer
}

const defaultKeepAlive = time.Second

func (o PessimisticOptions) withDefaults() (PessimisticOptions, error) {
	if o.KeepAlive < 0 {
		return o, fmt.Errorf("%w: KeepAlive must not be negative", ErrInvalidOptions)
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = defaultKeepAlive
	}
	if o.KeepAlive < time.Millisecond {
		return o, fmt.Errorf("%w: KeepAlive %v is shorter than 1ms", ErrInvalidOptions, o.KeepAlive)
	}
	if err := observe.Check(o.Observer); err != nil {
		return o, fmt.Errorf("%w: PessimisticOptions.Observer: %w", ErrInvalidOptions, err)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// Pessimistic is the pessimistic strategy: a lock is the row lock of an open
// transaction on a connection of its own,
//
//	SELECT ... FROM sqllock_rowlocks WHERE name = ? FOR UPDATE
//
// held until Release commits the transaction. If the process dies or the
// connection drops, the database rolls back and the lock is free at once —
// there is no lease to wait out. Waiting happens in the database's lock
// queue, without polling: the database hands the lock to the next waiter as
// it is released.
//
// Statements run in the lock's transaction (Lock.Tx) commit exactly when the
// lock is released. Fencing tokens are drawn once the row lock is granted,
// so they grow with every acquisition of a name.
//
// Every held lock, and every Acquire waiting for one, pins a connection of
// the pool. Size the pool's MaxOpenConns for the locks held and waited for
// at once plus the application's other work. When no connection frees up,
// Acquire and TryAcquire fail once ctx ends with an error wrapping
// ErrPoolExhausted; TryAcquire does not wait for a connection when the pool
// is at its limit with none idle.
//
// Reentrancy works as with the other strategies (see [WithOwner]), within one
// Pessimistic: the lock belongs to its connection, so the same owner in
// another process waits like anyone else.
//
// A Pessimistic is safe for concurrent use.
type Pessimistic struct {
	d      dialect.Pessimistic
	db     *sql.DB
	opts   PessimisticOptions
	owners *ownerSource
	ev     *engine.Events
	busy   func(driverConn any) bool                                    // the dialect's dialect.Catalogue.Busy; nil if none
	ping   func(ctx context.Context, driverConn any, shared bool) error // dialect.Catalogue.Ping; nil if none

	mu      sync.Mutex
	held    map[holdKey]*rowHold
	pending map[holdKey]chan struct{} // acquisitions under way, per owner
}

var _ Locker = (*Pessimistic)(nil)

// noMinHold: a row lock ends with its transaction (see TryDoBounded).
func (*Pessimistic) noMinHold() {}

// pessimisticCheckTimeout bounds NewPessimistic's question to the server
// (see dialect.Catalogue.CheckPessimistic).
const pessimisticCheckTimeout = 2 * time.Second

// NewPessimistic returns a pessimistic locker on d. The schema must have
// been migrated (see Migrate). It returns an error wrapping ErrUnsupported
// if d has no row locks (SQLite has none), or if d's server cannot hold
// them: a MariaDB Galera cluster, whose FOR UPDATE locks the local node
// only (see dialect.Catalogue.CheckPessimistic; it
// asks the server, for at most 2 s; if no answer comes, each acquire asks
// again and refuses with the same error).
func NewPessimistic(d dialect.Dialect, opts PessimisticOptions) (*Pessimistic, error) {
	if isNil(d) || d.DB() == nil {
		return nil, ErrNilDB
	}
	cat := d.Catalogue()
	if cat.Pessimistic == nil {
		return nil, cat.Unsupported(d.Name(), "Pessimistic")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if check := cat.CheckPessimistic; check != nil {
		// A server that cannot hold row locks (a Galera cluster) is
		// refused here if it answers soon; if it cannot be asked now,
		// every acquire asks again.
		ctx, cancel := context.WithTimeout(context.Background(), pessimisticCheckTimeout)
		err := check(ctx)
		cancel()
		if errors.Is(err, ErrUnsupported) {
			return nil, err
		}
	}
	p := &Pessimistic{d: cat.Pessimistic, db: d.DB(), busy: cat.Busy, ping: cat.Ping, opts: opts, owners: newOwnerSource(), ev: engine.NewEvents(observe.StrategyPessimistic, d, opts.Logger, opts.Observer),
		held: make(map[holdKey]*rowHold), pending: make(map[holdKey]chan struct{})}
	return p, nil
}

// TryAcquire locks name exclusively if no other owner holds it (NOWAIT);
// otherwise it returns ErrLocked at once.
func (p *Pessimistic) TryAcquire(ctx context.Context, name string) (*Lock, error) {
	return p.acquire(ctx, name, dialect.RowLockParams{Name: name})
}

// Acquire locks name exclusively, waiting in the database's lock queue
// while other owners hold it. When ctx ends first, the wait is cancelled on
// the server too, and Acquire returns an error wrapping ctx.Err().
func (p *Pessimistic) Acquire(ctx context.Context, name string) (*Lock, error) {
	return p.acquire(ctx, name, dialect.RowLockParams{Name: name, Wait: true})
}

// TryAcquireShared locks name in shared mode (FOR SHARE) unless an
// exclusive holder has it; otherwise it returns ErrLocked at once. Shared
// holders coexist; each gets its own token.
func (p *Pessimistic) TryAcquireShared(ctx context.Context, name string) (*Lock, error) {
	return p.acquire(ctx, name, dialect.RowLockParams{Name: name, Shared: true})
}

// AcquireShared locks name in shared mode, waiting while an exclusive
// holder has it (or, depending on the database's queueing, while an
// exclusive request waits ahead). ctx bounds the wait as for Acquire.
func (p *Pessimistic) AcquireShared(ctx context.Context, name string) (*Lock, error) {
	return p.acquire(ctx, name, dialect.RowLockParams{Name: name, Shared: true, Wait: true})
}

func (p *Pessimistic) acquire(ctx context.Context, name string, rp dialect.RowLockParams) (lock *Lock, err error) {
	tctx, call := p.ev.StartAcquire(ctx, name, rp.Wait, rp.Shared)
	defer func() { p.ev.EndAcquire(tctx, call, held(lock), err) }()
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	owner, err := p.owners.owner(ctx)
	if err != nil {
		return nil, err
	}
	key := holdKey{name, owner}
	for {
		p.mu.Lock()
		if h := p.held[key]; h != nil {
			p.mu.Unlock()
			if h.shared && !rp.Shared {
				return nil, ErrUpgrade
			}
			if h.addHold() {
				return &Lock{h: h, reentered: true}, nil
			}
			continue // it ended meanwhile: forgotten soon
		}
		if wait := p.pending[key]; wait != nil {
			// The same owner is acquiring name already: re-enter that,
			// once it is held. A try does not wait for it.
			p.mu.Unlock()
			if !rp.Wait {
				return nil, ErrLocked
			}
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("sqllock: acquire %q: %w", name, ctx.Err())
			}
		}
		done := make(chan struct{})
		p.pending[key] = done
		p.mu.Unlock()

		lock, err := p.lockRow(ctx, tctx, key, rp)
		p.mu.Lock()
		delete(p.pending, key)
		if lock != nil {
			p.held[key] = lock.h.(*rowHold)
		}
		close(done)
		p.mu.Unlock()
		if lock != nil {
			lock.h.(*rowHold).startKeepAlive()
		}
		return lock, err
	}
}

// lockRow locks key's row by statements run with tctx; the lock's context
// derives from ctx.
func (p *Pessimistic) lockRow(ctx, tctx context.Context, key holdKey, rp dialect.RowLockParams) (*Lock, error) {
	if !rp.Wait {
		db := p.db
		if st := db.Stats(); st.MaxOpenConnections > 0 && st.InUse >= st.MaxOpenConnections && st.Idle == 0 {
			return nil, fmt.Errorf("sqllock: acquire %q: %w: all %d connections (the pool's MaxOpenConns) in use",
				key.name, ErrPoolExhausted, st.MaxOpenConnections)
		}
	}
	if rp.Wait {
		p.ev.Waiting(tctx, key.name, 1)
	}
	rl, err := p.d.LockRow(tctx, rp)
	if rp.Wait {
		p.ev.Waiting(tctx, key.name, -1)
	}
	if errors.Is(err, ErrLocked) {
		return nil, ErrLocked
	}
	if err != nil {
		return nil, acquireError(ctx, key.name, err)
	}
	h := &rowHold{p: p, key: key, shared: rp.Shared, rl: rl, holds: 1, granted: time.Now(),
		ref: dialect.Lease{Name: key.name, Owner: key.owner, Token: rl.Token}}
	h.ctx, h.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	return &Lock{h: h}, nil
}

func (p *Pessimistic) forget(h *rowHold) {
	p.mu.Lock()
	if p.held[h.key] == h {
		delete(p.held, h.key)
	}
	p.mu.Unlock()
}

// holdKey is an owner's hold of a name.
type holdKey struct{ name, owner string }

// rowHold is one pessimistic acquisition and the local holds on it.
type rowHold struct {
	p      *Pessimistic
	key    holdKey
	ref    dialect.Lease
	shared bool
	rl     *dialect.RowLock
	ctx    context.Context
	cancel context.CancelCauseFunc

	granted time.Time // for events

	mu       sync.Mutex
	holds    int
	ended    bool // released or lost
	lost     bool
	rollback bool // a hold was released with Abort: the last one rolls back
	timer    *time.Timer
	inflight chan struct{} // closed when the running ping ends; nil if none
}

func (h *rowHold) Ident() dialect.Lease     { return h.ref }
func (h *rowHold) Context() context.Context { return h.ctx }
func (h *rowHold) Tx() *sql.Tx              { return h.rl.Tx }
func (h *rowHold) Released() bool           { return true }
func (h *rowHold) TrustedUntil() time.Time  { return time.Time{} }
func (h *rowHold) Events() *engine.Events   { return h.p.ev }

func (h *rowHold) addHold() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return false
	}
	h.holds++
	return true
}

func (h *rowHold) startKeepAlive() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ended {
		h.timer = time.AfterFunc(h.p.opts.KeepAlive, h.ping)
	}
}

// pingTimeout bounds one keep-alive ping. A driver closes a connection whose
// statement times out, so the timeout is generous: past it, the connection
// is as good as dead.
func (h *rowHold) pingTimeout() time.Duration { return max(5*time.Second, 3*h.p.opts.KeepAlive) }

// ping checks the connection, on the timer's goroutine.
func (h *rowHold) ping() {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	done := make(chan struct{})
	h.inflight = done
	h.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), h.pingTimeout())
	err := h.pingRaw(ctx)
	cancel()

	h.mu.Lock()
	h.inflight = nil
	close(done)
	if h.ended {
		h.mu.Unlock()
		return
	}
	// A ping that timed out (or waited behind a long statement of the
	// holder's until its context expired) is not a verdict: the driver
	// closed the connection if it was unresponsive, and the next ping says
	// so.
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		h.timer.Reset(h.p.opts.KeepAlive)
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.lose(err)
}

// pingRaw pings the lock's driver connection, with the dialect's ping if
// it has one. Conn.PingContext cannot be used while a transaction is open
// on the connection: on a dead one it would wait for the transaction to end
// before reporting. A connection that the dialect's busy reports in the
// middle of the holder's statement is not pinged: that would break it, and
// the statement shows it alive.
func (h *rowHold) pingRaw(ctx context.Context) error {
	var perr error
	err := h.rl.Conn.Raw(func(dc any) error {
		if h.p.busy != nil && h.p.busy(dc) {
			return nil
		}
		if h.p.ping != nil {
			perr = h.p.ping(ctx, dc, h.shared)
		} else if p, ok := dc.(driver.Pinger); ok {
			perr = p.Ping(ctx)
		}
		return nil
	})
	return cmp.Or(err, perr)
}

// lose ends the acquisition as lost: the connection failed, so the database
// has rolled the transaction back (or will when it notices).
func (h *rowHold) lose(cause error) {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended, h.lost = true, true
	h.mu.Unlock()
	h.p.forget(h)
	h.cancel(ErrLockLost)
	h.p.ev.Lost(h.ctx, h.ref, h.granted, observe.LostConnection, "the lock's connection failed", cause)
	_ = h.rl.Tx.Rollback()
	_ = dialect.Discard(h.rl.Conn)
}

// ReleaseHold drops one hold; the last one commits the transaction, or
// rolls it back if this or an earlier hold asked for it.
func (h *rowHold) ReleaseHold(ctx context.Context, rollback bool) error {
	h.mu.Lock()
	if h.lost {
		h.mu.Unlock()
		return ErrLockLost
	}
	h.rollback = h.rollback || rollback
	h.holds--
	if h.holds > 0 {
		h.mu.Unlock()
		h.p.ev.Released(ctx, h.ref, h.granted, false)
		return nil
	}
	h.ended = true
	if h.timer != nil {
		h.timer.Stop()
	}
	inflight := h.inflight
	h.mu.Unlock()
	if inflight != nil {
		// Cancelling a ping would make the driver close the connection,
		// and roll the lock's transaction back: let it finish instead.
		<-inflight
	}
	h.p.forget(h)
	if h.rollback {
		return h.rollBack(ctx, !rollback)
	}
	err := h.rl.Tx.Commit()
	switch {
	case errors.Is(err, sql.ErrTxDone):
		return h.endedByCaller(ctx, err)
	case errors.Is(h.p.d.Classify(err), ErrRolledBack):
		// The server answered: the session is fine, the transaction over.
		h.closeConn(ctx)
		h.cancel(ErrNotHeld)
		return fmt.Errorf("sqllock: release %q: a statement in Tx had failed, so the lock's transaction was rolled back and the lock released: %w", h.ref.Name, h.p.d.Classify(err))
	}
	if err == nil {
		if cerr := h.rl.Close(ctx); cerr != nil {
			h.p.opts.Logger.Warn("sqllock: returning a pessimistic lock's connection", "name", h.ref.Name, "err", cerr)
		}
		h.cancel(ErrNotHeld)
		h.p.ev.Released(ctx, h.ref, h.granted, true)
		return nil
	}
	gone := h.sessionGone()
	_ = dialect.Discard(h.rl.Conn)
	if gone {
		// The session ended (terminated, killed, cut off) before or while
		// the commit was processed: the lock was lost with it, and another
		// owner may have held it since. Whether Tx's statements committed
		// is told by the classified error (ErrOutcomeUnknown when the
		// commit may have been applied).
		h.mu.Lock()
		h.lost = true
		h.mu.Unlock()
		h.cancel(ErrLockLost)
		h.p.ev.Lost(h.ctx, h.ref, h.granted, observe.LostConnection, "the lock's session failed before the commit was answered", err)
		return fmt.Errorf("sqllock: release %q: %w: the lock's session failed before the commit was answered: %w",
			h.ref.Name, ErrLockLost, h.p.d.Classify(err))
	}
	h.cancel(ErrNotHeld) // the transaction ended, by rolling back
	h.p.ev.Released(ctx, h.ref, h.granted, true)
	return fmt.Errorf("sqllock: release %q: commit: %w", h.ref.Name, h.p.d.Classify(err))
}

// rollBack ends the last hold by rolling the transaction back. marked says
// that Release found the transaction marked for rollback by an earlier
// Abort: it then reports ErrRolledBack.
func (h *rowHold) rollBack(ctx context.Context, marked bool) error {
	err := h.rl.Tx.Rollback()
	switch {
	case errors.Is(err, sql.ErrTxDone):
		return h.endedByCaller(ctx, err)
	case err == nil:
		h.closeConn(ctx)
	case h.sessionGone():
		// The database rolled back as the session ended, and the lock went
		// with it, perhaps before this call: report the loss.
		_ = dialect.Discard(h.rl.Conn)
		h.mu.Lock()
		h.lost = true
		h.mu.Unlock()
		h.cancel(ErrLockLost)
		return fmt.Errorf("sqllock: abort %q: %w: the lock's session failed: %w", h.ref.Name, ErrLockLost, h.p.d.Classify(err))
	default:
		_ = dialect.Discard(h.rl.Conn) // in an unknown state
	}
	h.cancel(ErrNotHeld)
	if marked {
		return fmt.Errorf("sqllock: release %q: a re-entered hold was released with Abort: %w", h.ref.Name, ErrRolledBack)
	}
	return nil
}

// endedByCaller ends the last hold of a lock whose transaction its caller
// committed or rolled back through Tx: that released the lock.
func (h *rowHold) endedByCaller(ctx context.Context, err error) error {
	h.closeConn(ctx)
	h.cancel(ErrNotHeld)
	return fmt.Errorf("sqllock: release %q: the lock's transaction was already committed or rolled back through Tx, which released the lock (use Abort to roll back): %w", h.ref.Name, err)
}

// closeConn returns the lock's connection to the pool once its transaction
// has ended.
func (h *rowHold) closeConn(ctx context.Context) {
	if err := h.rl.Close(ctx); err != nil {
		h.p.opts.Logger.Warn("sqllock: returning a pessimistic lock's connection", "name", h.ref.Name, "err", err)
	}
}

// sessionGone reports whether the lock's connection is dead, after one of
// its statements failed. A live session still holds the lock (its
// transaction may only have been aborted by a failed statement); a dead one
// does not.
func (h *rowHold) sessionGone() bool {
	ctx, cancel := context.WithTimeout(context.Background(), h.pingTimeout())
	defer cancel()
	return h.pingRaw(ctx) != nil
}

// Guard checks the lock's session with a statement on its transaction: a
// session that was terminated or cut off since the last keep-alive ping has
// lost the lock (and another owner may hold it already).
func (h *rowHold) Guard(ctx context.Context, tx *sql.Tx) error {
	if tx != h.rl.Tx {
		return fmt.Errorf("%w: a pessimistic lock guards only its own transaction, Lock.Tx", ErrUnsupported)
	}
	h.mu.Lock()
	lost := h.lost
	h.mu.Unlock()
	if lost {
		return ErrLockLost
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// A statement cancelled by its context makes the driver close the
	// connection, which would end the lock: the check has a bound of its
	// own instead.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.pingTimeout())
	defer cancel()
	// Exec without arguments: pgx sends it in the simple protocol, so no
	// server-side prepared statement is involved (see postgres.WithPooler).
	_, err := tx.ExecContext(qctx, "SELECT 1")
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("sqllock: guard %q: the lock's transaction was ended by its caller: %w", h.ref.Name, err)
	}
	if !h.sessionGone() {
		// Aborted by a failed statement, say: the error says why.
		return fmt.Errorf("sqllock: guard %q: %w", h.ref.Name, h.p.d.Classify(err))
	}
	h.lose(err)
	return fmt.Errorf("sqllock: guard %q: %w: %w", h.ref.Name, ErrLockLost, h.p.d.Classify(err))
}
