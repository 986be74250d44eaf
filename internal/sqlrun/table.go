package sqlrun

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// LeaseSQL declares the statements of a lease table: one row per lock name
// with owner, token, hold count and an expiry on the database clock. The
// lock table and the version table are both lease tables; one
// implementation, LeaseTable, runs the statements of either on every
// dialect.
type LeaseSQL struct {
	// RenewMany extends the live leases among :leases to :ttl from now
	// (:names lists their names, to narrow an index scan). A Query selects
	// the (name, owner, token) of each lease it renewed; an Exec is
	// followed, on the same connection, by Renewed, which selects the
	// leases among :leases that are live afterwards.
	RenewMany, Renewed SQL
	// Release drops one hold of (:name, :owner, :token), freeing the lock
	// with the last one, unless the row's acquired_at + :minhold is still
	// ahead on the database clock: then the row keeps no hold and expires
	// at that instant. Its number is 1 when it dropped a hold; when it
	// also freed a row marked as waited for, 2 (marked by waiters without
	// tickets: Runner.AfterRelease rings), 3 (by waiters with tickets:
	// Wake runs, or Runner.AfterTicketed), or 4 (by both).
	Release SQL
	// RingsOnChange says that Runner.AfterRelease rings after every
	// Release that dropped a hold (number 1), for a dialect whose Release
	// cannot tell a freeing release apart as cheaply as it drops the hold
	// (SQLite: a RETURNING clause costs more than the ring it saves). A
	// ring that freed nothing costs each waiting process one look.
	RingsOnChange bool
	// Wake, if set, runs with :name after a release whose number is 3 or
	// 4 (also a Break's, and a lock set's release of the name): it wakes
	// the process of the oldest live ticket (on PostgreSQL), from a table
	// that the releases of names nobody waits for do not read. Without
	// it, Runner.AfterTicketed does.
	Wake SQL
	// Guard selects a row, inside the caller's transaction, when the lease
	// (:name, :owner, :token) is live, and share-locks it until the
	// transaction ends.
	Guard SQL
	// List selects name, owner, token, holds, and the acquisition time, the
	// expiry time (microseconds since the Unix epoch) and the time left (in
	// microseconds) of every held row, ordered by name.
	List SQL
	// Channel is the value of :channel.
	Channel string
}

// LeaseTable implements dialect.LeaseTable over a dialect's statements.
type LeaseTable struct {
	run                                      *Runner
	renewMany, renewed, release, guard, list Stmt
	wake                                     Stmt
	channel                                  string
	ringsOnChange, hasWake                   bool
	queue                                    Queue // whose tickets mark the rows
}

func newLeaseTable(run *Runner, c *Compiler, s LeaseSQL) LeaseTable {
	t := LeaseTable{run: run, channel: s.Channel, ringsOnChange: s.RingsOnChange, hasWake: s.Wake.Text != "",
		renewMany: c.Compile(s.RenewMany),
		release:   c.Compile(s.Release), guard: c.Compile(s.Guard), list: c.Compile(s.List)}
	if s.RenewMany.Kind != Query {
		t.renewed = c.Compile(s.Renewed)
	}
	if t.hasWake {
		t.wake = c.Compile(s.Wake)
	}
	return t
}

// wakeTimeout bounds Wake, which runs once the release is done, on a
// context that the caller's end does not cut short.
const wakeTimeout = 5 * time.Second

// What a release or a break did, by its number (see LeaseSQL.Release).
const (
	dropped       = 1 // dropped a hold
	freedNamed    = 2 // freed a row marked by waiters without tickets
	freedTicketed = 3 // freed a row marked by waiters with tickets
	freedBoth     = 4 // freed a row marked by both
)

// freed wakes the waiters of name after a statement freed it and reported
// that some process waits (number n, see LeaseSQL.Release): those with
// tickets through Wake, if set, or Runner.AfterTicketed; the others
// through Runner.AfterRelease. Wake is best effort: a waiter it fails to
// wake waits until the lease would have ended.
func (t *LeaseTable) freed(ctx context.Context, name string, n int64) {
	if n == freedTicketed || n == freedBoth {
		if t.hasWake {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wakeTimeout)
			_, _ = t.run.Int(wctx, &t.wake, &Params{Name: name})
			cancel()
		} else {
			t.run.afterTicketed(ctx, t.queue, name, false)
		}
	}
	if n == freedNamed || n == freedBoth {
		t.run.afterRelease(ctx, name)
	}
}

func (t *LeaseTable) params(l dialect.Lease) *Params {
	return &Params{Name: l.Name, Owner: l.Owner, Token: l.Token, Channel: t.channel}
}

