package mysql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock/internal/dbtest"
)

// BenchmarkKillWait measures what the bell's wait costs the server when
// several processes ring at once: each op puts 8 sessions in the bell's
// statement and ends each with 3 concurrent KILL QUERYs (as three releasing
// processes would), while a new connection is opened. wait=sleep is the
// bell's former SLEEP(20); wait=anchor its wait for a user lock that another
// session holds (see wake.go). Reported: the slowest KILL and the slowest
// new connection over all ops (each opened 200 ms after the KILLs were
// sent).
//
//	go test -run '^$' -bench KillWait -benchtime 20x ./dialect/mysql
func BenchmarkKillWait(b *testing.B) {
	db, database := dbtest.MySQL(b)
	ctx := b.Context()
	table := "`" + database + "`.kill_bench"
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+table+` (bell BIGINT PRIMARY KEY, rung INT NOT NULL, seen INT NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	for _, wait := range []string{"sleep", "anchor"} {
		b.Run("wait="+wait, func(b *testing.B) {
			lock := fmt.Sprintf("sqllock kill bench %s %d", database, time.Now().UnixNano())
			stmt := "SLEEP(20)"
			if wait == "anchor" {
				anchor, err := db.Conn(ctx)
				if err != nil {
					b.Fatal(err)
				}
				defer discardConn(anchor) // its session, and the lock, end
				if _, err := anchor.ExecContext(ctx, `DO GET_LOCK(?, 0)`, lock); err != nil {
					b.Fatal(err)
				}
				stmt = "GET_LOCK('" + lock + "', 20)"
			}
			var worstKill, worstConnect time.Duration
			for b.Loop() {
				k, c := killRound(ctx, b, db, table, stmt)
				worstKill, worstConnect = max(worstKill, k), max(worstConnect, c)
			}
			b.ReportMetric(float64(worstKill.Microseconds())/1000, "worst-kill-ms")
			b.ReportMetric(float64(worstConnect.Microseconds())/1000, "worst-connect-ms")
		})
	}
}

// killRound runs one op of BenchmarkKillWait.
func killRound(ctx context.Context, b *testing.B, db *sql.DB, table, wait string) (worstKill, connect time.Duration) {
	const sessions, kills = 8, 3
	var (
		waiting sync.WaitGroup
		ids     []int64
	)
	for range sessions {
		c, err := db.Conn(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var id int64
		if err := c.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&id); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
		started := make(chan struct{})
		waiting.Add(1)
		go func() {
			defer waiting.Done()
			defer discardConn(c) // it may have a KILL pending
			close(started)
			// Killed: NULL, or ER_QUERY_INTERRUPTED.
			var r sql.NullInt64
			err := c.QueryRowContext(ctx, fmt.Sprintf(`SELECT IF(EXISTS(SELECT 1 FROM %s WHERE bell = %d AND rung > seen), 2, %s)`, table, id, wait)).Scan(&r)
			if err != nil && !isMySQLError(err, 1317) {
				b.Error(err)
			}
		}()
		<-started
	}
	for _, id := range ids {
		waitState(ctx, b, db, id)
	}
	var (
		mu     sync.Mutex
		killed sync.WaitGroup
	)
	for _, id := range ids {
		for range kills {
			killed.Go(func() {
				start := time.Now()
				// A session gone already (its statement was ended by
				// another of the KILLs) is no error.
				if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", id)); err != nil && !isMySQLError(err, 1094) {
					b.Error(err)
				}
				mu.Lock()
				worstKill = max(worstKill, time.Since(start))
				mu.Unlock()
			})
		}
	}
	// A new connection, once the KILLs had 200 ms to end (or to stall).
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	nc, err := sql.Open("mysql", dbtest.MySQLDSN(b))
	if err != nil {
		b.Fatal(err)
	}
	if err := nc.PingContext(ctx); err != nil {
		b.Fatal(err)
	}
	connect = time.Since(start)
	nc.Close()
	killed.Wait()
	waiting.Wait()
	return worstKill, connect
}

// discardConn closes c, never back to the pool.
func discardConn(c *sql.Conn) {
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.Close()
}

// isMySQLError reports whether err is the server's error number.
func isMySQLError(err error, number uint16) bool {
	var me *gomysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}

// waitState waits until session id runs its wait (a user sleep or a user
// lock wait), so that the KILLs find it waiting.
func waitState(ctx context.Context, b *testing.B, db *sql.DB, id int64) {
	for {
		var state sql.NullString
		err := db.QueryRowContext(ctx, `SELECT STATE FROM information_schema.PROCESSLIST WHERE ID = ?`, id).Scan(&state)
		if err != nil {
			b.Fatal(err)
		}
		if state.String == "User sleep" || state.String == "User lock" {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
