package mysql

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect/internal/listen"
)

// bells keeps the process's bell (through a listen.Hub, which runs it
// while anyone subscribes) and the registrations of the names its waiting
// rooms watch.
type bells struct {
	db    *sql.DB
	hub   *listen.Hub
	stmts wakeStmts
	tag   string // every bell's: its user lock, and its tickets' waker

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

	tickets map[int64]bool // the live tickets of the process's waiters (see setTicket)

	rings sync.WaitGroup // the goroutines of goOwned
}

// newBells returns the wake-ups tagged tag on the waiters table, for the
// lease tables (their waiters hints) named after it, and on the tickets of
// the queues (by dialect.Queue).
func newBells(db *sql.DB, tag, waiters string, queues []ticketQueue, tables ...string) *bells {
	b := &bells{db: db, tag: tag, stmts: newWakeStmts(waiters, queues, tag, tables...), watched: make(map[string]int),
		idle: make(map[string]time.Time), kick: make(chan struct{}, 1),
		tickets: make(map[int64]bool)}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.hub = listen.New(b.listen, wakeLinger)
	return b
}

// close stops the bell and the keeper, and waits for both, and for the
// goroutines of goOwned under way, or ctx.
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

// setTicket records that the process's waiter holds the ticket id (live),
// or no longer does (the runner's Ticket).
func (b *bells) setTicket(id int64, live bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if live {
		b.tickets[id] = true
	} else {
		delete(b.tickets, id)
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
