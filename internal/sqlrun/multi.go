package sqlrun

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// AcquireAll implements dialect.MultiLockTable.AcquireAll with the table's
// own Acquire statement, run for each name in one transaction begun with
// opts on a pinned connection. The statements run as a grant does (see
// Runner.GrantInt): a context that ends while they run cancels them on the
// server, and the transaction is rolled back; the commit is not cancelled.
func (t *LockTable) AcquireAll(ctx context.Context, opts *sql.TxOptions, p dialect.MultiAcquireParams) (tokens []int64, refused string, err error) {
	r := t.run
	if r.Check != nil {
		if err := r.Check(ctx); err != nil {
			return nil, "", err
		}
	}
	conn, err := r.Pin(ctx)
	if err != nil {
		return nil, "", err
	}
	var (
		prefix string
		cancel func(context.Context) error
	)
	if r.Cancel != nil && ctx.Done() != nil {
		if prefix, cancel, err = r.Cancel(ctx, conn); err != nil {
			_ = dialect.Discard(conn)
			return nil, "", r.Wrap(err)
		}
	}
	// The transaction outlives ctx (its end is decided below), but the
	// BEGIN does not: on SQLite it may wait for another connection's write
	// lock.
	bctx, bcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer bcancel()
	stop := context.AfterFunc(ctx, bcancel)
	tx, err := conn.BeginTx(bctx, opts)
	if !stop() {
		if err == nil {
			_ = tx.Rollback()
		}
		_ = dialect.Discard(conn)
		return nil, "", errors.Join(ctx.Err(), r.Wrap(err))
	}
	if err != nil {
		_ = dialect.Discard(conn)
		return nil, "", r.Wrap(err)
	}
	tokens = make([]int64, len(p.Names))
	cancelled, err := Cancellable(ctx, cancel, func(qctx context.Context) error {
		for i, name := range p.Names {
			n, err := intOn(qctx, tx, prefix, &t.acquire, &Params{Name: name, Owner: p.Owner, TTL: p.TTL, Channel: t.channel})
			if err != nil {
				return err
			}
			if n == 0 {
				refused = name
				return nil
			}
			tokens[i] = n
		}
		return nil
	})
	if cancelled || err != nil || refused != "" {
		_ = tx.Rollback()
		if cancelled {
			// The server may still act on the cancel.
			_ = dialect.Discard(conn)
			return nil, "", errors.Join(ctx.Err(), r.Wrap(err))
		}
		conn.Close()
		if err != nil {
			return nil, "", r.Wrap(err)
		}
		return nil, refused, nil
	}
	if err := tx.Commit(); err != nil {
		_ = dialect.Discard(conn)
		err = r.Wrap(err)
		if errors.Is(err, dialect.ErrOutcomeUnknown) {
			return tokens, "", err
		}
		return nil, "", err
	}
	conn.Close()
	return tokens, "", nil
}

// ReleaseMany runs st, a statement that drops one hold of each lease of
// :leases (:names lists their names) and selects the name of each lease it
// released, and reports, for each lease of ls, whether it was released.
func (t *LeaseTable) ReleaseMany(ctx context.Context, st *Stmt, ls []dialect.Lease, minHold time.Duration) ([]bool, error) {
	p := &Params{Leases: ls, MinHold: minHold, Channel: t.channel}
	got := make(map[string]bool, len(ls))
	err := t.run.Each(ctx, st, p, func(rows *sql.Rows) error {
		var name []byte
		if err := rows.Scan(&name); err != nil {
			return err
		}
		got[string(name)] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(ls))
	for i, l := range ls {
		out[i] = got[l.Name]
	}
	return out, nil
}
