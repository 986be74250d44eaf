package mysql

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Wake-ups without polling (docs/databases.md describes them for
// operators). MySQL has no NOTIFY; instead, a process whose lockers wait
// keeps one "bell": a connection of the pool holding a user lock (GET_LOCK)
// named after a random tag, and waiting for another user lock, its anchor,
// which a second connection of the pool holds. The wait is a user lock's
// rather than a SLEEP's: MariaDB's KILL QUERY of a SLEEP contends on one
// server-wide mutex, and concurrent ones stall for two seconds each, while
// a second KILL of the same thread blocks every new connection to the
// server meanwhile (measured in BENCHMARKS.md). The names the
// process waits for are registered in the waiters table under the bell's
// connection id and tag. A release that frees a name with registered
// waiters (the release statement itself reports it, from a hint on the
// lock's row set before a process registers) counts a ring in their rows
// and, once the count committed, ends each bell's statement with KILL
// QUERY, if IS_USED_LOCK shows that the bell's connection still holds its
// tag's lock. The woken bell reads its rows with rings it has not seen,
// announces their names to its lockers' waiting rooms, records them as
// seen, and sleeps again.
//
// Waiters with tickets (FIFO, and the waiters of an unfair lock, whose
// tickets order wake-ups alone) register no name: a ticket records its
// process's bell by the bell's tag (waker), a tag of the dialect's that
// each of its bells in turn holds as its user lock. The waiter marks the
// lock's row (ticketed) before it sleeps, and a release that frees a
// marked row counts a ring in the name's oldest live ticket and ends that
// one bell's statement: the bell announces the ticket's wake-up
// (dialect.TicketWake), which only the ticket's waiter takes. A hand-off
// so costs the same statements however many processes wait.
//
// Nothing here decides who holds a lock: a lost wake-up delays a waiter
// until the holder's lease ends (or its next poll), and a spurious one
// costs it an acquire attempt.

// Timing of the bell.
const (
	// bellSleep is the longest wait of the bell statement (for its
	// anchor's lock); after it the bell refreshes its registrations.
	bellSleep = 20 * time.Second
	// registration is how long a registration lasts unless refreshed.
	// Other processes' bells delete expired ones.
	registration = 3 * bellSleep
	// wakeLinger is how long the bell stays after the last waiter left.
	wakeLinger = 500 * time.Millisecond
	// wakeTimeout bounds the statements run beside the bell: ringing,
	// registering, killing the bell's wait.
	wakeTimeout = 5 * time.Second
	// minPool is the smallest pool (MaxOpenConns) a bell starts on: its two
	// connections and one for the lockers.
	minPool = 3
)

// errInterrupted is MySQL's ER_QUERY_INTERRUPTED: what KILL QUERY makes of
// a statement of the bell's other than its wait (whose GET_LOCK returns
// NULL on MariaDB when killed).
const errInterrupted = 1317

// bellID identifies one bell connection: the server's connection id and
// the tag of its user lock. The zero value is no bell.
type bellID struct {
	id  int64
	tag string
}

// wakeStmts are the statements of the wake-ups, on the waiters table and
// the queues of tickets. Those on a hand-off's path (the ring's, the
// bell's) carry their values as literals (see lit): a statement with
// arguments costs the driver a prepare round trip more, unless the DSN
// sets interpolateParams.
type wakeStmts struct {
	refresh, expired, forget      string
	register, unregister, ringNew string   // a VALUES row or IN list is appended
	hint                          []string // an IN list is appended
	sleep, rung, seen             string   // formats: see below
	ringMark, ringFind            string
	queues                        []ticketStmts // by dialect.Queue
}

// ticketStmts are the statements of the bells on a queue's tickets.
type ticketStmts struct {
	seen       string // with the count seen and the ticket's id
	mark, find string // with the name (see lit)
	findFree   string // with the name (see lit)
	markID     string // with the ticket's id
}

// A ticketQueue is a queue of tickets whose releases ring the bells: its
// table, and the condition, with the name (see lit) as %[1]s, that what
// its tickets wait for is free.
type ticketQueue struct{ tickets, free string }

// newWakeStmts returns the statements of the bells on the waiters table,
// whose registrations mark the rows of the lease tables named after it as
// waited for, and of the bells tagged tag on the tickets of the queues, by
// dialect.Queue.
func newWakeStmts(waiters string, queues []ticketQueue, tag string, tables ...string) wakeStmts {
	var hint []string
	for _, t := range tables {
		hint = append(hint, `UPDATE `+t+` SET waiters = TRUE WHERE NOT waiters AND name IN `)
	}
	s := wakeStmts{
		refresh:    `UPDATE ` + waiters + ` SET expires_at = ` + now + ` + INTERVAL ? MICROSECOND WHERE bell = ?`,
		expired:    `DELETE FROM ` + waiters + ` WHERE expires_at < ` + now + ` LIMIT 100`,
		forget:     `DELETE FROM ` + waiters + ` WHERE bell = ?`,
		register:   `INSERT INTO ` + waiters + ` (name, bell, tag, rung, seen, expires_at) VALUES `,
		unregister: `DELETE FROM ` + waiters + ` WHERE bell = ? AND name IN `,
		hint:       hint,
		ringNew:    `UPDATE ` + waiters + ` SET rung = rung + 1 WHERE bell = ? AND name IN `,
		// With the count seen, the bell's id and the name (see lit).
		seen: `UPDATE ` + waiters + ` SET seen = GREATEST(seen, %d) WHERE bell = %d AND name = %s`,
		// With the name (see lit).
		ringMark: `UPDATE ` + waiters + ` SET rung = rung + 1 WHERE name = %s`,
		// The bells registered for a name (see lit) whose connection
		// still holds its tag's user lock: only such a connection is
		// killed. Connection ids start again after a server restart,
		// and another session's statement is never ended. A hash
		// look-up by lock name, where the process list would be a scan
		// of every connection.
		ringFind: `SELECT bell FROM ` + waiters + ` WHERE name = %s AND IS_USED_LOCK(CONCAT('sqllock bell ', tag)) = bell`,
	}
	// Formats, with the bell's id, its tag and the wait's seconds: the
	// EXISTS are read after the statement started: a ring committed
	// before it is seen here, a ring committed after it is followed by a
	// KILL QUERY that ends the wait (which then returns NULL on MariaDB,
	// or fails with ER_QUERY_INTERRUPTED). The wait returns 1 if the
	// anchor's connection ended, 0 after its time.
	rung := `EXISTS(SELECT 1 FROM ` + waiters + ` WHERE bell = %[1]d AND rung > seen)`
	// With the bell's id: its names' rings, then its tickets', by queue.
	s.rung = `SELECT name, rung, 0, 0 FROM ` + waiters + ` WHERE bell = %[1]d AND rung > seen`
	for i, q := range queues {
		mine := q.tickets + ` WHERE waker = '` + tag + `' AND rung > seen`
		rung += ` OR EXISTS(SELECT 1 FROM ` + mine + `)`
		s.rung += fmt.Sprintf("\nUNION ALL SELECT '', rung, id, %d FROM %s", i, mine)
		s.queues = append(s.queues, ticketStmts{
			seen: `UPDATE ` + q.tickets + ` SET seen = GREATEST(seen, %d) WHERE id = %d`,
			// After a release: a ring counted in the name's oldest
			// live ticket, and, side by side, the bell that holds the
			// ticket's tag (see ringFind). Neither reads the lock or
			// semaphore tables: the ring holds ticket rows alone,
			// never what a grant or a reaper waits for.
			mark: `UPDATE ` + q.tickets + ` SET rung = rung + 1
WHERE name = %[1]s AND expires_at > ` + now + ` ORDER BY id LIMIT 1`,
			find: `SELECT IS_USED_LOCK(CONCAT('sqllock bell ', waker)) FROM ` + q.tickets + `
WHERE name = %[1]s AND expires_at > ` + now + ` ORDER BY id LIMIT 1`,
			// After a ticket was deleted or granted: the name's oldest
			// live ticket and its bell if what it waits for is free (a
			// plain read, which locks nothing), then a ring counted by
			// the ticket's key.
			findFree: `SELECT id, IS_USED_LOCK(CONCAT('sqllock bell ', waker)) FROM ` + q.tickets + `
WHERE name = %[1]s AND expires_at > ` + now + ` AND ` + q.free + `
ORDER BY id LIMIT 1`,
			markID: `UPDATE ` + q.tickets + ` SET rung = rung + 1 WHERE id = %d`,
		})
	}
	s.sleep = `SELECT IF(` + rung + `, 2, GET_LOCK('sqllock anchor %[2]s', %[3]d))`
	return s
}

// newWaker returns a random tag for a dialect's bells: nobody else's bell
// holds its user lock.
func newWaker() string {
	b := make([]byte, 8)
	rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

// lit returns name as an SQL literal: a hexadecimal string literal, which
// holds any bytes and cannot break out of itself.
func lit(name string) string {
	return "X'" + hex.EncodeToString([]byte(name)) + "'"
}

// placeholders returns n comma-separated question marks.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// interrupted reports whether err is a statement ended by KILL QUERY.
func interrupted(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errInterrupted
}
