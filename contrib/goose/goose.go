// Package sqllockgoose makes goose migrations run once across replicas: a
// [Locker] is a github.com/pressly/goose/v3 lock.Locker held as a lease
// in sqllock's lock table, renewed while the migrations run.
//
// goose's own PostgreSQL locker takes a session advisory lock, which a
// transaction pooler (PgBouncer in transaction mode) breaks: the lock
// stays on whichever server connection the pooler picked. A lease is a
// row, so it works through any pooler, on PostgreSQL, MySQL/MariaDB and
// SQLite alike:
//
//	locker, _ := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Second}})
//	p, _ := goose.NewProvider(goose.DialectPostgres, db, migrations,
//		goose.WithLocker(sqllockgoose.NewLocker(locker, "goose")))
//	_, err := p.Up(ctx) // one replica migrates, the others wait and find nothing to do
package sqllockgoose

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/pressly/goose/v3/lock"
	"github.com/sqllock/sqllock"
)

// Locker is a goose lock.Locker (goose.WithLocker) over a sqllock
// Locker: Lock acquires one lock name, Unlock releases it. The lease is
// renewed in the background while the migrations run. If it is lost all
// the same (the database unreachable for longer than its TTL), goose
// cannot be stopped mid-migration, but Unlock reports the loss, so the
// run returns an error.
//
// goose holds a connection of its pool while it migrates: if the locker's
// dialect shares that pool, the pool needs a second connection (on
// SQLite, raise sqlite.Open's limit of one), or Lock waits forever.
//
// A Locker is safe for concurrent use, and holds at most one lock at a
// time; use one per goose Provider.
type Locker struct {
	locker sqllock.Locker
	name   string

	mu   sync.Mutex
	lock *sqllock.Lock // nil when not held
}

var _ lock.Locker = (*Locker)(nil)

// NewLocker returns a Locker of the lock name on locker, typically a
// sqllock.NewTable. Every replica migrating the same database must use
// the same name.
func NewLocker(locker sqllock.Locker, name string) *Locker {
	return &Locker{locker: locker, name: name}
}

// Lock waits until it holds the lock, or until ctx ends. It takes the
// lease through the locker's own pool; db, goose's pool, is not used.
func (l *Locker) Lock(ctx context.Context, _ *sql.DB) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lock != nil {
		return fmt.Errorf("sqllockgoose: lock %q is already held by this Locker", l.name)
	}
	lk, err := l.locker.Acquire(ctx, l.name)
	if err != nil {
		return fmt.Errorf("sqllockgoose: lock %q: %w", l.name, err)
	}
	l.lock = lk
	return nil
}

// Unlock releases the lock. It returns an error wrapping
// sqllock.ErrLockLost if the lease was lost while held (another replica
// may have migrated meanwhile), and sqllock.ErrNotHeld if Lock did not
// succeed before. Lock may be called again after Unlock, whatever it
// returned.
func (l *Locker) Unlock(ctx context.Context, _ *sql.DB) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lock == nil {
		return fmt.Errorf("sqllockgoose: unlock %q: %w", l.name, sqllock.ErrNotHeld)
	}
	// A failed release gives the lease up all the same (its renewal
	// stops; see sqllock.Lock.Release): the lock is no longer held here.
	err := l.lock.Release(ctx)
	l.lock = nil
	if err != nil {
		return fmt.Errorf("sqllockgoose: unlock %q: %w", l.name, err)
	}
	return nil
}
