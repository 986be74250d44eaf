package sqlrun

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// AcquireAll implements MultiLockTable with the table's own
// Acquire statement, run for each name in one transaction (begun with
// LockSQL.MultiTx), as a grant (see Runner.Grant). A commit whose outcome
// is unknown returns the tokens with the error, for the caller to release.
func (t *lockTable) AcquireAll(ctx context.Context, p dialect.MultiAcquireParams) (tokens []int64, refused string, err error) {
	tokens = make([]int64, len(p.Names))
	granted := false
	_, err = t.run.Grant(ctx, Grant{
		InTx: true, TxOptions: t.multiTx,
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

// ReleaseAll implements MultiLockTable with LockSQL.ReleaseAll,
// and wakes the waiters of the names it frees, as Release does.
//
// The statement's outcome is read by its kind, as dialect.LockSQL's
// ReleaseAll says: rows of (name, number), or, for an ExecID, the bits of
// at most releaseChunk leases (a freed row's waiters, with tickets or
// without, are all woken).
func (t *lockTable) ReleaseAll(ctx context.Context, ls []dialect.Lease, minHold time.Duration) ([]bool, error) {
	for _, l := range ls {
		t.apart.wait(ctx, l.Name)
	}
	got := make(map[string]int64, len(ls))
	var err error
	if t.releaseAll.Kind == dialect.ExecID {
		for start := 0; start < len(ls) && err == nil; start += releaseChunk {
			err = t.releaseBits(ctx, ls[start:min(start+releaseChunk, len(ls))], minHold, got)
		}
	} else {
		err = t.run.Each(ctx, &t.releaseAll, &Params{Leases: ls, MinHold: minHold, Channel: t.channel}, func(rows *sql.Rows) error {
			var (
				name []byte
				n    int64
			)
			if err := rows.Scan(&name, &n); err != nil {
				return err
			}
			got[string(name)] = n
			return nil
		})
	}
	out := make([]bool, len(ls))
	for i, l := range ls {
		n := got[l.Name]
		out[i] = n >= dropped
		if n > dropped {
			t.freed(ctx, l.Name, n)
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// releaseChunk is the most leases an ExecID ReleaseAll statement reports
// on.
const releaseChunk = 16

// releaseBits runs an ExecID ReleaseAll statement on chunk (see
// ReleaseAll) and records each lease's number in got.
func (t *lockTable) releaseBits(ctx context.Context, chunk []dialect.Lease, minHold time.Duration, got map[string]int64) error {
	nonce := releaseNonce()
	id, err := t.run.Int(ctx, &t.releaseAll, &Params{Leases: chunk, MinHold: minHold, Token: nonce, Channel: t.channel})
	if err != nil || id>>32 != nonce {
		return err // or no lease of the chunk was released
	}
	for i, l := range chunk {
		switch {
		case id>>(releaseChunk+i)&1 == 1:
			got[l.Name] = freedBoth
		case id>>i&1 == 1:
			got[l.Name] = dropped
		}
	}
	return nil
}

// releaseNonce returns a random nonce of 31 bits whose top bit is set: in
// the insert id's bits 32 to 62 it never matches what other statements
// leave there (MySQL's tokens, microseconds since 1970, stay below 2^62
// for thousands of years), and matches a value left by another ReleaseAll
// once in 2^30 calls.
func releaseNonce() int64 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint32(b[:])&(1<<30-1) | 1<<30)
}
