package dialecttest

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// rowLockChecks run on a dialect.Pessimistic.
var rowLockChecks = []struct {
	name  string
	check func(t *testing.T, e *env, d dialect.Pessimistic)
}{
	{"Modes", checkRowLockModes},
	{"Tokens", checkRowLockTokens},
	{"Wait", checkRowLockWait},
	{"CancelWait", checkRowLockCancelWait},
	{"LockTimeout", checkLockTimeout},
	{"KilledSession", checkKilledSession},
	{"Ping", checkRowLockPing},
}

// rowLocks is a pessimistic dialect on a pool of the subtest's own, whose
// connections in use are counted: a lock pins one, and a failed LockRow
// leaves none pinned.
type rowLocks struct {
	e    *env
	d    dialect.Pessimistic
	db   *sql.DB // d's pool
	held int     // locks held, each pinning a connection
}

func (e *env) rowLocks() *rowLocks {
	d := e.Open(e.t, 0)
	return &rowLocks{e: e, d: d.Catalogue().Pessimistic, db: d.DB()}
}

// lock takes the row lock p asks for; with refused, it checks that it is
// refused with ErrLocked instead.
func (r *rowLocks) lock(p dialect.RowLockParams, refused bool) *dialect.RowLock {
	t := r.e.t
	t.Helper()
	rl, err := r.d.LockRow(r.e.ctx, p)
	switch {
	case refused && !errors.Is(err, dialect.ErrLocked):
		t.Fatalf("LockRow(%+v) of a row locked in a conflicting mode: %v, want ErrLocked", p, err)
	case !refused && err != nil:
		t.Fatalf("LockRow(%+v): %v", p, err)
	case err == nil:
		r.held++
		// A check that fails with the lock held must not leave its
		// transaction open: the harness could not drop the tables.
		t.Cleanup(func() {
			_ = rl.Tx.Rollback()
			_ = rl.Close(context.Background())
		})
	}
	r.pinned()
	return rl
}

// unlock ends rl's transaction and gives its connection back.
func (r *rowLocks) unlock(rl *dialect.RowLock) {
	r.e.t.Helper()
	r.e.must(rl.Tx.Rollback(), "rollback")
	r.e.must(rl.Close(r.e.ctx), "close")
	r.held--
	r.pinned()
}

// pinned checks that each held lock, and nothing else, pins a connection.
func (r *rowLocks) pinned() {
	r.e.t.Helper()
	if n := r.db.Stats().InUse; n != r.held {
		r.e.t.Fatalf("%d connections in use with %d locks held", n, r.held)
	}
}

// An exclusive lock excludes every other; shared locks exclude exclusive
// ones only; a NOWAIT refusal wraps ErrLocked and pins nothing; other names
// are not affected.
func checkRowLockModes(t *testing.T, e *env, _ dialect.Pessimistic) {
	r := e.rowLocks()
	const name = "modes"
	x := dialect.RowLockParams{Name: name}
	s := dialect.RowLockParams{Name: name, Shared: true}
	if e.Dialect.Catalogue().NoSharedRowLock {
		for _, wait := range []bool{false, true} {
			s.Wait = wait
			if _, err := r.d.LockRow(e.ctx, s); !errors.Is(err, dialect.ErrUnsupported) {
				t.Fatalf("LockRow(%+v) of a dialect without shared row locks: %v, want ErrUnsupported", s, err)
			}
			r.pinned()
		}
		s = x // the checks below, with exclusive locks only
	}
	w := r.lock(x, false)
	r.lock(x, true)
	r.lock(s, true)
	other := r.lock(dialect.RowLockParams{Name: "modes-other"}, false)
	r.unlock(w)
	r.unlock(other)
	if e.Dialect.Catalogue().NoSharedRowLock {
		return
	}

	s1 := r.lock(s, false)
	s2 := r.lock(s, false)
	r.lock(x, true)
	r.unlock(s1)
	r.lock(x, true)
	r.unlock(s2)
	r.unlock(r.lock(x, false))
}

