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
	head, lockHead, holders, purge, nextToken  Stmt
	insertShared, insertExclusive, reenter     Stmt
	intent, markWaiters, clearIntent, withdraw Stmt
	readers                                    Stmt // empty if undeclared
	announces                                  bool
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
		insertShared: c.Compile(s.InsertShared), insertExclusive: c.Compile(s.InsertExclusive),
		reenter: c.Compile(s.Reenter), intent: c.Compile(s.Intent), markWaiters: c.Compile(s.MarkWaiters),
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

// Acquire implements RWLockTable. The grant is one transaction on
// a pinned connection; the connection is discarded when the transaction
// did not end cleanly, since its state on the server is then unknown.
func (t *rwLockTable) Acquire(ctx context.Context, p dialect.RWAcquireParams) (dialect.RWGrant, error) {
	bctx, stop := t.run.Bound(ctx)
	defer stop()
	g, err := t.acquire(bctx, p)
	return g, Settle(bctx, err)
}

// acquire is Acquire on ctx, bounded.
func (t *rwLockTable) acquire(ctx context.Context, p dialect.RWAcquireParams) (dialect.RWGrant, error) {
	if err := t.run.check(ctx); err != nil {
		return dialect.RWGrant{}, err
	}
	conn, err := t.run.Pin(ctx)
	if err != nil {
		return dialect.RWGrant{}, err
	}
	g, clean, err := t.acquireOn(ctx, conn, p)
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
	owner  string
	shared bool
	token  int64
	holds  int
	left   time.Duration
}

func (h *holder) live() bool { return h.holds > 0 && h.left > 0 }

// acquireOn runs the grant's transaction on conn. clean reports whether the
// transaction ended (committed or rolled back) with an answer from the
// server.
func (t *rwLockTable) acquireOn(ctx context.Context, conn *sql.Conn, p dialect.RWAcquireParams) (g dialect.RWGrant, clean bool, err error) {
	tx, err := conn.BeginTx(ctx, t.txOptions)
	if err != nil {
		return g, false, err
	}
	done := false
	defer func() {
		if !done {
			rerr := tx.Rollback()
			clean = clean && rerr == nil && ctx.Err() == nil
		}
	}()
	// commit ends the transaction with g granted (or, refused, with what
	// it recorded); a failed commit's outcome may be unknown.
	commit := func(g dialect.RWGrant) (dialect.RWGrant, bool, error) {
		done = true
		if err := tx.Commit(); err != nil {
			return dialect.RWGrant{}, false, err
		}
		return g, true, nil
	}
	params := &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL, Channel: t.channel}
	if _, err := intOn(ctx, tx, "", &t.head, params); err != nil {
		return g, false, err
	}
	var (
		intentOwner []byte
		intentLeft  int64
		waiters     bool
	)
	text, args := t.lockHead.bind(params)
	if err := tx.QueryRowContext(ctx, text, args...).Scan(&intentOwner, &intentLeft, &waiters); err != nil {
		return g, false, err
	}
	var (
		own                *holder
		dead, writer, held bool
		leftAll, leftWrite time.Duration
	)
	err = eachOn(ctx, tx, func(err error) error { return err }, &t.holders, params, func(rows *sql.Rows) error {
		var (
			h     holder
			owner []byte
			us    int64
		)
		if err := rows.Scan(&owner, &h.shared, &h.token, &h.holds, &us); err != nil {
			return err
		}
		h.owner, h.left = string(owner), time.Duration(us)*time.Microsecond
		switch {
		case !h.live():
			dead = true
		case h.owner == p.Owner:
			own = &h
		default:
			held = true
			leftAll = max(leftAll, h.left)
			if !h.shared {
				writer = true
				leftWrite = max(leftWrite, h.left)
			}
		}
		return nil
	})
	if err != nil {
		return g, false, err
	}
	intent := time.Duration(intentLeft) * time.Microsecond
	otherIntent := intent > 0 && string(intentOwner) != p.Owner
	if own != nil {
		if !own.shared || p.Shared {
			params.Token = own.token
			if _, err := intOn(ctx, tx, "", &t.reenter, params); err != nil {
				return g, false, err
			}
			return commit(dialect.RWGrant{Token: own.token, Shared: own.shared})
		}
		return dialect.RWGrant{Upgrade: true}, true, nil
	}
	refused := false
	if p.Shared {
		refused = writer || otherIntent
		g.Left = leftWrite
		if otherIntent {
			g.Left = max(g.Left, intent)
		}
	} else {
		refused = held
		g.Left = leftAll
	}
	if refused {
		if !p.Wait {
			return g, true, nil // rolled back: nothing was recorded
		}
		switch {
		case !p.Shared && !otherIntent:
			_, err = intOn(ctx, tx, "", &t.intent, params)
		case !waiters:
			_, err = intOn(ctx, tx, "", &t.markWaiters, params)
		}
		if err != nil {
			return g, false, err
		}
		g.Marked = !waiters
		return commit(g)
	}
	if dead {
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
	if p.Shared {
		insert = &t.insertShared
	}
	if _, err := intOn(ctx, tx, "", insert, params); err != nil {
		return g, false, err
	}
	if !p.Shared && intent > 0 && !otherIntent {
		if _, err := intOn(ctx, tx, "", &t.clearIntent, params); err != nil {
			return g, false, err
		}
	}
	return commit(dialect.RWGrant{Token: token, Shared: p.Shared})
}
