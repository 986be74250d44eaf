package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/internal/listen"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// Wake-ups without polling (see the README, "Wake-ups on MySQL and
// MariaDB"). MySQL has no NOTIFY; instead, a process whose lockers wait
// keeps one "bell": a connection of the pool holding a user lock (GET_LOCK)
// named after a random tag, and waiting for another user lock, its anchor,
// which a second connection of the pool holds. The wait is a user lock's
// rather than a SLEEP's: MariaDB's KILL QUERY of a SLEEP contends on one
// server-wide mutex, and concurrent ones stall for two seconds each, while
// a second KILL of the same thread blocks every new connection to the
// server meanwhile (BENCHMARKS.md, section 3). The names the
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

// wakeStmts are the statements of the wake-ups, on the waiters table.
// Those on a hand-off's path (the ring's, the bell's) carry their values
// as literals (see lit): a statement with arguments costs the driver a
// prepare round trip more, unless the DSN sets interpolateParams.
type wakeStmts struct {
	refresh, expired, forget      string
	register, unregister, ringNew string   // a VALUES row or IN list is appended
	hint                          []string // an IN list is appended
	sleep, rung, seen             string   // formats: see below
	ringMark, ringFind            string
}

func newWakeStmts(waiters string, tables ...string) wakeStmts {
	var hint []string
	for _, t := range tables {
		hint = append(hint, `UPDATE `+t+` SET waiters = TRUE WHERE NOT waiters AND name IN `)
	}
	return wakeStmts{
		refresh:    `UPDATE ` + waiters + ` SET expires_at = ` + now + ` + INTERVAL ? MICROSECOND WHERE bell = ?`,
		expired:    `DELETE FROM ` + waiters + ` WHERE expires_at < ` + now + ` LIMIT 100`,
		forget:     `DELETE FROM ` + waiters + ` WHERE bell = ?`,
		register:   `INSERT INTO ` + waiters + ` (name, bell, tag, rung, seen, expires_at) VALUES `,
		unregister: `DELETE FROM ` + waiters + ` WHERE bell = ? AND name IN `,
		hint:       hint,
		ringNew:    `UPDATE ` + waiters + ` SET rung = rung + 1 WHERE bell = ? AND name IN `,
		// Formats, with the bell's id, its tag and the wait's seconds:
		// the EXISTS is read after the statement started: a ring
		// committed before it is seen here, a ring committed after it is
		// followed by a KILL QUERY that ends the wait (which then
		// returns NULL on MariaDB, or fails with ER_QUERY_INTERRUPTED).
		// The wait returns 1 if the anchor's connection ended, 0 after
		// its time.
		sleep: `SELECT IF(EXISTS(SELECT 1 FROM ` + waiters + ` WHERE bell = %d AND rung > seen), 2, GET_LOCK('sqllock anchor %s', %d))`,
		// With the bell's id.
		rung: `SELECT name, rung FROM ` + waiters + ` WHERE bell = %d AND rung > seen`,
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
}

// lit returns name as an SQL literal: a hexadecimal string literal, which
// holds any bytes and cannot break out of itself.
func lit(name string) string {
	return "X'" + hex.EncodeToString([]byte(name)) + "'"
}

// bells keeps the process's bell (through a listen.Hub, which runs it
// while anyone subscribes) and the registrations of the names its waiting
// rooms watch.
type bells struct {
	db    *sql.DB
	hub   *listen.Hub
	stmts wakeStmts

	ctx    context.Context // ends with Close, for the keeper
	cancel context.CancelFunc

	mu         sync.Mutex
	watched    map[string]int       // names waited for, by how many rooms
	idle       map[string]time.Time // registered names nobody waits for, since when
	kick       chan struct{}        // wakes a keeper waiting to unregister
	bell       bellID               // the running bell, once it sleeps
	registered map[string]bool      // names registered for bell
	keeping    bool                 // the keeper goroutine runs
	broken     bellID               // a bell whose registrations failed: it stops
	keeper     sync.WaitGroup
	gate       func() error // test seam: refuses to start a bell

	ringing map[string]bool // names rung in the background: true once rung again meanwhile
	rings   sync.WaitGroup  // the background rings
}

// newBells returns the wake-ups on the waiters table, for the lease tables
// (their waiters hints) named after it.
func newBells(db *sql.DB, waiters string, tables ...string) *bells {
	b := &bells{db: db, stmts: newWakeStmts(waiters, tables...), watched: make(map[string]int),
		idle: make(map[string]time.Time), kick: make(chan struct{}, 1), ringing: make(map[string]bool)}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.hub = listen.New(b.listen, wakeLinger)
	return b
}

// close stops the bell and the keeper, and waits for both, and for the
// rings under way, or ctx.
func (b *bells) close(ctx context.Context) error {
	err := b.hub.Close(ctx)
	b.mu.Lock()
	b.cancel()
	b.mu.Unlock()
	done := make(chan struct{})
	go func() { b.keeper.Wait(); b.rings.Wait(); close(done) }()
	select {
	case <-done:
		return err
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
}

// watch counts one more room waiting for name.
func (b *bells) watch(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.watched[name]++
	if b.watched[name] == 1 {
		delete(b.idle, name)
		b.keepLocked()
	}
}

// unwatch counts one room less waiting for name. Its registration stays
// for wakeLinger: lockers taking turns on a name would otherwise register
// it again at every hand-off.
func (b *bells) unwatch(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.watched[name]--; b.watched[name] <= 0 {
		delete(b.watched, name)
		b.idle[name] = time.Now()
		b.keepLocked()
	}
}

// keepLocked starts the keeper, or wakes it, unless no bell sleeps (a new
// bell registers every watched name). b.mu is held.
func (b *bells) keepLocked() {
	if b.bell == (bellID{}) || b.ctx.Err() != nil {
		return
	}
	if b.keeping {
		select {
		case b.kick <- struct{}{}:
		default:
		}
		return
	}
	b.keeping = true
	b.keeper.Add(1)
	go b.keep()
}

// keep brings the registrations of the running bell in line with the
// watched names (unregistering a name wakeLinger after its last waiter
// left), until they match.
func (b *bells) keep() {
	defer b.keeper.Done()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		b.mu.Lock()
		bell := b.bell
		var (
			add, drop []string
			next      time.Duration // until the next name to unregister; 0: none
		)
		for name := range b.watched {
			if !b.registered[name] {
				add = append(add, name)
			}
		}
		for name := range b.registered {
			if b.watched[name] > 0 {
				continue
			}
			switch left := wakeLinger - time.Since(b.idle[name]); {
			case left <= 0:
				drop = append(drop, name)
			case next == 0 || left < next:
				next = left
			}
		}
		if bell == (bellID{}) || len(add)+len(drop) == 0 && next == 0 || b.ctx.Err() != nil {
			b.keeping = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		if len(add)+len(drop) == 0 {
			if timer == nil {
				timer = time.NewTimer(next)
			} else {
				timer.Reset(next)
			}
			select {
			case <-timer.C:
			case <-b.kick:
				timer.Stop()
			case <-b.ctx.Done():
			}
			continue
		}
		add, drop = add[:min(len(add), 100)], drop[:min(len(drop), 100)]
		err := b.sync(bell, add, drop)
		b.mu.Lock()
		if err != nil {
			// The bell's registrations are unknown: it stops, so that
			// its waiters poll, and the next bell registers again.
			b.keeping, b.broken = false, bell
			b.mu.Unlock()
			b.kill(bell.id)
			return
		}
		if b.bell == bell {
			for _, name := range add {
				b.registered[name] = true
			}
			for _, name := range drop {
				// Watched again meanwhile: registered again at the
				// next turn.
				delete(b.registered, name)
				delete(b.idle, name)
			}
		}
		b.mu.Unlock()
	}
}

// sync registers add and unregisters drop for bell, and wakes the bell to
// announce the new names. A name is registered, then its rows in the lease
// tables are marked as waited for, then a ring is counted in its
// registration: a release before the mark found no reason to ring, but
// comes before the ring, which the bell announces; a release after the mark
// finds the registration.
func (b *bells) sync(bell bellID, add, drop []string) error {
	ctx, cancel := context.WithTimeout(b.ctx, wakeTimeout)
	defer cancel()
	if len(drop) > 0 {
		args := []any{bell.id}
		for _, name := range drop {
			args = append(args, name)
		}
		if _, err := b.db.ExecContext(ctx, b.stmts.unregister+"("+placeholders(len(drop))+")", args...); err != nil {
			return err
		}
	}
	if len(add) == 0 {
		return nil
	}
	var (
		text  strings.Builder
		args  []any
		names = make([]any, len(add))
	)
	text.WriteString(b.stmts.register)
	for i, name := range add {
		if i > 0 {
			text.WriteString(", ")
		}
		text.WriteString("(?, ?, ?, 0, 0, " + now + " + INTERVAL ? MICROSECOND)")
		args = append(args, name, bell.id, bell.tag, registration.Microseconds())
		names[i] = name
	}
	text.WriteString(" ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)")
	if _, err := b.db.ExecContext(ctx, text.String(), args...); err != nil {
		return err
	}
	in := "(" + placeholders(len(add)) + ")"
	for _, hint := range b.stmts.hint {
		if _, err := b.db.ExecContext(ctx, hint+in, names...); err != nil {
			return err
		}
	}
	if _, err := b.db.ExecContext(ctx, b.stmts.ringNew+in, append([]any{bell.id}, names...)...); err != nil {
		return err
	}
	return b.killOn(ctx, bell.id)
}

// placeholders returns n comma-separated question marks.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// ring wakes the processes waiting for name, in the background: a release
// returns once its own statement is done, not after the ring's (a KILL
// QUERY can take seconds on a loaded server). A name rung while its
// previous ring is under way is rung once more after it. Close waits for
// the rings under way; once the dialect is closed, ring runs in the
// caller. It is best effort, on a context that ctx's end does not cut
// short (the release is done): a waiter that is not woken waits until the
// released lease would have ended.
func (b *bells) ring(ctx context.Context, name string) {
	ctx = context.WithoutCancel(ctx)
	b.mu.Lock()
	if b.ctx.Err() != nil {
		b.mu.Unlock()
		b.ringNow(ctx, name)
		return
	}
	if _, busy := b.ringing[name]; busy {
		b.ringing[name] = true
		b.mu.Unlock()
		return
	}
	b.ringing[name] = false
	b.rings.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.rings.Done()
		for {
			b.ringNow(ctx, name)
			b.mu.Lock()
			again := b.ringing[name]
			if !again {
				delete(b.ringing, name)
			} else {
				b.ringing[name] = false
			}
			b.mu.Unlock()
			if !again {
				return
			}
		}
	}()
}

// ringNow counts a ring in the registrations of name's waiters and ends
// their bells' statements.
//
// The bells are looked up while the ring is counted, on another
// connection of the pool, which saves a round trip, and are killed after
// the count committed: a bell asleep then wakes and reads the count; a
// bell that runs another statement has it ended, and reads its rings
// again; a bell between statements reads the count in its next one (the
// sleep's first). A registration made after the look-up is rung by the
// process that made it (see sync).
func (b *bells) ringNow(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(ctx, wakeTimeout)
	defer cancel()
	type found struct {
		ids []int64
		err error
	}
	early := make(chan found, 1)
	go func() {
		var f found
		f.ids, f.err = b.findBells(ctx, name)
		early <- f
	}()
	_, err := b.db.ExecContext(ctx, fmt.Sprintf(b.stmts.ringMark, lit(name)))
	f := <-early
	if err != nil || f.err != nil {
		return
	}
	for _, id := range f.ids {
		_ = b.killOn(ctx, id)
	}
}

// findBells returns the connections of the live bells registered for
// name.
func (b *bells) findBells(ctx context.Context, name string) (ids []int64, err error) {
	rows, err := b.db.QueryContext(ctx, fmt.Sprintf(b.stmts.ringFind, lit(name)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// kill ends the statement of connection id, if it runs one, on a context
// of its own.
func (b *bells) kill(id int64) {
	ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
	defer cancel()
	_ = b.killOn(ctx, id)
}

// killOn ends the statement of connection id with KILL QUERY. A connection
// that is gone is no error.
func (b *bells) killOn(ctx context.Context, id int64) error {
	_, err := b.db.ExecContext(ctx, "KILL QUERY "+strconv.FormatInt(id, 10))
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1094 { // unknown thread id
		return nil
	}
	return err
}

// listen is the hub's listen.Func: one bell connection, from the pool,
// discarded afterwards.
func (b *bells) listen(ctx context.Context, ready func(), released func(string)) (err error) {
	b.mu.Lock()
	gate := b.gate
	b.mu.Unlock()
	if gate != nil {
		if err := gate(); err != nil {
			return err
		}
	}
	if n := b.db.Stats().MaxOpenConnections; n > 0 && n < minPool {
		// The bell would leave the lockers no connection to try with.
		return fmt.Errorf("%w: the bell needs 2 connections of the pool and leaves at least one to the lockers, and its MaxOpenConns is %d: waiters poll",
			listen.ErrNotDelivered, n)
	}
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return wrap(err)
	}
	defer discard(conn)
	bell, err := b.open(ctx, conn)
	if err != nil {
		return err
	}
	anchor, err := b.db.Conn(ctx)
	if err != nil {
		return wrap(err)
	}
	// When ctx ends, the driver closes the bell's connection, which does
	// not end the server's wait: closing the anchor's does, as it frees
	// the lock waited for. Also when listen returns for another reason.
	var once sync.Once
	release := func() { once.Do(func() { discard(anchor) }) }
	stop := context.AfterFunc(ctx, release)
	defer func() {
		stop()
		release()
	}()
	var got sql.NullInt64
	if err := anchor.QueryRowContext(ctx, `SELECT GET_LOCK('sqllock anchor `+bell.tag+`', 0)`).Scan(&got); err != nil {
		return wrap(err)
	}
	if got.Int64 != 1 {
		return errors.New("mysql: the bell's anchor lock is taken")
	}
	b.attach(bell)
	defer b.detach(bell)
	ready()
	return b.ringLoop(ctx, conn, bell, released)
}

// discard closes conn, never back to the pool: its session holds a user
// lock, or may be mid-statement. The server ends the session, which frees
// its locks.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// open prepares conn as a bell: its id, a session that reads the latest
// committed rows and takes no gap locks, a check that wake-ups can reach
// it (not on a Galera cluster, where a release may run on a node that does
// not see this connection), and its tag's user lock, which it holds until
// the connection closes. Expired registrations of other bells are
// deleted.
func (b *bells) open(ctx context.Context, conn *sql.Conn) (bellID, error) {
	var bell bellID
	if err := conn.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&bell.id); err != nil {
		return bell, wrap(err)
	}
	var key, size string
	err := conn.QueryRowContext(ctx, `SHOW GLOBAL STATUS LIKE 'wsrep_cluster_size'`).Scan(&key, &size)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return bell, wrap(err)
	case size != "" && size != "0" && size != "1":
		return bell, fmt.Errorf("%w: wake-ups need every process on one server, and this is a Galera cluster of %s nodes", dialect.ErrUnsupported, size)
	}
	if _, err := conn.ExecContext(ctx, `SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED`); err != nil {
		return bell, wrap(err)
	}
	if _, err := conn.ExecContext(ctx, b.stmts.expired); err != nil {
		return bell, wrap(err)
	}
	var tag [8]byte
	_, _ = rand.Read(tag[:])
	bell.tag = hex.EncodeToString(tag[:])
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK('sqllock bell `+bell.tag+`', 0)`).Scan(&got); err != nil {
		return bell, wrap(err)
	}
	if got.Int64 != 1 {
		return bell, errors.New("mysql: the bell's user lock is taken")
	}
	return bell, nil
}

// attach makes bell the one registrations go to, and registers every
// watched name for it.
func (b *bells) attach(bell bellID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bell, b.registered = bell, make(map[string]bool)
	clear(b.idle)
	b.keepLocked()
}

// detach forgets bell and deletes its registrations: releases stop
// looking for it.
func (b *bells) detach(bell bellID) {
	b.mu.Lock()
	if b.bell == bell {
		b.bell, b.registered = bellID{}, nil
	}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
	defer cancel()
	_, _ = b.db.ExecContext(ctx, b.stmts.forget, bell.id)
}

// ringLoop sleeps on conn until rung, announces the rung names, and sleeps
// again, until ctx ends or a statement fails. Every sleep period it
// refreshes the bell's registrations and deletes expired ones of others.
func (b *bells) ringLoop(ctx context.Context, conn *sql.Conn, bell bellID, released func(string)) error {
	sleep := fmt.Sprintf(b.stmts.sleep, bell.id, bell.tag, int(bellSleep.Seconds()))
	refreshed := time.Now()
	check := true // rung names may wait
	for {
		if check {
			// Announced before they are recorded as seen, which is off
			// the hand-off's path: if recording fails, they are
			// announced again.
			names, counts, err := b.takeRung(ctx, conn, bell)
			if err == nil {
				for _, name := range names {
					released(name)
				}
				err = b.see(ctx, conn, bell, names, counts)
			}
			switch {
			case interrupted(err):
				continue
			case err != nil:
				return wrap(err)
			}
		}
		if time.Since(refreshed) >= bellSleep {
			err := b.refresh(ctx, conn, bell)
			if err == nil {
				_, err = conn.ExecContext(ctx, b.stmts.expired)
			}
			switch {
			case interrupted(err):
				check = true
				continue
			case err != nil:
				return wrap(err)
			}
			refreshed = time.Now()
		}
		var r sql.NullInt64
		err := conn.QueryRowContext(ctx, sleep).Scan(&r)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case b.isBroken(bell):
			return errors.New("mysql: registering waiters failed")
		case interrupted(err):
			check = true
		case err != nil:
			return wrap(err)
		case r.Valid && r.Int64 == 1:
			// The anchor's session ended (killed, or its connection
			// lost): the bell can no longer wait.
			return errors.New("mysql: the bell's anchor connection was lost")
		default:
			check = !r.Valid || r.Int64 != 0 // 0: waited its time; NULL: woken; 2: rung
		}
	}
}

// refresh extends bell's registrations. Some may be gone: deleted as
// expired by another process's bell while this process was stalled. Then
// every name is registered again.
func (b *bells) refresh(ctx context.Context, conn *sql.Conn, bell bellID) error {
	res, err := conn.ExecContext(ctx, b.stmts.refresh, registration.Microseconds(), bell.id)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected() // each row's expiry changes: affected = matched
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bell == bell && int(n) < len(b.registered) {
		b.registered = make(map[string]bool)
		b.keepLocked()
	}
	return nil
}

// isBroken reports whether bell must stop, as its registrations failed.
func (b *bells) isBroken(bell bellID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.broken == bell
}

// takeRung reads the names with rings that bell has not announced, and
// returns them with what it read; seeing them afterwards records the
// counts read, not the latest: a ring in between stays unseen.
func (b *bells) takeRung(ctx context.Context, conn *sql.Conn, bell bellID) ([]string, []int64, error) {
	rows, err := conn.QueryContext(ctx, fmt.Sprintf(b.stmts.rung, bell.id))
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var (
		names  []string
		counts []int64
	)
	for rows.Next() {
		var (
			name []byte
			n    int64
		)
		if err := rows.Scan(&name, &n); err != nil {
			return nil, nil, err
		}
		names, counts = append(names, string(name)), append(counts, n)
	}
	return names, counts, rows.Err()
}

// see records that bell announced the rings counted for names.
func (b *bells) see(ctx context.Context, conn *sql.Conn, bell bellID, names []string, counts []int64) error {
	for i, name := range names {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(b.stmts.seen, counts[i], bell.id, lit(name))); err != nil {
			return err
		}
	}
	return nil
}

// interrupted reports whether err is a statement ended by KILL QUERY.
func interrupted(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errInterrupted
}

// wakingLocks is the lock table whose releases ring.
type wakingLocks struct {
	*sqlrun.LockTable
	waking
}

// wakingVersions is the version table whose releases ring.
type wakingVersions struct {
	*sqlrun.VersionTable
	waking
}

// waking is the release of a lease table that rings the waiters of a name
// it freed. Its statement reports, as its insert id, 0 when it matched no
// lease, 2 when it freed a row marked as waited for, and 1 otherwise.
type waking struct {
	run   *sqlrun.Runner
	stmt  sqlrun.Stmt
	bells *bells
}

// Release implements dialect.LeaseTable.
func (w *waking) Release(ctx context.Context, l dialect.Lease, minHold time.Duration) (bool, error) {
	n, err := w.run.Int(ctx, &w.stmt, &sqlrun.Params{Name: l.Name, Owner: l.Owner, Token: l.Token, MinHold: minHold})
	if n == 2 {
		w.bells.ring(ctx, l.Name)
	}
	return n > 0, err
}

// wakingRelease is the release statement of table, whose token column is
// token. The assignment of the token column to itself carries the result
// in LAST_INSERT_ID(expr), evaluated after holds was decremented (MySQL
// assigns left to right) and only for a matched row: 2 when the release
// frees a row that some process marked as waited for — at once, not when a
// minimum hold keeps it taken (its waiters wait for the row's expiry).
func wakingRelease(table, token string) sqlrun.SQL {
	return sqlrun.XID(fmt.Sprintf(`UPDATE %[1]s SET holds = holds - 1, expires_at = %[3]s,
  %[2]s = %[2]s + 0 * LAST_INSERT_ID(IF(holds = 0 AND waiters AND expires_at = %[4]s, 2, 1))
WHERE name = :name AND owner = :owner AND %[2]s = :token AND holds > 0`, table, token, releasedExpiry, released))
}

// wakeTables compiles the lease tables whose releases ring, on the waiters
// table waiters. A registration marks the rows of the lock and version
// tables, then the semaphores' head and holder rows, then the read/write
// locks', each head before its holders: a grant that adds a holder row
// copies its head's mark under the head's lock, so it either comes after
// the head's mark or commits its row before the holders' mark.
func (d *Dialect) wakeTables(c *sqlrun.Compiler, waiters, locks, versions, sems, holders, rwHeads, rwHolders string) {
	d.bells = newBells(d.db, waiters, locks, versions, sems, holders, rwHeads, rwHolders)
	d.wlocks = &wakingLocks{LockTable: d.locks, waking: waking{run: d.run, bells: d.bells,
		stmt: c.Compile(wakingRelease(locks, "token"))}}
	d.wversions = &wakingVersions{VersionTable: d.versions, waking: waking{run: d.run, bells: d.bells,
		stmt: c.Compile(wakingRelease(versions, "version"))}}
	d.semRelease = c.Compile(wakingRelease(holders, "token"))
	d.rwRelease = c.Compile(wakingRelease(rwHolders, "token"))
}

// bellNotifier is the catalogue's Notifier: the bells.
type bellNotifier struct{ *Dialect }

var _ dialect.Notifier = bellNotifier{}

// Subscribe implements dialect.Notifier. While any locker built on the
// dialect has waiters (and for half a second after), the dialect keeps one
// bell connection, taken from the pool, on which releases anywhere wake
// this process; see the README, "Wake-ups on MySQL and MariaDB". Close
// stops it. Only the names the subscription watches are announced.
func (d bellNotifier) Subscribe(s dialect.Subscriber) dialect.Subscription {
	if d.noWakeups {
		return unheard{}
	}
	return &watching{Subscription: d.bells.hub.Subscribe(s), b: d.bells, names: make(map[string]bool)}
}

// WithoutWakeups turns the wake-ups off: waiters poll, as they must where a
// release cannot reach the connection a waiting process sleeps on (a proxy
// that spreads connections over several servers, a multi-primary cluster
// other than Galera, which is detected), or where the dialect must never
// hold a connection of its own.
func WithoutWakeups() Option {
	return func(d *Dialect) error {
		d.noWakeups = true
		return nil
	}
}

// unheard is the subscription of a dialect without wake-ups: nothing is
// ever announced.
type unheard struct{}

func (unheard) Listening() bool { return false }
func (unheard) Unsubscribe()    {}
func (unheard) Watch(string)    {}
func (unheard) Unwatch(string)  {}

// Announced implements dialect.Notifier.
func (d bellNotifier) Announced() uint64 { return d.bells.hub.Announced() }

// watching is a subscription with the names it watches.
type watching struct {
	dialect.Subscription
	b     *bells
	mu    sync.Mutex
	names map[string]bool // nil once unsubscribed
}

// Watch implements dialect.Subscription.
func (w *watching) Watch(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.names != nil && !w.names[name] {
		w.names[name] = true
		w.b.watch(name)
	}
}

// Unwatch implements dialect.Subscription.
func (w *watching) Unwatch(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.names[name] {
		delete(w.names, name)
		w.b.unwatch(name)
	}
}

// Unsubscribe implements dialect.Subscription; it unwatches every name.
func (w *watching) Unsubscribe() {
	w.Subscription.Unsubscribe()
	w.mu.Lock()
	defer w.mu.Unlock()
	for name := range w.names {
		w.b.unwatch(name)
	}
	w.names = nil
}

// Close stops the bell connection, if one runs, and waits until the
// dialect's goroutines have ended or ctx ends (then it returns ctx's
// error). The *sql.DB belongs to the caller and stays open; lockers on
// the dialect keep working, but their waiters poll. Calling it again does
// no harm.
func (d *Dialect) Close(ctx context.Context) error {
	return d.bells.close(ctx)
}
