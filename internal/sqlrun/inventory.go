package sqlrun

import (
	"context"
	"database/sql"

	"github.com/sqllock/sqllock/dialect"
)

// The listings for operators (package inspect), beside the tables' List:
// what a lease row does not say about its holder.

// Values implements Elections.
func (t *lockTable) Values(ctx context.Context) (map[dialect.Lease]string, error) {
	if !t.values.declared() {
		return nil, nil
	}
	out := map[dialect.Lease]string{}
	err := t.run.Each(ctx, &t.values, &Params{}, func(rows *sql.Rows) error {
		var name, owner, value []byte
		var token int64
		if err := rows.Scan(&name, &owner, &token, &value); err != nil {
			return err
		}
		out[dialect.Lease{Name: string(name), Owner: string(owner), Token: token}] = string(value)
		return nil
	})
	return out, err
}

// Waiting implements FairTable.
func (t *fairTable) Waiting(ctx context.Context) (map[string]int, error) {
	return t.counts(ctx, &t.waiting)
}

// Limits implements SemaphoreTable.
func (t *semaphoreTable) Limits(ctx context.Context) (map[string]int, error) {
	return t.counts(ctx, &t.limits)
}

// counts runs st, which selects a name and a number per row, if declared.
func (t *leaseTable) counts(ctx context.Context, st *Stmt) (map[string]int, error) {
	if !st.declared() {
		return nil, nil
	}
	out := map[string]int{}
	err := t.run.Each(ctx, st, &Params{}, func(rows *sql.Rows) error {
		var name []byte
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			return err
		}
		out[string(name)] = n
		return nil
	})
	return out, err
}

// Readers implements RWLockTable.
func (t *rwLockTable) Readers(ctx context.Context) ([]dialect.Lease, error) {
	if !t.readers.declared() {
		return nil, nil
	}
	var out []dialect.Lease
	err := t.run.Each(ctx, &t.readers, &Params{}, func(rows *sql.Rows) error {
		var name, owner []byte
		var token int64
		if err := rows.Scan(&name, &owner, &token); err != nil {
			return err
		}
		out = append(out, dialect.Lease{Name: string(name), Owner: string(owner), Token: token})
		return nil
	})
	return out, err
}