// RenewMany implements dialect.LeaseTable.
func (t *LeaseTable) RenewMany(ctx context.Context, ls []dialect.Lease, ttl time.Duration) ([]bool, error) {
	p := &Params{Leases: ls, TTL: ttl, Channel: t.channel}
	got := make(map[dialect.Lease]bool, len(ls))
	scan := func(rows *sql.Rows) error {
		var (
			l           dialect.Lease
			name, owner []byte
		)
		if err := rows.Scan(&name, &owner, &l.Token); err != nil {
			return err
		}
		l.Name, l.Owner = string(name), string(owner)
		got[l] = true
		return nil
	}
	err := t.run.Conn(ctx, func(conn *sql.Conn) error {
		if t.renewMany.Kind == Query {
			return eachOn(ctx, conn, t.run.Wrap, &t.renewMany, p, scan)
		}
		if _, err := intOn(ctx, conn, "", &t.renewMany, p); err != nil {
			return t.run.Wrap(err)
		}
		return eachOn(ctx, conn, t.run.Wrap, &t.renewed, p, scan)
	})
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(ls))
	for i, l := range ls {
		out[i] = got[l]
	}
	return out, nil
}

// Release implements dialect.LeaseTable.
func (t *LeaseTable) Release(ctx context.Context, l dialect.Lease, minHold time.Duration) (bool, error) {
	p := t.params(l)
	p.MinHold = minHold
	n, err := t.run.Int(ctx, &t.release, p)
	switch {
	case n == dropped && t.ringsOnChange:
		t.freed(ctx, l.Name, freedNamed)
	case n > dropped:
		t.freed(ctx, l.Name, n)
	}
	return n >= dropped && n <= freedBoth, err
}

