package sqlrun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// SemaphoreSQL declares the statements of the semaphore tables: a head row
// per name (its limit, and for dialects without a sequence the name's last
// token) and a holder row per (name, owner), whose lease statements are
// LeaseSQL's. An acquire runs them in one transaction, in which the head
// row's lock serialises the grants of a name:
//
//	Head...   lock :name's head row, creating it with :limit; the last
//	          statement selects the row's limit
//	Expire    delete :name's holders whose lease has expired
//	Mine      select holds and token of (:name, :owner)'s holder row
//	Reenter   add a hold to (:name, :owner)'s row and extend it to :ttl
//	Count     select the number of :name's holder rows
//	SetLimit  set the head row's limit to :limit
//	Token     give the next token of :name as its number
//	Insert    insert (:name, :owner) with :token, one hold, for :ttl
//
// Every holder row left after Expire counts as a holder, whatever its
// expiry by the time Count runs: a lease that was live when Expire ran may
// have been renewed since, by a renewal that Count cannot see yet.
type SemaphoreSQL struct {
	LeaseSQL
	Head                                                  []SQL
	Expire, Mine, Reenter, Count, SetLimit, Token, Insert SQL
	// Remaining selects the microseconds until :name's first holder's
	// lease ends (0 or less: look again at once), and no row when it has
	// no holder.
	Remaining SQL
	// Isolation is the isolation level of the acquire's transaction.
	Isolation sql.IsolationLevel
	// Announces says whether Release announces freed permits.
	Announces bool
}

// SemaphoreTable implements dialect.SemaphoreTable.
type SemaphoreTable struct {
	LeaseTable
	head                                                  []Stmt
	expire, mine, reenter, count, setLimit, token, insert Stmt
	remaining                                             Stmt
	isolation                                             sql.IsolationLevel
	announces                                             bool
}

// NewSemaphoreTable compiles s; a compile error is kept in c.
func NewSemaphoreTable(run *Runner, c *Compiler, s SemaphoreSQL) *SemaphoreTable {
	t := &SemaphoreTable{LeaseTable: newLeaseTable(run, c, s.LeaseSQL),
		expire: c.Compile(s.Expire), mine: c.Compile(s.Mine), reenter: c.Compile(s.Reenter),
		count: c.Compile(s.Count), setLimit: c.Compile(s.SetLimit), token: c.Compile(s.Token),
		insert: c.Compile(s.Insert), remaining: c.Compile(s.Remaining),
		isolation: s.Isolation, announces: s.Announces}
	for _, h := range s.Head {
		t.head = append(t.head, c.Compile(h))
	}
	return t
}

// Announces implements dialect.SemaphoreTable.
func (t *SemaphoreTable) Announces() bool { return t.announces }

// Remaining implements dialect.SemaphoreTable.
func (t *SemaphoreTable) Remaining(ctx context.Context, name string) (time.Duration, bool, error) {
	var us int64
	ok, err := t.run.Row(ctx, &t.remaining, &Params{Name: name, Channel: t.channel}, &us)
	return time.Duration(max(us, 0)) * time.Microsecond, ok, err
}

// Acquire implements dialect.SemaphoreTable. Its transaction runs on a
// pinned connection and is ended on the server when ctx ends, as
// Runner.GrantInt ends a grant.
func (t *SemaphoreTable) Acquire(ctx context.Context, p dialect.SemaphoreParams) (int64, error) {
	r := t.run
	if r.Check != nil {
		if err := r.Check(ctx); err != nil {
			return 0, err
		}
	}
	conn, err := r.Pin(ctx)
	if err != nil {
		return 0, err
	}
	var (
		prefix string
		cancel func(context.Context) error
	)
	if r.Cancel != nil && ctx.Done() != nil {
		if prefix, cancel, err = r.Cancel(ctx, conn); err != nil {
			_ = dialect.Discard(conn)
			return 0, r.Wrap(err)
		}
	}
	params := &Params{Name: p.Name, Owner: p.Owner, TTL: p.TTL, Limit: p.Limit, Channel: t.channel}
	var token int64
	cancelled, err := Cancellable(ctx, cancel, func(qctx context.Context) error {
		token, err = t.grant(qctx, conn, prefix, params)
		return err
	})
	var mismatch *errLimit
	if err != nil && !errors.As(err, &mismatch) { // a mismatch is the table's answer, not the driver's
		err = r.Wrap(err)
	}
	if cancelled {
		_ = dialect.Discard(conn)
		if err != nil {
			return 0, errors.Join(ctx.Err(), err)
		}
		if r.Durable && token != 0 {
			return t.undoUndurable(ctx, dialect.Lease{Name: p.Name, Owner: p.Owner, Token: token}, token, errUndurable)
		}
		return token, nil
	}
	if err != nil {
		// A transaction whose outcome is unknown leaves the connection
		// in an unknown state.
		if errors.Is(err, dialect.ErrOutcomeUnknown) {
			_ = dialect.Discard(conn)
		} else {
			conn.Close()
		}
		return 0, err
	}
	conn.Close()
	return token, nil
}

// errLimit carries a limit mismatch out of the transaction unwrapped by
// the dialect's Wrap.
type errLimit struct{ have, want int64 }

func (e *errLimit) Error() string {
	return fmt.Sprintf("%v: the semaphore's holders use limit %d, this acquire asks for %d", dialect.ErrLimitMismatch, e.have, e.want)
}

func (e *errLimit) Unwrap() error { return dialect.ErrLimitMismatch }

// grant runs the acquire's transaction on conn.
func (t *SemaphoreTable) grant(ctx context.Context, conn *sql.Conn, prefix string, p *Params) (int64, error) {
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: t.isolation})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	row := func(st *Stmt, dest ...any) (bool, error) {
		text, args := st.bind(p)
		err := tx.QueryRowContext(ctx, prefix+text, args...).Scan(dest...)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	}
	var limit int64
	for i := range t.head {
		if i < len(t.head)-1 {
			if _, err := intOn(ctx, tx, prefix, &t.head[i], p); err != nil {
				return 0, err
			}
			continue
		}
		if _, err := row(&t.head[i], &limit); err != nil {
			return 0, err
		}
	}
	if _, err := intOn(ctx, tx, prefix, &t.expire, p); err != nil {
		return 0, err
	}
	var holds, token int64
	mine, err := row(&t.mine, &holds, &token)
	if err != nil {
		return 0, err
	}
	if mine {
		if holds == 0 {
			// Released within its minimum hold: nobody, this owner
			// included, takes the permit back before it ends.
			return 0, tx.Commit()
		}
		if limit != int64(p.Limit) {
			return 0, &errLimit{limit, int64(p.Limit)}
		}
		if _, err := intOn(ctx, tx, prefix, &t.reenter, p); err != nil {
			return 0, err
		}
		return token, tx.Commit()
	}
	var n int64
	if _, err := row(&t.count, &n); err != nil {
		return 0, err
	}
	if limit != int64(p.Limit) {
		if n > 0 {
			return 0, &errLimit{limit, int64(p.Limit)}
		}
		if _, err := intOn(ctx, tx, prefix, &t.setLimit, p); err != nil {
			return 0, err
		}
	}
	if n >= int64(p.Limit) {
		// Full; the expired holders dropped stay dropped.
		return 0, tx.Commit()
	}
	if p.Token, err = intOn(ctx, tx, prefix, &t.token, p); err != nil {
		return 0, err
	}
	if _, err := intOn(ctx, tx, prefix, &t.insert, p); err != nil {
		return 0, err
	}
	return p.Token, tx.Commit()
}
