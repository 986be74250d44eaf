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
// opts, as a grant (see Runner.Grant). A commit whose outcome is unknown
// returns the tokens with the error, for the caller to release.
func (t *LockTable) AcquireAll(ctx context.Context, opts *sql.TxOptions, p dialect.MultiAcquireParams) (tokens []int64, refused string, err error) {
	tokens = make([]int64, len(p.Names))
	granted := false
	_, err = t.run.Grant(ctx, Grant{
		InTx: true, TxOptions: opts,
		Run: func(ctx context.Context, tx Querier, prefix string) (int64, error) {
			for i, name := range p.Names {
				n, err := intOn(ctx, tx, prefix, &t.acquire, &Params{Name: name, Owner: p.Owner, TTL: p.TTL, Channel: t.channel})
				if err != nil {
					return 0, err
				}
				if n == 0 {
					refused = name
					return 0, ErrRollback
				}
				tokens[i] = n
			}
			granted = true
			return 1, nil
		},
		Undo: func(ctx context.Context, _ int64) error {
			var errs []error
			for i, name := range p.Names {
				_, err := t.Release(ctx, dialect.Lease{Name: name, Owner: p.Owner, Token: tokens[i]}, 0)
				errs = append(errs, err)
			}
			return errors.Join(errs...)
		},
	})
	switch {
	case err == nil && refused == "":
		return tokens, "", nil
	case err == nil:
		return nil, refused, nil
	case granted && errors.Is(err, dialect.ErrOutcomeUnknown):
		return tokens, "", err
	}
	return nil, "", err
}

// ReleaseMany runs st, a statement that drops one hold of each lease of
// :leases (:names lists their names) and selects the name of each lease it
// released (and, for a table with Wake, whether that release freed a row
// marked by waiters with tickets, so that Wake runs for it), and
// reports, for each lease of ls, whether it was released.
func (t *LeaseTable) ReleaseMany(ctx context.Context, st *Stmt, ls []dialect.Lease, minHold time.Duration) ([]bool, error) {
	p := &Params{Leases: ls, MinHold: minHold, Channel: t.channel}
	got := make(map[string]bool, len(ls))
	var woken []string
	err := t.run.Each(ctx, st, p, func(rows *sql.Rows) error {
		var (
			name []byte
			wake bool
		)
		dest := []any{&name}
		if t.hasWake {
			dest = append(dest, &wake)
		}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		got[string(name)] = true
		if wake {
			woken = append(woken, string(name))
		}
		return nil
	})
	for _, name := range woken {
		t.freed(ctx, name, freedTicketed)
	}
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(ls))
	for i, l := range ls {
		out[i] = got[l.Name]
	}
	return out, nil
}