// Guard implements dialect.LeaseTable.
func (t *LeaseTable) Guard(ctx context.Context, tx *sql.Tx, l dialect.Lease) (bool, error) {
	text, args := t.guard.bind(t.params(l))
	var one int
	err := tx.QueryRowContext(ctx, text, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, t.run.Wrap(err)
}

// undo returns a Grant.Undo that releases the lease of name and owner
// whose token is the grant's number.
func (t *LeaseTable) undo(name, owner string) func(ctx context.Context, n int64) error {
	return func(ctx context.Context, n int64) error {
		_, err := t.Release(ctx, dialect.Lease{Name: name, Owner: owner, Token: n}, 0)
		return err
	}
}

// List implements dialect.LeaseTable.
func (t *LeaseTable) List(ctx context.Context) ([]dialect.LockInfo, error) {
	return t.infos(ctx, &t.list, &Params{})
}

// infos runs st, which selects the columns of LeaseSQL.List.
func (t *LeaseTable) infos(ctx context.Context, st *Stmt, p *Params) ([]dialect.LockInfo, error) {
	var out []dialect.LockInfo
	err := t.run.Each(ctx, st, p, func(rows *sql.Rows) error {
		var (
			li                           dialect.LockInfo
			name, owner                  []byte
			acquired, expires, expiresIn int64
		)
		if err := rows.Scan(&name, &owner, &li.Token, &li.Holds, &acquired, &expires, &expiresIn); err != nil {
			return err
		}
		li.Name, li.Owner = string(name), string(owner)
		li.AcquiredAt = time.UnixMicro(acquired).UTC()
		li.ExpiresAt = time.UnixMicro(expires).UTC()
		li.ExpiresIn = time.Duration(expiresIn) * time.Microsecond
		out = append(out, li)
		return nil
	})
	return out, err
}

// LockSQL declares the statements of the lock table.
type LockSQL struct {
	LeaseSQL
	// Acquire grants a lease on :name to :owner for :ttl in one statement
	// (insert, re-enter, or take over an expired or released row) and
	// gives its token as its number; 0 when another owner holds a live
	// lease. It runs as a grant (see Runner.Grant).
	Acquire SQL
	// Remaining selects the microseconds the lease on :name has left (0
	// if none), and no row when there is no row.
	Remaining SQL
	// Holder selects, with List's columns, the row of :name if its lease
	// is live (held, or released within its minimum hold), else no row.
	Holder SQL
	// Break ends the live lease (:name, :owner, :token) now, keeping the
	// row and its token: no hold is left and the row expires as a
	// release past its minimum hold leaves it. Its number is 0 when no
	// such live lease is left, else as Release's.
	Break SQL
	// ReleaseAll drops one hold of each lease of :leases (:names lists
	// their names, in the same order) in one statement, as Release does
	// for one (see LockTable.ReleaseAll for what it reports). Empty: no
	// lock sets.
	ReleaseAll SQL
	// MultiTx are the options of the transaction in which AcquireAll
	// runs Acquire for each name of a set (nil: the driver's default).
	MultiTx *sql.TxOptions
	// Proclaim stores :value as the value of the live lease (:name,
	// :owner, :token), with the lease's token as the value's; its number
	// is 1 when it did (an Exec that changes the row whenever it
	// matches), 0 when the lease is not live.
	Proclaim SQL
	// Campaign, if set, is Acquire that also stores :value as the value of
	// the lease it grants or re-enters (see dialect.Elections.Campaign).
	// Without it (a dialect that keeps values in a table of their own),
	// Campaign is Acquire, then Proclaim, in one transaction.
	Campaign SQL
	// Leader selects the owner, the token, the value, the expiry
	// (microseconds since the Unix epoch) and the time left (in
	// microseconds) of :name's live lease whose value was proclaimed for
	// its token; no row without one. Empty: no elections.
	Leader SQL
}

// LockTable implements dialect.LockTable, and, with the statements
// they need, dialect.MultiLockTable (ReleaseAll) and dialect.Elections
// (Leader).
type LockTable struct {
	LeaseTable
	acquire, remaining, holder, brk, campaign, proclaim, leader, releaseAll Stmt
	multiTx                                                                 *sql.TxOptions
}

// NewLockTable compiles s; a compile error is kept in c.
func NewLockTable(run *Runner, c *Compiler, s LockSQL) *LockTable {
	t := &LockTable{LeaseTable: newLeaseTable(run, c, s.LeaseSQL),
		acquire: c.Compile(s.Acquire), remaining: c.Compile(s.Remaining),
		holder: c.Compile(s.Holder), brk: c.Compile(s.Break), multiTx: s.MultiTx}
	for _, st := range []struct {
		dst *Stmt
		src SQL
	}{{&t.campaign, s.Campaign}, {&t.proclaim, s.Proclaim}, {&t.leader, s.Leader}, {&t.releaseAll, s.ReleaseAll}} {
		if st.src.Text != "" {
			*st.dst = c.Compile(st.src)
		}
	}
	return t
}

// Multi returns t as the catalogue's lock sets, nil without a ReleaseAll
// statement.
func (t *LockTable) Multi() dialect.MultiLockTable {
	if !t.releaseAll.declared() {
		return nil
	}
	return t
}

// Elections returns t as the catalogue's elections, nil without a Leader
// statement.
func (t *LockTable) Elections() dialect.Elections {
	if !t.leader.declared() {
		return nil
	}
	return t
}

// Break implements dialect.LockTable: it reads the holder's lease, then
// ends that lease, scoped to its (name, owner, token); if the lease changed
// hands in between (released, taken over), it reads the new holder's.
func (t *LockTable) Break(ctx context.Context, name string) (dialect.LockInfo, bool, error) {
	for {
		held, err := t.infos(ctx, &t.holder, &Params{Name: name})
		if err != nil || len(held) == 0 {
			return dialect.LockInfo{}, false, err
		}
		li := held[0]
		n, err := t.run.Int(ctx, &t.brk, &Params{Name: name, Owner: li.Owner, Token: li.Token, Channel: t.channel})
		if n > dropped {
			t.freed(ctx, name, n)
		}
		if err != nil {
			return dialect.LockInfo{}, false, err
		}
		if n != 0 {
			return li, true, nil
		}
	}
}

// Acquire implements dialect.LockTable.
func (t *LockTable) Acquire(ctx context.Context, p dialect.AcquireParams) (int64, error) {
	return t.run.GrantInt(ctx, &t.acquire, &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL, Channel: t.channel},
		t.undo(p.Name, p.Owner))
}

// Campaign implements dialect.Elections: it grants as Acquire does, and
// stores value as the lease's value, in the same statement or the same
// transaction.
func (t *LockTable) Campaign(ctx context.Context, p dialect.AcquireParams, value string) (int64, error) {
	params := &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL, Channel: t.channel, Value: value}
	if t.campaign.declared() { // else Acquire and Proclaim in a transaction
		return t.run.GrantInt(ctx, &t.campaign, params, t.undo(p.Name, p.Owner))
	}
	return t.run.Grant(ctx, Grant{InTx: true,
		Run: func(ctx context.Context, q Querier, prefix string) (int64, error) {
			token, err := intOn(ctx, q, prefix, &t.acquire, params)
			if err != nil || token == 0 {
				return 0, err
			}
			params.Token = token
			_, err = intOn(ctx, q, prefix, &t.proclaim, params)
			return token, err
		},
		Undo: t.undo(p.Name, p.Owner)})
}