// Each lock's token is greater than every token drawn before, for any name
// and whatever became of the earlier transactions.
func checkRowLockTokens(t *testing.T, e *env, _ dialect.Pessimistic) {
	r := e.rowLocks()
	var last int64
	next := func(p dialect.RowLockParams, after string) *dialect.RowLock {
		t.Helper()
		rl := r.lock(p, false)
		if rl.Token <= last {
			t.Fatalf("token %d after %s, want > %d", rl.Token, after, last)
		}
		last = rl.Token
		return rl
	}
	a := next(dialect.RowLockParams{Name: "tokens-a"}, "nothing")
	r.unlock(a)
	a = next(dialect.RowLockParams{Name: "tokens-a"}, "a rolled back lock of the name")
	b := next(dialect.RowLockParams{Name: "tokens-b"}, "a lock of another name")
	c1, c2 := dialect.RowLockParams{Name: "tokens-c", Shared: true}, dialect.RowLockParams{Name: "tokens-c", Shared: true}
	if e.Dialect.Catalogue().NoSharedRowLock { // two exclusive locks of two names
		c1, c2 = dialect.RowLockParams{Name: "tokens-c"}, dialect.RowLockParams{Name: "tokens-d"}
	}
	s1 := next(c1, "exclusive locks")
	s2 := next(c2, "a shared lock of the name")
	r.e.must(a.Tx.Commit(), "commit")
	r.e.must(a.Close(e.ctx), "close")
	r.held--
	a = next(dialect.RowLockParams{Name: "tokens-a"}, "a committed lock of the name")
	for _, rl := range []*dialect.RowLock{a, b, s1, s2} {
		r.unlock(rl)
	}
}

// A waiting LockRow gets the lock once the holder's transaction ends, with
// a larger token.
func checkRowLockWait(t *testing.T, e *env, d dialect.Pessimistic) {
	const name = "wait"
	r := e.rowLocks()
	holder := r.lock(dialect.RowLockParams{Name: name}, false)
	got := make(chan *dialect.RowLock, 1)
	go func() {
		rl, err := d.LockRow(e.ctx, dialect.RowLockParams{Name: name, Wait: true})
		if err != nil {
			t.Errorf("waiting LockRow: %v", err)
		}
		got <- rl
	}()
	e.eventually("the waiter waits in the database", func() bool { return e.waiting() > 0 })
	r.unlock(holder)
	w := await(e, "the waiter gets the lock", got)
	if w == nil {
		t.FailNow()
	}
	defer func() {
		_ = w.Tx.Rollback()
		_ = w.Close(e.ctx)
	}()
	if w.Token <= holder.Token {
		t.Fatalf("waiter's token %d, want > %d", w.Token, holder.Token)
	}
}

// A waiting LockRow whose context ends returns an error wrapping the
// context's, having ended its wait on the server too, and pins nothing;
// nobody got the lock meanwhile.
func checkRowLockCancelWait(t *testing.T, e *env, _ dialect.Pessimistic) {
	const name = "cancel"
	r := e.rowLocks()
	holder := r.lock(dialect.RowLockParams{Name: name}, false)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	type result struct {
		rl  *dialect.RowLock
		err error
	}
	got := make(chan result, 1)
	go func() {
		rl, err := r.d.LockRow(ctx, dialect.RowLockParams{Name: name, Wait: true})
		got <- result{rl, err}
	}()
	e.eventually("the waiter waits in the database", func() bool {
		select {
		case res := <-got:
			t.Fatalf("waiting LockRow returned while the row was locked: %+v", res)
		default:
		}
		return e.waiting() > 0
	})
	cancel()
	res := await(e, "the cancelled LockRow returns", got)
	if !errors.Is(res.err, context.Canceled) || res.rl != nil {
		t.Fatalf("LockRow whose context ended while it waited: %+v, want an error wrapping context.Canceled", res)
	}
	r.pinned()
	// The server may take a moment to show the cancelled statement gone.
	e.eventually("no statement waits on the server after the cancel", func() bool { return e.waiting() == 0 })
	r.unlock(holder)
	r.unlock(r.lock(dialect.RowLockParams{Name: name}, false))
}

