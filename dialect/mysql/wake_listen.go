package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/internal/listen"
)

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
	if err := anchor.QueryRowContext(ctx, `SELECT GET_LOCK('sqllock anchor `+bell.tag+`', `+takeOver+`)`).Scan(&got); err != nil {
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

// takeOver is how long, in seconds, a bell waits for its tag's user locks:
// the server may not yet have ended the session of the dialect's previous
// bell, which the pool closed.
const takeOver = "2"

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
	bell.tag = b.tag
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK('sqllock bell `+bell.tag+`', `+takeOver+`)`).Scan(&got); err != nil {
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
//
// A bell registered for one name alone announces it as soon as it is
// woken, before it reads its rings: a round trip less on a hand-off's
// path. The read then announces that name again only if it was rung more
// than once since it was last seen.
func (b *bells) ringLoop(ctx context.Context, conn *sql.Conn, bell bellID, released func(string)) error {
	sleep := fmt.Sprintf(b.stmts.sleep, bell.id, bell.tag, int(bellSleep.Seconds()))
	refreshed := time.Now()
	check := true // rung names may wait
	var (
		early string               // announced on waking, before the read ("": none)
		seen  = map[string]int64{} // the rings seen, by name, as recorded
	)
	for {
		if check {
			// Announced before they are recorded as seen, which is off
			// the hand-off's path: if recording fails, they are
			// announced again.
			rs, err := b.takeRung(ctx, conn, bell)
			if err == nil {
				for _, r := range rs {
					if r.name != early || r.n != seen[r.name]+1 {
						released(r.name)
					}
				}
				early = ""
				if err = b.see(ctx, conn, bell, rs); err == nil {
					clear(seen)
					for _, r := range rs {
						seen[r.name] = r.n
					}
				}
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
			if name, ok := b.only(bell); ok && check {
				early = name
				released(name)
			}
		}
	}
}

// only returns what a ring of bell can be for, if it can be for one
// thing alone: the one name it is registered for, or the wake-up of the
// process's one ticket, while no other name is being registered (a ring
// of a name whose registration is under way, watched and not yet recorded
// as registered, would otherwise be announced as the other's).
func (b *bells) only(bell bellID) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bell != bell || len(b.registered)+len(b.tickets) != 1 {
		return "", false
	}
	for name := range b.watched {
		if !b.registered[name] {
			return "", false
		}
	}
	for name := range b.registered {
		return name, true
	}
	for id := range b.tickets {
		return dialect.TicketWake(id), true
	}
	return "", false
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

// rung is a registration, or a ticket, with rings its bell has not
// announced.
type rung struct {
	name   string        // announced: the name, or the ticket's dialect.TicketWake
	n      int64         // the rings counted
	ticket int64         // the ticket's id; 0 for a registration
	queue  dialect.Queue // the ticket's queue
}

// takeRung reads the registrations and tickets with rings that bell has
// not announced; seeing them afterwards records the counts read, not the
// latest: a ring in between stays unseen.
func (b *bells) takeRung(ctx context.Context, conn *sql.Conn, bell bellID) ([]rung, error) {
	rows, err := conn.QueryContext(ctx, fmt.Sprintf(b.stmts.rung, bell.id))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var rs []rung
	for rows.Next() {
		var (
			name []byte
			r    rung
		)
		if err := rows.Scan(&name, &r.n, &r.ticket, &r.queue); err != nil {
			return nil, err
		}
		r.name = string(name)
		if r.ticket != 0 {
			r.name = dialect.TicketWake(r.ticket)
		}
		rs = append(rs, r)
	}
	return rs, rows.Err()
}

// see records that bell announced the rings rs.
func (b *bells) see(ctx context.Context, conn *sql.Conn, bell bellID, rs []rung) error {
	for _, r := range rs {
		stmt := fmt.Sprintf(b.stmts.seen, r.n, bell.id, lit(r.name))
		if r.ticket != 0 {
			stmt = fmt.Sprintf(b.stmts.queues[r.queue].seen, r.n, r.ticket)
		}
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}
