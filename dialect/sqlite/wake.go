package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/internal/listen"
)

// Wake-ups between the processes of the host (docs/databases.md describes
// them for operators). A process whose lockers wait binds a Unix datagram
// socket in a directory beside the database file, named after it with
// wakeSuffix ("locks.db-wake" for "locks.db"). A statement that frees a
// lock or version row (a release, a broken lease, a set released) makes its
// process send the name to every socket of that directory, its own
// included; each process announces the names its lockers wait for to their
// waiting rooms and ignores the others. Where no socket can be bound — an
// in-memory database, a directory the process may not write, a path too
// long for a socket address, a system without Unix datagram sockets — the
// waiters poll, as they did before, and a debug message says why.
//
// Nothing here decides who holds a lock: a lost wake-up delays a waiter
// until the holder's lease ends (or its next poll), and a spurious one
// costs it an acquire attempt. No release goes unheard by a waiter that
// was refused before it: a socket bound after the release counts as an
// announcement (Ready), and a socket bound before it gets the name, which
// the notifier counts (Announced) even if no subscriber watches it yet.

const (
	// wakeSuffix names the wake-up directory after the database file.
	wakeSuffix = "-wake"
	// wakeLinger is how long the socket stays after the last waiter left:
	// binding another is cheap (no connection), so not long.
	wakeLinger = 100 * time.Millisecond
	// pathTimeout bounds the query of the database file's path.
	pathTimeout = 5 * time.Second
)

// waker is the dialect's wake-ups: the catalogue's Notifier, and the
// runner's AfterRelease (ring). It is safe for concurrent use.
type waker struct {
	db     *sql.DB
	logger *slog.Logger
	hub    *listen.Hub

	mu      sync.Mutex
	dir     string // the wake-up directory; "" for a database without a file
	known   bool   // dir is known
	watched map[string]int
	// pending are names newly watched, to be announced once by the
	// listener (see Subscription.Watch); kick tells it of them.
	pending map[string]bool
	kick    chan struct{}
	// quiet records that the last attempt to listen fell back to polling
	// and was logged.
	quiet bool
}

func newWaker(db *sql.DB, logger *slog.Logger) *waker {
	w := &waker{db: db, logger: logger, watched: make(map[string]int), pending: make(map[string]bool),
		kick: make(chan struct{}, 1)}
	w.hub = listen.New(w.listen, wakeLinger)
	return w
}

var _ dialect.Notifier = (*waker)(nil)

// Subscribe implements dialect.Notifier. While any locker built on the
// dialect has waiters (and for a tenth of a second after), the dialect keeps a
// socket in the wake-up directory and a goroutine reading it. Close stops
// them. Only the names the subscription watches are announced; a
// dialect.Claimer (a locker's waiting room) is offered a release of a name
// it watches only when no room that began to watch it earlier claims it.
func (w *waker) Subscribe(s dialect.Subscriber) dialect.Subscription {
	if _, ok := s.(dialect.Claimer); !ok {
		s = filter{s, w}
	}
	return listen.Watching(w.hub.Subscribe(s), w.watch, w.unwatch)
}

// Announced implements dialect.Notifier: it counts every name the socket
// received, watched or not.
func (w *waker) Announced() uint64 { return w.hub.Announced() }

// close stops the listener and waits for its goroutine.
func (w *waker) close(ctx context.Context) error { return w.hub.Close(ctx) }

// path returns the wake-up directory, "" for a database without a file,
// asking the database once.
func (w *waker) path(ctx context.Context) (string, error) {
	w.mu.Lock()
	dir, known := w.dir, w.known
	w.mu.Unlock()
	if known {
		return dir, nil
	}
	ctx, cancel := context.WithTimeout(ctx, pathTimeout)
	defer cancel()
	var file string
	if err := w.db.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file); err != nil {
		return "", fmt.Errorf("sqlite: reading the database file's path: %w", err)
	}
	if file != "" {
		dir = file + wakeSuffix
	}
	w.mu.Lock()
	w.dir, w.known = dir, true
	w.mu.Unlock()
	return dir, nil
}

// ring sends name to every socket of the wake-up directory: it is the
// runner's AfterRelease. It returns once the datagrams are sent, without
// waiting for any reader; a socket whose queue is full misses the name. It
// is best effort, on a context that ctx's end does not cut short (the
// release is done).
func (w *waker) ring(ctx context.Context, name string) {
	dir, err := w.path(context.WithoutCancel(ctx))
	if err != nil || dir == "" {
		return
	}
	send(dir, name)
}

// listen is the hub's listen.Func: it binds a socket in the wake-up
// directory and announces what it receives, and the names newly watched,
// until ctx ends. Where no socket can be bound it waits for ctx without
// reporting an error: waiters poll.
func (w *waker) listen(ctx context.Context, ready func(), released func(name string)) error {
	dir, err := w.path(ctx)
	if err != nil {
		return err
	}
	var sock *socket
	if dir == "" {
		err = errNoFile
	} else {
		sock, err = bind(dir)
	}
	if err != nil {
		w.mu.Lock()
		logged := w.quiet
		w.quiet = true
		w.mu.Unlock()
		if !logged {
			w.logger.Debug("sqllock: sqlite: no wake-up socket: this process's waiters poll",
				"dir", dir, "err", err)
		}
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-w.kick:
				w.takePending() // nobody listens: a registration is news to no one
			}
		}
	}
	w.mu.Lock()
	w.quiet = false
	w.mu.Unlock()
	read := make(chan error, 1)
	go func() { read <- sock.read(released) }()
	ready()
	for {
		select {
		case <-ctx.Done():
			sock.close()
			<-read
			return nil
		case err := <-read:
			sock.close()
			return err
		case <-w.kick:
			for _, name := range w.takePending() {
				released(name)
			}
		}
	}
}

// errNoFile is why a database without a file has no wake-ups.
var errNoFile = errors.New("the database has no file (in memory)")

// takePending returns and clears the names watched since the last call
// and watched still.
func (w *waker) takePending() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := make([]string, 0, len(w.pending))
	for name := range w.pending {
		p = append(p, name)
	}
	clear(w.pending)
	return p
}

// watch counts a subscription's watch of name. The first is announced
// once, by the listener: a release just before it reached no waiting room.
func (w *waker) watch(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.watched[name]++
	if w.watched[name] == 1 {
		w.pending[name] = true
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// unwatch takes a watch of name back.
func (w *waker) unwatch(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watched[name]--; w.watched[name] <= 0 {
		delete(w.watched, name)
		delete(w.pending, name)
	}
}

// watches reports whether any subscription watches name.
func (w *waker) watches(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.watched[name] > 0
}

// filter passes a subscriber the announcements of the names watched in
// this process.
type filter struct {
	dialect.Subscriber
	w *waker
}

// Released implements dialect.Subscriber.
func (f filter) Released(name string) {
	if f.w.watches(name) {
		f.Subscriber.Released(name)
	}
}
