package sqlrun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// leaseTable implements LeaseTable over a dialect's statements.
type leaseTable struct {
	run                                      *Runner
	renewMany, renewed, release, guard, list Stmt
	wake                                     Stmt
	channel                                  string
	ringsOnChange, hasWake                   bool
	asks                                     bool          // renewals select a release request's reason (LockSQL.RequestRelease)
	queue                                    dialect.Queue // whose tickets mark the rows
}

func newLeaseTable(run *Runner, c *Compiler, s dialect.LeaseSQL) leaseTable {
	t := leaseTable{run: run, channel: s.Channel, ringsOnChange: s.RingsOnChange, hasWake: s.Wake.Text != "",
		renewMany: c.Compile(s.RenewMany),
		release:   c.Compile(s.Release), guard: c.Compile(s.Guard), list: c.Compile(s.List)}
	if s.RenewMany.Kind != dialect.Query {
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
// tickets through Wake, if set, or dialect.Hooks.AfterTicketed; the others
// through dialect.Hooks.AfterRelease. Wake is best effort: a waiter it fails to
// wake waits until the lease would have ended.
func (t *leaseTable) freed(ctx context.Context, name string, n int64) {
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

func (t *leaseTable) params(l dialect.Lease) *Params {
	return &Params{Name: l.Name, Owner: l.Owner, Token: l.Token, Channel: t.channel}
}

// RenewMany implements LeaseTable.
func (t *leaseTable) RenewMany(ctx context.Context, ls []dialect.Lease, ttl time.Duration) ([]Renewal, error) {
	p := &Params{Leases: ls, TTL: ttl, Channel: t.channel}
	got := make(map[dialect.Lease]Renewal, len(ls))
	scan := func(rows *sql.Rows) error {
		var (
			l                   dialect.Lease
			name, owner, reason []byte
		)
		dst := []any{&name, &owner, &l.Token}
		if t.asks {
			dst = append(dst, &reason)
		}
		if err := rows.Scan(dst...); err != nil {
			return err
		}
		l.Name, l.Owner = string(name), string(owner)
		got[l] = Renewal{OK: true, Asked: reason != nil, Reason: string(reason)}
		return nil
	}
	err := t.run.Conn(ctx, func(ctx context.Context, conn *sql.Conn) error {
		if t.renewMany.Kind == dialect.Query {
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
	out := make([]Renewal, len(ls))
	for i, l := range ls {
		out[i] = got[l]
	}
	return out, nil
}

// Release implements LeaseTable.
func (t *leaseTable) Release(ctx context.Context, l dialect.Lease, minHold time.Duration) (bool, error) {
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

// Guard implements LeaseTable.
func (t *leaseTable) Guard(ctx context.Context, tx *sql.Tx, l dialect.Lease) (bool, error) {
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
func (t *leaseTable) undo(name, owner string) func(ctx context.Context, n int64) error {
	return func(ctx context.Context, n int64) error {
		_, err := t.Release(ctx, dialect.Lease{Name: name, Owner: owner, Token: n}, 0)
		return err
	}
}

// List implements LeaseTable.
func (t *leaseTable) List(ctx context.Context) ([]dialect.LockInfo, error) {
	return t.infos(ctx, &t.list, &Params{})
}

// infos runs st, which selects the columns of LeaseSQL.List.
func (t *leaseTable) infos(ctx context.Context, st *Stmt, p *Params) ([]dialect.LockInfo, error) {
	return t.scanInfos(ctx, st, p, false)
}

// scanInfos runs st, which selects the columns of LeaseSQL.List and, with
// value, a value (NULL for none) after them.
func (t *leaseTable) scanInfos(ctx context.Context, st *Stmt, p *Params, value bool) ([]dialect.LockInfo, error) {
	var out []dialect.LockInfo
	err := t.run.Each(ctx, st, p, func(rows *sql.Rows) error {
		var (
			li                           dialect.LockInfo
			name, owner, v               []byte
			acquired, expires, expiresIn int64
		)
		dst := []any{&name, &owner, &li.Token, &li.Holds, &acquired, &expires, &expiresIn}
		if value {
			dst = append(dst, &v)
		}
		if err := rows.Scan(dst...); err != nil {
			return err
		}
		li.Name, li.Owner, li.Value = string(name), string(owner), string(v)
		li.AcquiredAt = time.UnixMicro(acquired).UTC()
		li.ExpiresAt = time.UnixMicro(expires).UTC()
		li.ExpiresIn = time.Duration(expiresIn) * time.Microsecond
		out = append(out, li)
		return nil
	})
	return out, err
}

// lockTable implements LockTable, and, with the statements
// they need, MultiLockTable (ReleaseAll) and Elections
// (Leader).
type lockTable struct {
	leaseTable
	acquire, remaining, holder, brk, campaign, proclaim, leader, releaseAll Stmt
	acquiredToken, acquireUndo, values                                      Stmt
	setValue, value, lockValues, requestRelease                             Stmt
	multiTx                                                                 *sql.TxOptions
	// apart is the work that grants left to run after them (see
	// FairSQL.ConsumeApart), by name: a release of the name waits for it.
	apart afterGrants
}

// afterGrants counts, by name, the work that grants of this process left
// to run after them: a granted ticket's deletion, and the ring after it.
// Until the deletion the ticket is the name's oldest live one, which the
// release's ring would reach, and lose; the release waits for it, so that
// a process that exits right after its release leaves no ticket to be
// deleted and no ring to be run by a goroutine that dies with it.
type afterGrants struct {
	mu sync.Mutex
	m  map[string]*afterGrant
}

type afterGrant struct {
	n    int
	done chan struct{} // closed when n falls to 0
}

// begin counts one more piece of work after a grant of name; the caller
// calls end when it is done.
func (a *afterGrants) begin(name string) (end func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = make(map[string]*afterGrant)
	}
	g := a.m[name]
	if g == nil {
		g = &afterGrant{done: make(chan struct{})}
		a.m[name] = g
	}
	g.n++
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if g.n--; g.n == 0 {
			close(g.done)
			delete(a.m, name)
		}
	}
}

// wait waits until no work after a grant of name is under way, or ctx
// ends (the work is bounded: see consumeTimeout).
func (a *afterGrants) wait(ctx context.Context, name string) {
	a.mu.Lock()
	g := a.m[name]
	a.mu.Unlock()
	if g == nil {
		return
	}
	select {
	case <-g.done:
	case <-ctx.Done():
	}
}

// Release implements LeaseTable, once the work after the lease's grant is
// done (see afterGrants).
func (t *lockTable) Release(ctx context.Context, l dialect.Lease, minHold time.Duration) (bool, error) {
	t.apart.wait(ctx, l.Name)
	return t.leaseTable.Release(ctx, l, minHold)
}

// newLockTable compiles s; a compile error is kept in c.
func newLockTable(run *Runner, c *Compiler, s dialect.LockSQL) *lockTable {
	t := &lockTable{leaseTable: newLeaseTable(run, c, s.LeaseSQL),
		acquire: c.Compile(s.Acquire), remaining: c.Compile(s.Remaining),
		holder: c.Compile(s.Holder), brk: c.Compile(s.Break), multiTx: s.MultiTx}
	t.asks = s.RequestRelease.Text != ""
	for _, st := range []struct {
		dst *Stmt
		src dialect.SQL
	}{{&t.campaign, s.Campaign}, {&t.proclaim, s.Proclaim}, {&t.leader, s.Leader}, {&t.releaseAll, s.ReleaseAll},
		{&t.acquiredToken, s.AcquiredToken}, {&t.acquireUndo, s.AcquireUndo}, {&t.values, s.Values},
		{&t.setValue, s.SetValue}, {&t.value, s.Value}, {&t.lockValues, s.LockValues},
		{&t.requestRelease, s.RequestRelease}} {
		if st.src.Text != "" {
			*st.dst = c.Compile(st.src)
		}
	}
	return t
}

// Break implements LockTable: it reads the holder's lease, then
// ends that lease, scoped to its (name, owner, token); if the lease changed
// hands in between (released, taken over), it reads the new holder's,
// unless token scopes the break to the lease that held it.
func (t *lockTable) Break(ctx context.Context, name string, token int64) (dialect.LockInfo, bool, error) {
	for {
		held, err := t.infos(ctx, &t.holder, &Params{Name: name})
		if err != nil || len(held) == 0 {
			return dialect.LockInfo{}, false, err
		}
		li := held[0]
		if token != 0 && li.Token != token {
			return li, false, nil
		}
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

// Acquire implements LockTable.
func (t *lockTable) Acquire(ctx context.Context, p dialect.AcquireParams) (int64, error) {
	params := &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL, Channel: t.channel}
	if t.acquiredToken.declared() {
		return t.acquireThenRead(ctx, params)
	}
	return t.run.GrantInt(ctx, &t.acquire, params, t.undo(p.Name, p.Owner))
}

// acquireThenRead is Acquire with LockSQL.AcquiredToken: the upsert, then
// the read of the token it granted, as one grant, repeated as
// dialect.Hooks.GrantTries allows. Should the grant fail after the upsert changed
// a row, the hold granted is dropped again.
func (t *lockTable) acquireThenRead(ctx context.Context, p *Params) (int64, error) {
	var granted bool
	g := Grant{Run: func(ctx context.Context, q Querier, prefix string) (int64, error) {
		granted = false
		n, err := intOn(ctx, q, prefix, &t.acquire, p)
		if err != nil || n == 0 {
			return 0, err
		}
		granted = true
		return intOn(ctx, q, prefix, &t.acquiredToken, p)
	}}
	for try := 1; ; try++ {
		n, err := t.run.Grant(ctx, g)
		if err != nil && granted {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), UndoTimeout)
			_, uerr := t.run.Int(uctx, &t.acquireUndo, p)
			cancel()
			return 0, errors.Join(err, uerr)
		}
		if !t.run.again(ctx, err, try) {
			return n, err
		}
	}
}

// Campaign implements Elections: it grants as Acquire does, and
// stores value as the lease's value, in the same statement or the same
// transaction.
func (t *lockTable) Campaign(ctx context.Context, p dialect.AcquireParams, value string) (int64, error) {
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

// Proclaim implements Elections, after the runner's Check.
func (t *lockTable) Proclaim(ctx context.Context, l dialect.Lease, value string) (bool, error) {
	if err := t.run.check(ctx); err != nil {
		return false, err
	}
	p := t.params(l)
	p.Value = value
	n, err := t.run.Int(ctx, &t.proclaim, p)
	return n == 1, err
}

// Leader implements Elections, after the runner's Check.
func (t *lockTable) Leader(ctx context.Context, name string) (dialect.LeaderInfo, bool, error) {
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

// SetValue implements LockValues, after the runner's Check.
func (t *lockTable) SetValue(ctx context.Context, l dialect.Lease, value string) (bool, error) {
	if err := t.run.check(ctx); err != nil {
		return false, err
	}
	p := t.params(l)
	p.Value = value
	n, err := t.run.Int(ctx, &t.setValue, p)
	return n == 1, err
}

// RequestRelease implements ReleaseRequests, after the runner's Check.
func (t *lockTable) RequestRelease(ctx context.Context, name, reason string) (bool, error) {
	if err := t.run.check(ctx); err != nil {
		return false, err
	}
	n, err := t.run.Int(ctx, &t.requestRelease, &Params{Name: name, Value: reason})
	return n == 1, err
}

// Value implements LockValues.
func (t *lockTable) Value(ctx context.Context, name string) (dialect.LockInfo, bool, error) {
	infos, err := t.scanInfos(ctx, &t.value, &Params{Name: name}, true)
	if err != nil || len(infos) == 0 {
		return dialect.LockInfo{}, false, err
	}
	return infos[0], true, nil
}

// List implements LeaseTable, with the values holders set on their
// leases (LockSQL.LockValues) when the dialect keeps them.
func (t *lockTable) List(ctx context.Context) ([]dialect.LockInfo, error) {
	infos, err := t.leaseTable.List(ctx)
	if err != nil || !t.lockValues.declared() || len(infos) == 0 {
		return infos, err
	}
	values := map[dialect.Lease]string{}
	err = t.run.Each(ctx, &t.lockValues, &Params{}, func(rows *sql.Rows) error {
		var name, owner, value []byte
		var token int64
		if err := rows.Scan(&name, &owner, &token, &value); err != nil {
			return err
		}
		values[dialect.Lease{Name: string(name), Owner: string(owner), Token: token}] = string(value)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the locks' values: %w", err)
	}
	for i, li := range infos {
		infos[i].Value = values[dialect.Lease{Name: li.Name, Owner: li.Owner, Token: li.Token}]
	}
	return infos, nil
}

// Remaining implements LockTable.
func (t *lockTable) Remaining(ctx context.Context, name string) (time.Duration, bool, error) {
	var us int64
	ok, err := t.run.Row(ctx, &t.remaining, &Params{Name: name, Channel: t.channel}, &us)
	return time.Duration(us) * time.Microsecond, ok, err
}

// versionTable implements VersionTable.
type versionTable struct {
	leaseTable
	read, create, take, reenter, floor Stmt
}

// newVersionTable compiles s; a compile error is kept in c.
func newVersionTable(run *Runner, c *Compiler, s dialect.VersionSQL) *versionTable {
	t := &versionTable{leaseTable: newLeaseTable(run, c, s.LeaseSQL),
		read: c.Compile(s.Read), create: c.Compile(s.Create), take: c.Compile(s.Take), reenter: c.Compile(s.Reenter)}
	if s.Floor.Text != "" {
		t.floor = c.Compile(s.Floor)
	}
	return t
}

// Read implements VersionTable.
func (t *versionTable) Read(ctx context.Context, name string) (dialect.VersionRow, bool, error) {
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

// Create implements VersionTable.
func (t *versionTable) Create(ctx context.Context, p dialect.AcquireParams) (int64, error) {
	params := &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL}
	if !t.floor.declared() {
		return t.run.GrantInt(ctx, &t.create, params, t.undo(p.Name, p.Owner))
	}
	// Reads are locking reads, which read the newest rows at any
	// isolation level; READ COMMITTED spares the insert MySQL's gap
	// locks, on which first uses of new names would deadlock.
	g := Grant{InTx: true, TxOptions: &sql.TxOptions{Isolation: sql.LevelReadCommitted},
		Run: func(ctx context.Context, q Querier, prefix string) (int64, error) {
			floor, err := intOn(ctx, q, prefix, &t.floor, params)
			if err != nil {
				return 0, err
			}
			p := *params
			p.Version = floor + 1
			if n, err := intOn(ctx, q, prefix, &t.create, &p); err != nil || n == 0 {
				return 0, err
			}
			return p.Version, nil
		}, Undo: t.undo(p.Name, p.Owner)}
	for try := 1; ; try++ {
		n, err := t.run.Grant(ctx, g)
		if !t.run.again(ctx, err, try) {
			return n, err
		}
	}
}

// Take implements VersionTable.
func (t *versionTable) Take(ctx context.Context, p dialect.SwapParams) (int64, error) {
	return t.run.GrantInt(ctx, &t.take, &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL, Version: p.Version},
		t.undo(p.Name, p.Owner))
}

// Reenter implements VersionTable.
func (t *versionTable) Reenter(ctx context.Context, p dialect.SwapParams) (bool, error) {
	undo := func(ctx context.Context, _ int64) error {
		_, err := t.Release(ctx, dialect.Lease{Name: p.Name, Owner: p.Owner, Token: p.Version}, 0)
		return err
	}
	n, err := t.run.GrantInt(ctx, &t.reenter, &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL, Version: p.Version}, undo)
	return n == 1 && err == nil, err
}
