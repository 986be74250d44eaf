package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sqllock/sqllock/internal/sqlrun"
)

// semaphoreTables compiles the semaphores' statements. An acquire is one READ
// COMMITTED transaction: its first statements lock the name's head row, and
// each later statement reads what the grants before it committed. A
// token is the larger of the name's previous token plus one and the
// grant's time in microseconds on the server's real clock (see epoch.go),
// kept in the head row, which is never deleted. A release that frees a
// permit of a name some process waits for rings that process's bell, as
// the lock table's does (see wake.go): the waiters hint is kept on the
// head row, and copied by each grant into the holder row it adds. The
// TiDB dialect does not offer semaphores.

// semaphoreSQL declares the semaphore tables' statements.
func semaphoreSQL(sems, holders string) sqlrun.SemaphoreSQL {
	s := sqlrun.SemaphoreSQL{LeaseSQL: leaseSQL(holders, "token"), Isolation: sql.LevelReadCommitted, Announces: true}
	s.Head = []sqlrun.SQL{
		sqlrun.X(fmt.Sprintf(`INSERT INTO %s (name, lim, token) VALUES (:name, :limit, 0) ON DUPLICATE KEY UPDATE lim = lim`, sems)),
		sqlrun.Q(fmt.Sprintf(`SELECT lim FROM %s WHERE name = :name FOR UPDATE`, sems)),
	}
	s.Expire = sqlrun.X(fmt.Sprintf(`DELETE FROM %s WHERE name = :name AND expires_at <= %s`, holders, now))
	s.Mine = sqlrun.Q(fmt.Sprintf(`SELECT holds, token FROM %s WHERE name = :name AND owner = :owner FOR UPDATE`, holders))
	s.Reenter = sqlrun.X(fmt.Sprintf(`UPDATE %s SET holds = holds + 1,
  expires_at = GREATEST(expires_at, %s + INTERVAL :ttl MICROSECOND)
WHERE name = :name AND owner = :owner`, holders, now))
	s.Count = sqlrun.Q(fmt.Sprintf(`SELECT COUNT(*) FROM %s WHERE name = :name`, holders))
	s.SetLimit = sqlrun.X(fmt.Sprintf(`UPDATE %s SET lim = :limit WHERE name = :name`, sems))
	// The insert id is the new token.
	s.Token = sqlrun.XID(fmt.Sprintf(`UPDATE %s SET token = LAST_INSERT_ID(%s) WHERE name = :name`, sems, clockToken("token", now)))
	// The head row, locked by the transaction, gives its waiters hint.
	s.Insert = sqlrun.X(fmt.Sprintf(`INSERT INTO %[1]s (name, owner, token, holds, acquired_at, expires_at, waiters)
SELECT :name, :owner, :token, 1, t.at, t.at + INTERVAL :ttl MICROSECOND, s.waiters
FROM (SELECT %[2]s AS at) AS t JOIN %[3]s s ON s.name = :name`, holders, now, sems))
	s.Remaining = sqlrun.Q(fmt.Sprintf(`SELECT TIMESTAMPDIFF(MICROSECOND, %s, MIN(expires_at)) FROM %s
WHERE name = :name HAVING COUNT(*) > 0`, now, holders))
	return s
}

// semaphoreTables compiles the semaphore statements.
func (d *Dialect) semaphoreTables(c *sqlrun.Compiler) {
	sems, holders, tickets := "sqllock_semaphores", "sqllock_semaphore_holders", "sqllock_semaphore_tickets"
	sqlrun.Qualify(d.database, quote, &sems, &holders, &tickets)
	d.sems = sqlrun.NewSemaphoreTable(d.run, c, semaphoreSQL(sems, holders))
	d.fairSems = sqlrun.NewFairSemaphoreTable(d.sems, c, fairSemaphoreSQL(holders, tickets))
	d.reap.semTickets = reapTicketsSQL(tickets)
	d.reapSems = c.Compile(sqlrun.Q(fmt.Sprintf(`SELECT name, owner FROM %s WHERE expires_at <= %s
ORDER BY expires_at LIMIT :limit FOR UPDATE SKIP LOCKED`, holders, now)))
	d.deleteHolder = fmt.Sprintf(`DELETE FROM %s WHERE name = ? AND owner = ?`, holders)
}

// reapSemaphores deletes a batch of expired and released holder rows:
// it locks them, skipping rows others have locked, and deletes them one
// by one, by primary key, so that it never waits while holding rows an
// acquirer may wait for. Tokens are kept in the head rows, which stay.
func (d *Dialect) reapSemaphores(ctx context.Context, conn *sql.Conn, limit int) (int, error) {
	return reapTx(ctx, conn, func(tx *sql.Tx) (int, error) {
		var keys [][2][]byte
		err := sqlrun.EachOn(ctx, tx, wrap, &d.reapSems, &sqlrun.Params{Limit: limit}, func(rows *sql.Rows) error {
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
		st, err := tx.PrepareContext(ctx, d.deleteHolder)
		if err != nil {
			return 0, wrap(err)
		}
		defer st.Close()
		for _, k := range keys {
			if _, err := st.ExecContext(ctx, k[0], k[1]); err != nil {
				return 0, wrap(err)
			}
		}
		return len(keys), nil
	})
}
