package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// lockSets is the catalogue's Multi.
type lockSets struct{ *Dialect }

var _ dialect.MultiLockTable = lockSets{}

// multiTx are the options of AcquireAll's transaction: READ COMMITTED
// takes no gap locks where REPEATABLE READ would, which keeps transactions
// that insert neighbouring new names apart.
var multiTx = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// AcquireAll implements dialect.MultiLockTable: the lock table's Acquire
// statement for each name, in one READ COMMITTED transaction. Each
// statement locks its name's row until the transaction ends; callers take
// names in the same order, so they do not wait for each other in a cycle
// (a deadlock InnoDB still reports, through a gap lock, wraps
// dialect.ErrTransient: the transaction was rolled back, and may be run
// again). Tokens are those of Acquire (clock tokens above the token
// floor). The TiDB dialect does not offer it.
func (d lockSets) AcquireAll(ctx context.Context, p dialect.MultiAcquireParams) ([]int64, string, error) {
	return d.locks.AcquireAll(ctx, multiTx, p)
}

// releaseChunk is the most leases one release statement reports on (see
// releaseAllSQL).
const releaseChunk = 16

// releaseAllSQL drops one hold of each lease of :leases (:names lists
// their names, in the same order) in one statement, as the lock table's
// Release does for one. MySQL's UPDATE returns no rows, so the statement
// reports through its insert id, LAST_INSERT_ID(expr) evaluated for each
// row it changes (after holds and expires_at, as MySQL assigns left to
// right): bit i says that the i-th lease was released, bit 16+i that the
// release freed a row marked as waited for, by waiters with tickets or
// without (at once, not within a minimum hold; both are rung), and the bits from 32 on carry the call's nonce (:token). Each row
// adds its bits to those of the rows before it, recognised by the nonce;
// a value left by an earlier statement on the connection has another
// nonce, and is started over.
func releaseAllSQL(locks string) sqlrun.SQL {
	return sqlrun.XID(fmt.Sprintf(`UPDATE %[1]s SET holds = holds - 1, expires_at = %[2]s,
  token = token + 0 * LAST_INSERT_ID(
    IF(LAST_INSERT_ID() >> 32 = :token, LAST_INSERT_ID(), :token << 32)
    | (1 << (FIELD(name, :names) - 1))
    | IF(holds = 0 AND (waiters OR ticketed) AND expires_at = %[3]s, 1 << (15 + FIELD(name, :names)), 0))
WHERE name IN (:names) AND (name, owner, token) IN (:leases) AND holds > 0`, locks, releasedExpiry, released))
}

// ReleaseAll implements dialect.MultiLockTable: one statement for up to
// releaseChunk leases (one per chunk beyond). The names it frees that
// someone waits for ring their waiters' bells, as Release does.
func (d lockSets) ReleaseAll(ctx context.Context, ls []dialect.Lease, minHold time.Duration) ([]bool, error) {
	out := make([]bool, len(ls))
	for start := 0; start < len(ls); start += releaseChunk {
		chunk := ls[start:min(start+releaseChunk, len(ls))]
		nonce := releaseNonce()
		id, err := d.run.Int(ctx, &d.releaseAll, &sqlrun.Params{Leases: chunk, MinHold: minHold, Token: nonce})
		if err != nil {
			return nil, err
		}
		if id>>32 != nonce {
			continue // no lease of the chunk was released
		}
		for i, l := range chunk {
			out[start+i] = id>>i&1 == 1
			if id>>(releaseChunk+i)&1 == 1 {
				d.bells.ring(ctx, l.Name)
				d.bells.ringTicket(ctx, sqlrun.LockQueue, l.Name, false)
			}
		}
	}
	return out, nil
}

// releaseNonce returns a random nonce of 31 bits whose top bit is set: in
// the insert id's bits 32 to 62 it never matches what other statements
// leave there (tokens, which are microseconds since 1970, stay below 2^62
// for thousands of years), and matches a value left by another ReleaseAll
// once in 2^30 calls.
func releaseNonce() int64 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint32(b[:])&(1<<30-1) | 1<<30)
}
