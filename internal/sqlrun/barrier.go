package sqlrun

import (
	"context"
	"database/sql"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// BarrierMembers are the member rows of a barrier name as one statement
// read them (see dialect.BarrierSQL's Members).
type BarrierMembers struct {
	Inside  int  // live and not leaving
	Dead    int  // expired and not leaving: members lost
	Leaving int  // live and leaving
	Mine    bool // the owner's row is live
	Filled  bool // the round is full
}

// BarrierEntry is the outcome of BarrierTable.Enter.
type BarrierEntry struct {
	// Joined reports that the owner became a member.
	Joined bool
	// Busy reports a refusal because the round is full and not over:
	// some of its members are live.
	Busy bool
	// Size is the size of the round: the size asked for when Joined; when
	// refused and not Busy, another size, that of the round's members.
	Size int
	// Filled reports that this entry filled the round.
	Filled bool
}

// BarrierTable runs the statements of the barriers' tables (see
// dialect.BarrierSQL). Enter is one short transaction on a pinned
// connection; every other method is one statement, or two one after the
// other, on connections of their own.
type BarrierTable interface {
	// Enter makes owner a member of name's current round, of size, with
	// a lease of ttl, unless the round is full and some of its members
	// are still live, inside or leaving (Busy), or it has live members of
	// another size. Before it joins, it deletes the expired rows of a
	// round that is not full, and ends a full round none of whose members
	// is live, deleting its rows; a round with no member takes the size
	// asked for. The entry that makes size members fills the round, and
	// announces it (where the table announces).
	Enter(ctx context.Context, name, owner string, size int, ttl time.Duration) (BarrierEntry, error)
	// Members reads name's member rows, and whether owner's is live.
	Members(ctx context.Context, name, owner string) (BarrierMembers, error)
	// Renew extends owner's live row to ttl from now, and reports
	// whether there was one.
	Renew(ctx context.Context, name, owner string, ttl time.Duration) (bool, error)
	// Leave marks owner's live row leaving, and reports whether there
	// was one. When no member is left inside, it announces the name
	// (where the table announces).
	Leave(ctx context.Context, name, owner string) (bool, error)
	// Quit deletes owner's row.
	Quit(ctx context.Context, name, owner string) error
	// Announces says whether Enter and Leave announce to the dialect's
	// Notifier.
	Announces() bool
}

// barrierTable implements BarrierTable.
type barrierTable struct {
	run                                                 *Runner
	head, lockHead, members, expire, resize, join, fill Stmt
	renew, leave, quit, announce                        Stmt
	channel                                             string
	txOptions                                           *sql.TxOptions
}

var _ BarrierTable = (*barrierTable)(nil)

// newBarrierTable compiles s; a compile error is kept in c.
func newBarrierTable(run *Runner, c *Compiler, s dialect.BarrierSQL) *barrierTable {
	t := &barrierTable{run: run, channel: s.Channel, txOptions: s.TxOptions,
		head: c.Compile(s.Head), lockHead: c.Compile(s.LockHead), members: c.Compile(s.Members),
		expire: c.Compile(s.Expire), resize: c.Compile(s.Resize), join: c.Compile(s.Join), fill: c.Compile(s.Fill),
		renew: c.Compile(s.Renew), leave: c.Compile(s.Leave), quit: c.Compile(s.Quit)}
	if s.Announce.Text != "" {
		t.announce = c.Compile(s.Announce)
	}
	return t
}

// Enter implements BarrierTable. The connection is discarded when the
// transaction did not end cleanly, since its state on the server is then
// unknown.
func (t *barrierTable) Enter(ctx context.Context, name, owner string, size int, ttl time.Duration) (BarrierEntry, error) {
	bctx, stop := t.run.Bound(ctx)
	defer stop()
	e, err := t.enter(bctx, &Params{Name: name, Owner: owner, Limit: size, TTL: ttl, Channel: t.channel})
	return e, Settle(bctx, err)
}

// enter is Enter on ctx, bounded.
func (t *barrierTable) enter(ctx context.Context, p *Params) (BarrierEntry, error) {
	if err := t.run.check(ctx); err != nil {
		return BarrierEntry{}, err
	}
	conn, err := t.run.Pin(ctx)
	if err != nil {
		return BarrierEntry{}, err
	}
	e, clean, err := t.enterOn(ctx, conn, p)
	if !clean {
		_ = dialect.Discard(conn)
	} else {
		conn.Close()
	}
	if err != nil {
		err = WithCause(ctx, t.run.Wrap(err))
	}
	return e, err
}

// enterOn runs Enter's transaction on conn. clean reports whether the
// transaction ended (committed or rolled back) with an answer from the
// server.
func (t *barrierTable) enterOn(ctx context.Context, conn *sql.Conn, p *Params) (e BarrierEntry, clean bool, err error) {
	tx, err := conn.BeginTx(ctx, t.txOptions)
	if err != nil {
		return e, false, err
	}
	done := false
	defer func() {
		if !done {
			rerr := tx.Rollback()
			clean = clean && rerr == nil && ctx.Err() == nil
		}
	}()
	exec := func(st *Stmt) error {
		_, err := intOn(ctx, tx, "", st, p)
		return err
	}
	if err := exec(&t.head); err != nil {
		return e, false, err
	}
	var filled bool
	text, args := t.lockHead.bind(p)
	if err := tx.QueryRowContext(ctx, text, args...).Scan(&e.Size, &filled); err != nil {
		return e, false, err
	}
	m, err := membersOn(ctx, tx, &t.members, p)
	if err != nil {
		return e, false, err
	}
	switch {
	case filled && m.Inside+m.Leaving > 0:
		// The round is full, and not over: refused.
		e.Busy = true
		return e, true, nil
	case filled || m.Dead > 0:
		// A full round with no live member is over; a round not full
		// loses its dead members.
		if err := exec(&t.expire); err != nil {
			return e, false, err
		}
	}
	if filled || (m.Inside == 0 && e.Size != p.Limit) {
		if err := exec(&t.resize); err != nil {
			return e, false, err
		}
		e.Size, m.Inside = p.Limit, 0
	}
	if e.Size != p.Limit {
		return e, true, nil
	}
	if err := exec(&t.join); err != nil {
		return e, false, err
	}
	e.Joined = true
	if m.Inside+1 >= e.Size {
		if err := exec(&t.fill); err != nil {
			return e, false, err
		}
		if t.announce.declared() {
			if err := exec(&t.announce); err != nil {
				return e, false, err
			}
		}
		e.Filled = true
	}
	done = true
	if err := tx.Commit(); err != nil {
		return BarrierEntry{}, false, err
	}
	return e, true, nil
}

// membersOn runs the Members statement st on q.
func membersOn(ctx context.Context, q Querier, st *Stmt, p *Params) (BarrierMembers, error) {
	var (
		m    BarrierMembers
		mine int
	)
	text, args := st.bind(p)
	if err := q.QueryRowContext(ctx, text, args...).Scan(&m.Inside, &m.Dead, &m.Leaving, &mine, &m.Filled); err != nil {
		return m, err
	}
	m.Mine = mine > 0
	return m, nil
}

// Members implements BarrierTable.
func (t *barrierTable) Members(ctx context.Context, name, owner string) (m BarrierMembers, err error) {
	err = t.run.Conn(ctx, func(ctx context.Context, conn *sql.Conn) error {
		m, err = membersOn(ctx, conn, &t.members, &Params{Name: name, Owner: owner})
		return t.run.Wrap(err)
	})
	return m, err
}

// Renew implements BarrierTable.
func (t *barrierTable) Renew(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	n, err := t.run.Int(ctx, &t.renew, &Params{Name: name, Owner: owner, TTL: ttl})
	return n > 0, err
}

// Leave implements BarrierTable: once no member is inside, it announces
// the name (where the dialect can).
func (t *barrierTable) Leave(ctx context.Context, name, owner string) (bool, error) {
	p := &Params{Name: name, Owner: owner, Channel: t.channel}
	n, err := t.run.Int(ctx, &t.leave, p)
	if err != nil || n == 0 || !t.announce.declared() {
		return n > 0, err
	}
	m, err := t.Members(ctx, name, owner)
	if err != nil || m.Inside > 0 {
		return true, err
	}
	_, err = t.run.Int(ctx, &t.announce, p)
	return true, err
}

// Quit implements BarrierTable.
func (t *barrierTable) Quit(ctx context.Context, name, owner string) error {
	_, err := t.run.Int(ctx, &t.quit, &Params{Name: name, Owner: owner})
	return err
}

// Announces implements BarrierTable.
func (t *barrierTable) Announces() bool { return t.announce.declared() }
