package sqlrun

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// rwLockTable implements RWLockTable over a dialect's statements.
type rwLockTable struct {
	leaseTable
	head, lockHead, holders, purge, nextToken        Stmt
	insertShared, insertUpgradeable, insertExclusive Stmt
	reenter, upgrade, downgrade                      Stmt
	intent, markWaiters, clearIntent, withdraw       Stmt
	readers                                          Stmt // empty if undeclared
	announces                                        bool
	// txOptions are the options of the grant's transaction.
	txOptions *sql.TxOptions
}

// newRWLockTable compiles s; a compile error is kept in c. The grant's
// transaction begins with txOptions (nil: the driver's default); it must
// see rows committed by others after its own row locks were granted
// (READ COMMITTED, or SQLite's whole-database write lock).
func newRWLockTable(run *Runner, c *Compiler, s dialect.RWLockSQL) *rwLockTable {
	t := &rwLockTable{leaseTable: newLeaseTable(run, c, s.LeaseSQL),
		head: c.Compile(s.Head), lockHead: c.Compile(s.LockHead), holders: c.Compile(s.Holders),
		purge: c.Compile(s.Purge), nextToken: c.Compile(s.NextToken),
		insertShared: c.Compile(s.InsertShared), insertUpgradeable: c.Compile(s.InsertUpgradeable),
		insertExclusive: c.Compile(s.InsertExclusive),
		reenter:         c.Compile(s.Reenter), upgrade: c.Compile(s.Upgrade), downgrade: c.Compile(s.Downgrade), intent: c.Compile(s.Intent), markWaiters: c.Compile(s.MarkWaiters),
		clearIntent: c.Compile(s.ClearIntent), withdraw: c.Compile(s.Withdraw),
		announces: s.Announces, txOptions: s.TxOptions}
	if s.Readers.Text != "" {
		t.readers = c.Compile(s.Readers)
	}
	return t
}

var _ RWLockTable = (*rwLockTable)(nil)

// Announces implements RWLockTable.
func (t *rwLockTable) Announces() bool { return t.announces }

// Withdraw implements RWLockTable.
func (t *rwLockTable) Withdraw(ctx context.Context, name, owner string) error {
	n, err := t.run.Int(ctx, &t.withdraw, &Params{Name: name, Owner: owner, Channel: t.channel})
	if n == 2 {
		t.run.afterRelease(ctx, name)
	}
	return err
}

// Downgrade implements RWLockTable.
func (t *rwLockTable) Downgrade(ctx context.Context, l dialect.Lease) (bool, error) {
	n, err := t.run.Int(ctx, &t.downgrade, &Params{Name: l.Name, Owner: l.Owner, Token: l.Token, Channel: t.channel})
	if n == 2 {
		t.run.afterRelease(ctx, l.Name)
	}
	return n > 0, err
}

// Acquire implements RWLockTable. The grant is one transaction on
// a pinned connection; the connection is discarded when the transaction
// did not end cleanly, since its state on the server is then unknown.
func (t *rwLockTable) Acquire(ctx context.Context, p dialect.RWAcquireParams) (dialect.RWGrant, error) {
	return t.grant(ctx, func(ctx context.Context, conn *sql.Conn) (dialect.RWGrant, bool, error) {
		return t.acquireOn(ctx, conn, p)
	})
}

// Upgrade implements RWLockTable, in one transaction as Acquire.
func (t *rwLockTable) Upgrade(ctx context.Context, p dialect.RWUpgradeParams) (dialect.RWGrant, error) {
	return t.grant(ctx, func(ctx context.Context, conn *sql.Conn) (dialect.RWGrant, bool, error) {
		return t.upgradeOn(ctx, conn, p)
	})
}

// grant runs the transaction run on a pinned connection, bounded.
func (t *rwLockTable) grant(ctx context.Context, run func(context.Context, *sql.Conn) (dialect.RWGrant, bool, error)) (dialect.RWGrant, error) {
	bctx, stop := t.run.Bound(ctx)
	defer stop()
	g, err := t.grantOn(bctx, run)
	return g, Settle(bctx, err)
}

// grantOn is grant on ctx, bounded.
func (t *rwLockTable) grantOn(ctx context.Context, run func(context.Context, *sql.Conn) (dialect.RWGrant, bool, error)) (dialect.RWGrant, error) {
	if err := t.run.check(ctx); err != nil {
		return dialect.RWGrant{}, err
	}
	conn, err := t.run.Pin(ctx)
	if err != nil {
		return dialect.RWGrant{}, err
	}
	g, clean, err := run(ctx, conn)
	if !clean {
		_ = dialect.Discard(conn)
	} else {
		conn.Close()
	}
	if err != nil {
		err = WithCause(ctx, t.run.Wrap(err))
	}
	return g, err
}

