package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// semaphoreTables compiles the semaphores' statements. An acquire is one READ
// COMMITTED transaction: its first statement locks the name's head row
// and draws the token, and each later statement reads what the grants
// before it committed. A token is the larger of the name's previous token
// plus one and the grant's time in microseconds on the server's real clock
// (see epoch.go), kept in the head row, which is never deleted. A release
// that frees a permit of a name some process waits for rings that
// process's bell, as the lock table's does (see wake.go): the marks of
// waiters (waiters) and of tickets (ticketed) are kept on the head row,
// and copied by each grant into the holder row it adds. The TiDB dialect
// does not offer semaphores.

// semaphoreSQL declares the semaphore tables' statements.
func semaphoreSQL(sems, holders string) dialect.SemaphoreSQL {
	s := dialect.SemaphoreSQL{LeaseSQL: leaseSQL(holders, "token"), Isolation: sql.LevelReadCommitted, Announces: true}
	s.Release = wakingRelease(holders, "token", true)
	// The insert id is the token drawn.
	// Draw also gives a name whose limit was never set, and that has no
	// live holder, the grant's limit; Take counts against the head row's.
	// The live holders are counted in a derived table of the insert's
	// SELECT, a consistent read under READ COMMITTED: a subquery of the
	// update would lock the holder rows, which releases lock before the
	// head row.
	s.Draw = dialect.XID(fmt.Sprintf(`INSERT INTO %[1]s (name, lim, token)
SELECT :name, :limit, LAST_INSERT_ID(%[2]s)
FROM (SELECT COUNT(*) AS n FROM %[4]s h WHERE h.name = :name AND h.expires_at > %[5]s) AS c
ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(%[3]s),
  lim = IF(lim_fixed OR c.n > 0, lim, VALUES(lim))`,
		sems, clockToken("0", now), clockToken("token", now), holders, now))
	s.Expire = dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE name = :name AND expires_at <= %s`, holders, now))
	s.Take = semaphoreTake(sems, holders, "TRUE")
	// SetLimit waits for the head row's lock, which a grant in progress
	// holds until it commits. As an Exec it wakes whoever waits.
	s.SetLimit = dialect.X(fmt.Sprintf(`INSERT INTO %s (name, lim, token, lim_fixed) VALUES (:name, :limit, %s, TRUE)
ON DUPLICATE KEY UPDATE lim = VALUES(lim), lim_fixed = TRUE`, sems, clockToken("0", now)))
	s.Available = dialect.Q(fmt.Sprintf(`SELECT s.lim, (SELECT COUNT(*) FROM %s h WHERE h.name = :name AND h.expires_at > %s), s.lim_fixed
FROM %s s WHERE s.name = :name`, holders, now, sems))
	// A free permit (a holder row of an ended lease stays until the next
	// grant or the reaper deletes it) means: look again at once.
	s.Limits = dialect.Q(fmt.Sprintf(`SELECT name, lim FROM %s`, sems))
	s.Remaining = dialect.Q(fmt.Sprintf(`SELECT IF(COUNT(*) < (SELECT s.lim FROM %[3]s s WHERE s.name = :name), 0,
  TIMESTAMPDIFF(MICROSECOND, %[1]s, MIN(expires_at)))
FROM %[2]s WHERE name = :name AND expires_at > %[1]s HAVING COUNT(*) > 0`, now, holders, sems))
	return s
}

// semaphoreTake is the grant of a permit under the head row's lock, with
// the further condition free on a new permit, counting against the head
// row's limit (which Draw set). The insert id is the token
// granted: :token for a new row, or for the owner's row of an ended lease,
// which it takes over; the row's own token for a re-entry; 0 when the
// owner's row is released but kept by a minimum hold. The head row,
// locked by the transaction, gives its marks (waiters, ticketed) to a new
// permit.
// MySQL assigns left to right: expires_at, last, still reads the row's
// own expiry. The live holders are counted in a derived table: MySQL
// refuses a subquery on the table an INSERT writes, but not its FROM.
func semaphoreTake(sems, holders, free string) dialect.SQL {
	ended := holders + ".expires_at <= VALUES(acquired_at)"
	return dialect.XID(fmt.Sprintf(`INSERT INTO %[1]s (name, owner, token, holds, acquired_at, expires_at, waiters, ticketed)
SELECT :name, :owner, LAST_INSERT_ID(:token), 1, t.at, t.at + INTERVAL :ttl MICROSECOND, s.waiters, s.ticketed
FROM (SELECT %[3]s AS at) AS t JOIN %[2]s s ON s.name = :name
  JOIN (SELECT COUNT(*) AS n, COALESCE(MAX(h.owner = :owner AND h.holds > 0), 0) AS mine
    FROM %[1]s h WHERE h.name = :name AND h.expires_at > %[3]s) AS c
WHERE (%[4]s AND c.n < s.lim) OR c.mine
ON DUPLICATE KEY UPDATE
  token       = IF(%[5]s, LAST_INSERT_ID(VALUES(token)),
                  IF(%[1]s.holds > 0, LAST_INSERT_ID(%[1]s.token), %[1]s.token + LAST_INSERT_ID(0))),
  holds       = IF(%[5]s, 1, IF(%[1]s.holds > 0, %[1]s.holds + 1, 0)),
  acquired_at = IF(%[5]s, VALUES(acquired_at), %[1]s.acquired_at),
  waiters     = IF(%[5]s, VALUES(waiters), %[1]s.waiters),
  ticketed    = IF(%[5]s, VALUES(ticketed), %[1]s.ticketed),
  expires_at  = IF(%[5]s, VALUES(expires_at),
                  IF(%[1]s.holds > 0, GREATEST(%[1]s.expires_at, VALUES(expires_at)), %[1]s.expires_at))`,
		holders, sems, now, free, ended))
}

// semaphoreSQLs declares the semaphore statements in cat, and compiles the
// reaper's.
func (d *Dialect) semaphoreSQLs(c *sqlrun.Compiler, cat *dialect.Catalogue) {
	sems, holders, tickets := "sqllock_semaphores", "sqllock_semaphore_holders", "sqllock_semaphore_tickets"
	sqlrun.Qualify(d.database, quote, &sems, &holders, &tickets)
	cat.Semaphores = ptr(semaphoreSQL(sems, holders))
	addressed := !d.noWakeups
	cat.FairSemaphores = ptr(fairSemaphoreSQL(sems, holders, tickets, d.waker, addressed))
	if addressed {
		cat.WakingSemaphores = ptr(wakingSemaphoreSQL(sems, holders, tickets, d.waker))
	}
	d.reap.semTickets = reapTicketsSQL(tickets)
	d.reapSems = c.Compile(dialect.Q(fmt.Sprintf(`SELECT name, owner FROM %s WHERE expires_at <= %s
ORDER BY expires_at LIMIT :limit FOR UPDATE SKIP LOCKED`, holders, now)))
	d.deleteHolder = fmt.Sprintf(`DELETE FROM %s WHERE name = ? AND owner = ?`, holders)
}

// reapSemaphores deletes a batch of expired and released holder rows of
// the semaphores (see reapHolders).
func (d *Dialect) reapSemaphores(ctx context.Context, conn *sql.Conn, limit int) (int, error) {
	return reapHolders(ctx, conn, &d.reapSems, d.deleteHolder, limit)
}

// reapHolders deletes a batch of expired and released holder rows of a
// semaphore or read/write lock table: it locks them with expired, skipping
// rows others have locked, and deletes them one by one by primary key with
// del (name, owner), so that it never waits while holding rows an acquirer
// may wait for. Tokens are kept in the head rows, which stay.
func reapHolders(ctx context.Context, conn *sql.Conn, expired *sqlrun.Stmt, del string, limit int) (int, error) {
	return reapTx(ctx, conn, func(tx *sql.Tx) (int, error) {
		var keys [][2][]byte
		err := sqlrun.EachOn(ctx, tx, wrap, expired, &sqlrun.Params{Limit: limit}, func(rows *sql.Rows) error {
			var k [2][]byte
			if err := rows.Scan(&k[0], &k[1]); err != nil {
				return err
			}
			keys = append(keys, k)
			return nil
		})
		if err != nil || len(keys) == 0 {
			return 0, err
		}
		st, err := tx.PrepareContext(ctx, del)
		if err != nil {
			return 0, wrap(err)
		}
		defer st.Close()
		n := 0
		for _, k := range keys {
			res, err := st.ExecContext(ctx, k[0], k[1])
			if err != nil {
				return 0, wrap(err)
			}
			deleted, err := res.RowsAffected()
			if err != nil {
				return 0, wrap(err)
			}
			n += int(deleted)
		}
		return n, nil
	})
}