// A lock wait in a transaction of BeginTx ends after its lock timeout with
// an error that Classify maps to ErrLocked; Classify leaves nil alone and
// never calls an error that is not the database's a lock or a conflict.
func checkLockTimeout(t *testing.T, e *env, d dialect.Pessimistic) {
	tb := e.table(Locks)
	l := e.grant(tb, "timeout", "o")
	end, err := e.HoldRow(e.ctx, Locks, l.Name)
	e.must(err, "HoldRow")
	defer end()
	rt, err := d.BeginTx(e.ctx, nil, 100*time.Millisecond)
	e.must(err, "BeginTx")
	// Guard share-locks the row, which the held transaction has locked
	// for update: the statement waits, until the lock timeout.
	_, err = tb.stmts.Guard(e.ctx, rt.Tx, l)
	if err == nil || !errors.Is(d.Classify(err), dialect.ErrLocked) {
		t.Errorf("lock wait past the lock timeout: %v, classified %v; want ErrLocked", err, d.Classify(err))
	}
	_ = rt.Tx.Rollback()
	e.must(rt.Close(e.ctx), "closing the transaction's connection")
	e.must(end(), "ending the held row's transaction")

	if err := d.Classify(nil); err != nil {
		t.Errorf("Classify(nil) = %v", err)
	}
	plain := errors.New("not the database's")
	if c := d.Classify(plain); !errors.Is(c, plain) || errors.Is(c, dialect.ErrLocked) || errors.Is(c, dialect.ErrTransient) {
		t.Errorf("Classify(%v) = %v, want it kept, and neither ErrLocked nor ErrTransient", plain, c)
	}
}

// The lock of a holder whose session was killed goes to the next one, with
// a larger token; the holder's own statements fail.
func checkKilledSession(t *testing.T, e *env, _ dialect.Pessimistic) {
	if e.Kill == nil {
		t.Skip("the harness cannot kill sessions")
	}
	// A pool of its own, which the killed connection cannot harm.
	d := e.rowLocks().d
	const name = "killed"
	holder, err := d.LockRow(e.ctx, dialect.RowLockParams{Name: name})
	e.must(err, "LockRow")
	e.must(e.Kill(e.ctx, holder.Tx), "Kill")
	next, err := d.LockRow(e.ctx, dialect.RowLockParams{Name: name, Wait: true})
	e.must(err, "LockRow after the holder was killed")
	if next.Token <= holder.Token {
		t.Errorf("token %d after the killed holder's %d", next.Token, holder.Token)
	}
	if err := holder.Tx.Commit(); err == nil {
		t.Error("the killed holder's commit succeeded")
	}
	_ = holder.Close(e.ctx)
	e.must(next.Tx.Rollback(), "rollback")
	e.must(next.Close(e.ctx), "close")
}

// Catalogue.Ping, where the dialect has one, succeeds on the connection of
// a live lock in either mode, and fails on one whose session was killed.
func checkRowLockPing(t *testing.T, e *env, _ dialect.Pessimistic) {
	ping := e.Dialect.Catalogue().Ping
	if ping == nil {
		t.Skip("the dialect's keep-alives are its driver's Ping")
	}
	pingConn := func(rl *dialect.RowLock, shared bool) error {
		var err error
		if rerr := rl.Conn.Raw(func(dc any) error { err = ping(e.ctx, dc, shared); return nil }); rerr != nil {
			return rerr
		}
		return err
	}
	d := e.rowLocks().d // a pool of its own, which a killed connection cannot harm
	modes := []bool{false}
	if !e.Dialect.Catalogue().NoSharedRowLock {
		modes = append(modes, true)
	}
	for _, shared := range modes {
		rl, err := d.LockRow(e.ctx, dialect.RowLockParams{Name: "ping", Shared: shared})
		e.must(err, "LockRow")
		e.must(pingConn(rl, shared), "Ping of a live lock's connection")
		e.must(rl.Tx.Rollback(), "rollback")
		e.must(rl.Close(e.ctx), "close")
	}
	if e.Kill == nil {
		return
	}
	holder, err := d.LockRow(e.ctx, dialect.RowLockParams{Name: "ping"})
	e.must(err, "LockRow")
	e.must(e.Kill(e.ctx, holder.Tx), "Kill")
	// The next holder's grant says the killed session is gone.
	next, err := d.LockRow(e.ctx, dialect.RowLockParams{Name: "ping", Wait: true})
	e.must(err, "LockRow after the holder was killed")
	if err := pingConn(holder, false); err == nil {
		t.Error("Ping of a killed session's connection succeeded")
	}
	_ = holder.Tx.Rollback() // fails: the session is gone
	_ = holder.Close(e.ctx)
	e.must(next.Tx.Rollback(), "rollback")
	e.must(next.Close(e.ctx), "close")
}