// holder is a row of the holders table.
type holder struct {
	owner       string
	shared      bool
	upgradeable bool
	token       int64
	holds       int
	left        time.Duration
}

func (h *holder) live() bool { return h.holds > 0 && h.left > 0 }

// headState is what a grant read of a name, under its head row's lock:
// the intent, the waiters hint, and the holders, the owner's apart.
type headState struct {
	intentOwner string
	intent      time.Duration // the intent's time left; 0: none
	waiters     bool
	own         *holder // the owner's live lease; nil if none
	// dead: a released or expired row is in the way; held: another
	// owner's live lease; writer, upgrader: one of the write side, of an
	// upgradeable read.
	dead, held, writer, upgrader bool
	// leftAll, leftWrite and leftUpgrader are the time the others' leases
	// have left: the longest of all, of the writer's, of the upgradeable
	// read's.
	leftAll, leftWrite, leftUpgrader time.Duration
}

// otherIntent reports whether another owner than owner has a live intent.
func (s *headState) otherIntent(owner string) bool {
	return s.intent > 0 && s.intentOwner != owner
}

// lockName locks the head row of params' name, inserting it if missing,
// and reads the name's state, locking its holder rows too.
func (t *rwLockTable) lockName(ctx context.Context, tx *sql.Tx, params *Params) (*headState, error) {
	if _, err := intOn(ctx, tx, "", &t.head, params); err != nil {
		return nil, err
	}
	var (
		s           headState
		intentOwner []byte
		intentLeft  int64
	)
	text, args := t.lockHead.bind(params)
	if err := tx.QueryRowContext(ctx, text, args...).Scan(&intentOwner, &intentLeft, &s.waiters); err != nil {
		return nil, err
	}
	s.intentOwner, s.intent = string(intentOwner), time.Duration(intentLeft)*time.Microsecond
	err := eachOn(ctx, tx, func(err error) error { return err }, &t.holders, params, func(rows *sql.Rows) error {
		var (
			h     holder
			owner []byte
			us    int64
		)
		if err := rows.Scan(&owner, &h.shared, &h.upgradeable, &h.token, &h.holds, &us); err != nil {
			return err
		}
		h.owner, h.left = string(owner), time.Duration(us)*time.Microsecond
		switch {
		case !h.live():
			s.dead = true
		case h.owner == params.Owner:
			s.own = &h
		default:
			s.held = true
			s.leftAll = max(s.leftAll, h.left)
			if !h.shared {
				s.writer = true
				s.leftWrite = max(s.leftWrite, h.left)
			}
			if h.upgradeable {
				s.upgrader = true
				s.leftUpgrader = max(s.leftUpgrader, h.left)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// begin begins the grant's transaction on conn; end, deferred, rolls it
// back unless commit ended it, and clears clean when that failed. commit
// ends it with g granted (or, refused, with what it recorded); a failed
// commit's outcome may be unknown.
func (t *rwLockTable) begin(ctx context.Context, conn *sql.Conn) (tx *sql.Tx, commit func(dialect.RWGrant) (dialect.RWGrant, bool, error), end func(clean *bool), err error) {
	tx, err = conn.BeginTx(ctx, t.txOptions)
	if err != nil {
		return nil, nil, nil, err
	}
	done := false
	end = func(clean *bool) {
		if !done {
			rerr := tx.Rollback()
			*clean = *clean && rerr == nil && ctx.Err() == nil
		}
	}
	commit = func(g dialect.RWGrant) (dialect.RWGrant, bool, error) {
		done = true
		if err := tx.Commit(); err != nil {
			return dialect.RWGrant{}, false, err
		}
		return g, true, nil
	}
	return tx, commit, end, nil
}

// acquireOn runs the grant's transaction on conn. clean reports whether the
// transaction ended (committed or rolled back) with an answer from the
// server.
func (t *rwLockTable) acquireOn(ctx context.Context, conn *sql.Conn, p dialect.RWAcquireParams) (g dialect.RWGrant, clean bool, err error) {
	tx, commit, end, err := t.begin(ctx, conn)
	if err != nil {
		return g, false, err
	}
	defer end(&clean)
	params := &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL, Channel: t.channel}
	s, err := t.lockName(ctx, tx, params)
	if err != nil {
		return g, false, err
	}
	otherIntent := s.otherIntent(p.Owner)
	upgradeable := p.Shared && p.Upgradeable
	if own := s.own; own != nil {
		// The write lease takes any re-entry; a read lease, a plain
		// read, and an upgradeable one an upgradeable read.
		if !own.shared || p.Shared && (own.upgradeable || !upgradeable) {
			params.Token = own.token
			if _, err := intOn(ctx, tx, "", &t.reenter, params); err != nil {
				return g, false, err
			}
			return commit(dialect.RWGrant{Token: own.token, Shared: own.shared})
		}
		return dialect.RWGrant{Upgrade: true}, true, nil
	}
	refused := false
	switch {
	case upgradeable:
		refused = s.writer || s.upgrader || otherIntent
		g.Left = max(s.leftWrite, s.leftUpgrader)
		if otherIntent {
			g.Left = max(g.Left, s.intent)
		}
	case p.Shared:
		refused = s.writer || otherIntent
		g.Left = s.leftWrite
		if otherIntent {
			g.Left = max(g.Left, s.intent)
		}
	default:
		refused = s.held
		g.Left = s.leftAll
	}
	if refused {
		if !p.Wait {
			return g, true, nil // rolled back: nothing was recorded
		}
		switch {
		case !p.Shared && !otherIntent:
			_, err = intOn(ctx, tx, "", &t.intent, params)
		case !s.waiters:
			_, err = intOn(ctx, tx, "", &t.markWaiters, params)
		}
		if err != nil {
			return g, false, err
		}
		g.Marked = !s.waiters
		return commit(g)
	}
	if s.dead {
		if _, err := intOn(ctx, tx, "", &t.purge, params); err != nil {
			return g, false, err
		}
	}
	token, err := intOn(ctx, tx, "", &t.nextToken, params)
	if err != nil {
		return g, false, err
	}
	if token == 0 {
		return g, false, fmt.Errorf("sqllock: no token drawn for %q", p.Name)
	}
	params.Token = token
	insert := &t.insertExclusive
	switch {
	case upgradeable:
		insert = &t.insertUpgradeable
	case p.Shared:
		insert = &t.insertShared
	}
	if _, err := intOn(ctx, tx, "", insert, params); err != nil {
		return g, false, err
	}
	if !p.Shared && s.intent > 0 && !otherIntent {
		if _, err := intOn(ctx, tx, "", &t.clearIntent, params); err != nil {
			return g, false, err
		}
	}
	return commit(dialect.RWGrant{Token: token, Shared: p.Shared})
}

// upgradeOn runs the upgrade's transaction on conn (see acquireOn): the
// owner's upgradeable lease becomes the write lease once no other owner
// holds a live lease of the name; a refusal that will wait records the
// owner's intent, taking it over from another's.
func (t *rwLockTable) upgradeOn(ctx context.Context, conn *sql.Conn, p dialect.RWUpgradeParams) (g dialect.RWGrant, clean bool, err error) {
	tx, commit, end, err := t.begin(ctx, conn)
	if err != nil {
		return g, false, err
	}
	defer end(&clean)
	params := &Params{Name: p.Name, Owner: p.Owner, Token: p.Token, TTL: p.TTL, Channel: t.channel}
	s, err := t.lockName(ctx, tx, params)
	if err != nil {
		return g, false, err
	}
	switch own := s.own; {
	case own == nil || own.token != p.Token:
		return dialect.RWGrant{Lost: true}, true, nil
	case !own.shared:
		return dialect.RWGrant{Token: own.token}, true, nil // upgraded already (a lost reply)
	case !own.upgradeable:
		return dialect.RWGrant{Upgrade: true}, true, nil
	}
	if s.held {
		g.Left = s.leftAll
		if !p.Wait {
			return g, true, nil
		}
		if _, err := intOn(ctx, tx, "", &t.intent, params); err != nil {
			return g, false, err
		}
		g.Marked = !s.waiters
		return commit(g)
	}
	if _, err := intOn(ctx, tx, "", &t.upgrade, params); err != nil {
		return g, false, err
	}
	if s.intent > 0 && !s.otherIntent(p.Owner) {
		if _, err := intOn(ctx, tx, "", &t.clearIntent, params); err != nil {
			return g, false, err
		}
	}
	return commit(dialect.RWGrant{Token: p.Token})
}