// Proclaim implements dialect.Elections, after the runner's Check.
func (t *LockTable) Proclaim(ctx context.Context, l dialect.Lease, value string) (bool, error) {
	if err := t.run.check(ctx); err != nil {
		return false, err
	}
	p := t.params(l)
	p.Value = value
	n, err := t.run.Int(ctx, &t.proclaim, p)
	return n == 1, err
}

// Leader implements dialect.Elections, after the runner's Check.
func (t *LockTable) Leader(ctx context.Context, name string) (dialect.LeaderInfo, bool, error) {
	if err := t.run.check(ctx); err != nil {
		return dialect.LeaderInfo{}, false, err
	}
	info := dialect.LeaderInfo{Name: name}
	var (
		owner, value  []byte
		expires, left int64
	)
	ok, err := t.run.Row(ctx, &t.leader, &Params{Name: name}, &owner, &info.Term, &value, &expires, &left)
	if !ok || err != nil {
		return dialect.LeaderInfo{}, false, err
	}
	info.Owner, info.Value = string(owner), string(value)
	info.ExpiresAt = time.UnixMicro(expires).UTC()
	info.ExpiresIn = time.Duration(left) * time.Microsecond
	return info, true, nil
}

// Remaining implements dialect.LockTable.
func (t *LockTable) Remaining(ctx context.Context, name string) (time.Duration, bool, error) {
	var us int64
	ok, err := t.run.Row(ctx, &t.remaining, &Params{Name: name, Channel: t.channel}, &us)
	return time.Duration(us) * time.Microsecond, ok, err
}

// VersionSQL declares the statements of the version table, whose token
// column is the version.
type VersionSQL struct {
	LeaseSQL
	// Read selects version, owner, holds, whether the lease is live, and
	// the microseconds it has left, of :name's row.
	Read SQL
	// Create inserts :name's row one above the version floor (the largest
	// version of any deleted row, read such that a deletion cannot slip in
	// between), held by :owner for :ttl; its number is the new row's
	// version, 0 when the row exists (without an error). It runs as a
	// grant.
	Create SQL
	// Take sets :owner, a new version above :version, one hold and an
	// expiry :ttl from now if the row still has :version and is free or
	// expired; its number is the new version, 0 when it did not.
	Take SQL
	// Reenter adds a hold and extends the lease to :ttl from now if the row
	// still has :version and a live lease of :owner; number 1 when it did.
	Reenter SQL
}

// VersionTable implements dialect.VersionTable.
type VersionTable struct {
	LeaseTable
	read, create, take, reenter Stmt
}

// NewVersionTable compiles s; a compile error is kept in c.
func NewVersionTable(run *Runner, c *Compiler, s VersionSQL) *VersionTable {
	return &VersionTable{LeaseTable: newLeaseTable(run, c, s.LeaseSQL),
		read: c.Compile(s.Read), create: c.Compile(s.Create), take: c.Compile(s.Take), reenter: c.Compile(s.Reenter)}
}

// Read implements dialect.VersionTable.
func (t *VersionTable) Read(ctx context.Context, name string) (dialect.VersionRow, bool, error) {
	var (
		r     dialect.VersionRow
		owner []byte
		us    int64
	)
	ok, err := t.run.Row(ctx, &t.read, &Params{Name: name}, &r.Version, &owner, &r.Holds, &r.Live, &us)
	r.Owner = string(owner)
	r.Remaining = time.Duration(us) * time.Microsecond
	return r, ok, err
}

// Create implements dialect.VersionTable.
func (t *VersionTable) Create(ctx context.Context, p dialect.AcquireParams) (int64, error) {
	return t.run.GrantInt(ctx, &t.create, &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL}, t.undo(p.Name, p.Owner))
}

// Take implements dialect.VersionTable.
func (t *VersionTable) Take(ctx context.Context, p dialect.SwapParams) (int64, error) {
	return t.run.GrantInt(ctx, &t.take, &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL, Version: p.Version},
		t.undo(p.Name, p.Owner))
}

// Reenter implements dialect.VersionTable.
func (t *VersionTable) Reenter(ctx context.Context, p dialect.SwapParams) (bool, error) {
	undo := func(ctx context.Context, _ int64) error {
		_, err := t.Release(ctx, dialect.Lease{Name: p.Name, Owner: p.Owner, Token: p.Version}, 0)
		return err
	}
	n, err := t.run.GrantInt(ctx, &t.reenter, &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL, Version: p.Version}, undo)
	return n == 1 && err == nil, err
}
