package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

// Store is the guarded data of a run: a counter per lock name, and a log of
// every increment, written in one transaction with it. Double holders show up
// as lost increments (two writers read the same value) and stale holders as
// tokens going backwards in the log.
type Store struct {
	db       *sql.DB
	kind     string // "postgres", "mysql" or "tidb"
	ns       string // schema (PostgreSQL) or database (MySQL), validated
	classify func(error) error

	read, update, insert string
}

// NewStore returns the guarded data in namespace ns (a PostgreSQL schema or
// a MySQL database) of d's database. Commit errors are classified as d
// classifies them (dialect.Pessimistic.Classify), so the suite also checks
// that classification: a commit reported as certainly failed must not be
// found in the database. d must have row locks.
func NewStore(d dialect.Dialect, ns string) (*Store, error) {
	if err := dialect.ValidateIdentifier(ns); err != nil {
		return nil, err
	}
	s := &Store{db: d.DB(), kind: d.Name(), ns: ns, classify: d.Catalogue().Pessimistic.Classify}
	switch s.kind {
	case "postgres":
		s.read = `SELECT value FROM ` + s.table("chaos_counters") + ` WHERE name = $1`
		s.update = `UPDATE ` + s.table("chaos_counters") + ` SET value = $1, token = $2 WHERE name = $3`
		s.insert = `INSERT INTO ` + s.table("chaos_writes") + ` (name, value, token, worker) VALUES ($1, $2, $3, $4)`
	case "mysql", "tidb":
		s.read = `SELECT value FROM ` + s.table("chaos_counters") + ` WHERE name = ?`
		s.update = `UPDATE ` + s.table("chaos_counters") + ` SET value = ?, token = ? WHERE name = ?`
		s.insert = `INSERT INTO ` + s.table("chaos_writes") + ` (name, value, token, worker) VALUES (?, ?, ?, ?)`
	default:
		return nil, fmt.Errorf("chaos: unknown database kind %q", s.kind)
	}
	return s, nil
}

func (s *Store) table(name string) string {
	if s.kind == "postgres" {
		return `"` + s.ns + `".` + name
	}
	return "`" + s.ns + "`." + name
}

// Create makes the tables and a zero counter for each name.
func (s *Store) Create(ctx context.Context, names []string) error {
	stmts := []string{
		`CREATE TABLE ` + s.table("chaos_counters") + ` (name VARCHAR(255) PRIMARY KEY, value BIGINT NOT NULL, token BIGINT NOT NULL)`,
		`CREATE TABLE ` + s.table("chaos_writes") + ` (name VARCHAR(255) NOT NULL, value BIGINT NOT NULL, token BIGINT NOT NULL, worker VARCHAR(64) NOT NULL)`,
	}
	for _, q := range stmts {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	ins := `INSERT INTO ` + s.table("chaos_counters") + ` (name, value, token) VALUES ($1, 0, 0)`
	if s.kind != "postgres" {
		ins = `INSERT INTO ` + s.table("chaos_counters") + ` (name, value, token) VALUES (?, 0, 0)`
	}
	for _, n := range names {
		if _, err := s.db.ExecContext(ctx, ins, n); err != nil {
			return err
		}
	}
	return nil
}

// Data reads the counters and the write log.
func (s *Store) Data(ctx context.Context) (Data, error) {
	d := Data{Counters: map[string]int64{}, Tokens: map[string]int64{}}
	rows, err := s.db.QueryContext(ctx, `SELECT name, value, token FROM `+s.table("chaos_counters"))
	if err != nil {
		return d, err
	}
	for rows.Next() {
		var n string
		var v, tok int64
		if err := rows.Scan(&n, &v, &tok); err != nil {
			rows.Close()
			return d, err
		}
		d.Counters[n] = v
		d.Tokens[n] = tok
	}
	if err := rows.Close(); err != nil {
		return d, err
	}
	rows, err = s.db.QueryContext(ctx, `SELECT name, value, token, worker FROM `+s.table("chaos_writes"))
	if err != nil {
		return d, err
	}
	defer rows.Close()
	for rows.Next() {
		var w Write
		if err := rows.Scan(&w.Name, &w.Value, &w.Token, &w.Worker); err != nil {
			return d, err
		}
		d.Writes = append(d.Writes, w)
	}
	return d, rows.Err()
}

// Worker takes turns on a few lock names: acquire, hold, check that it
// still trusts the lock, do a guarded read-modify-write of the name's
// counter, release. It records every step.
type Worker struct {
	ID     string
	Locker sqllock.Locker
	// Election, if set, replaces Locker: each turn campaigns to lead a
	// name (see electionTurn).
	Election *sqllock.Election
	// Store is the guarded data; for a pessimistic locker the writes run in
	// the lock's own transaction and commit with the release.
	Store       *Store
	Pessimistic bool
	// Sets makes each turn take a set of names at once (Locker is then a
	// *sqllock.Table; see setTurn).
	Sets bool
	// Sides makes the turns of a read/write lock change sides (Locker is
	// then a *sqllock.RWLock; see sidesTurn).
	Sides bool
	Names []string
	// Hold is the longest pause between acquiring and writing (a paused or
	// killed process is caught here); Think the longest pause between the
	// read and the write of the increment.
	Hold, Think time.Duration
	// Wait bounds each Acquire; every TryEvery-th turn uses TryAcquire.
	Wait     time.Duration
	TryEvery int
	// TTL is the lease TTL of the locker (0 for a pessimistic one), for
	// the trust windows recorded with the grants (Event.TrustUntil).
	TTL  time.Duration
	Rec  *Recorder
	Rand *rand.Rand
}

// Run takes turns until ctx ends. A turn under way when ctx ends is
// finished (its release is not cut short).
func (w *Worker) Run(ctx context.Context) {
	for turn := 1; ctx.Err() == nil; turn++ {
		if w.Election != nil {
			w.electionTurn(ctx)
			continue
		}
		w.turn(ctx, turn)
	}
}

func (w *Worker) event(op int64, k Kind, name string, token int64, err error) Event {
	e := Event{Worker: w.ID, Op: op, Kind: k, Name: name, Token: token}
	if err != nil {
		e.Err = err.Error()
	}
	return e
}

// grant returns the AcquireOK event of (name, tok) for operation op, at
// now, with the end of its trust window.
func (w *Worker) grant(op int64, name string, tok int64) Event {
	e := w.event(op, AcquireOK, name, tok, nil)
	e.At = time.Now().UnixNano()
	if w.TTL > 0 {
		e.TrustUntil = trustUntil(e.At, w.TTL)
	}
	return e
}

// try reports whether the turn asks with TryAcquire rather than Acquire.
func (w *Worker) try(turn int) bool { return w.TryEvery > 0 && turn%w.TryEvery == 0 }

func (w *Worker) sleep(ctx context.Context, max time.Duration) {
	if max <= 0 {
		return
	}
	t := time.NewTimer(time.Duration(w.Rand.Int64N(int64(max))))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (w *Worker) turn(ctx context.Context, turn int) {
	if w.Sets {
		w.setTurn(ctx, turn)
		return
	}
	name := w.Names[w.Rand.IntN(len(w.Names))]
	if rw, ok := w.Locker.(*sqllock.RWLock); ok && w.Sides {
		w.sidesTurn(ctx, turn, rw, name)
		return
	}
	if rw, ok := w.Locker.(*sqllock.RWLock); ok && w.readSide() {
		w.readTurn(ctx, turn, rw, name)
		return
	}
	op := w.Rec.NextOp(w.ID)
	inv := w.event(op, AcquireInvoke, name, 0, nil)
	inv.Try = w.try(turn)
	w.Rec.Add(inv)
	actx, cancel := context.WithTimeout(withTurn(ctx, w.Rec, w.ID, op), w.Wait)
	var lock *sqllock.Lock
	var err error
	if inv.Try {
		lock, err = w.Locker.TryAcquire(actx, name)
	} else {
		lock, err = w.Locker.Acquire(actx, name)
	}
	cancel()
	if err != nil {
		w.Rec.Add(w.event(op, AcquireFail, name, 0, err))
		w.sleep(ctx, 20*time.Millisecond)
		return
	}
	tok := lock.Token()
	w.Rec.Add(w.grant(op, name, tok))

	w.sleep(ctx, w.Hold)
	// The stopped or starved holder resumes here: it must find out.
	// A lease's context checks its trust window; a pessimistic lock's
	// context only learns of a dead connection from the keep-alive, so its
	// trust is recorded from the statements of its transaction instead.
	at := time.Now().UnixNano()
	switch {
	case lock.Context().Err() != nil:
		w.Rec.Add(w.event(op, Lost, name, tok, context.Cause(lock.Context())))
	case !w.Pessimistic:
		e := w.event(op, Trusted, name, tok, nil)
		e.At = at
		w.Rec.Add(e)
	}
	// Write whether or not the lock is still trusted: a holder that has not
	// noticed its loss yet must be refused by the guard.
	if w.Pessimistic {
		w.writeInLock(ctx, lock)
	} else {
		w.writeGuarded(lock)
		w.release(lock)
	}
}

// increment reads the counter, pauses, and writes it back plus one with the
// token, logging the write. It returns the value written.
func (w *Worker) increment(ctx context.Context, tx *sql.Tx, name string, tok int64, op int64) (int64, error) {
	var v int64
	at := time.Now().UnixNano()
	if err := tx.QueryRowContext(ctx, w.Store.read, name).Scan(&v); err != nil {
		return 0, err
	}
	if w.Pessimistic {
		// A statement of the lock's own transaction ran: the lock was held.
		e := w.event(op, Trusted, name, tok, nil)
		e.At = at
		w.Rec.Add(e)
	}
	w.sleep(ctx, w.Think)
	return v + 1, nil
}

func (w *Worker) writeGuarded(lock *sqllock.Lock) {
	name, tok := lock.Name(), lock.Token()
	op := w.Rec.NextOp(w.ID)
	w.Rec.Add(w.event(op, WriteInvoke, name, tok, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fail := func(err error) { w.Rec.Add(w.event(op, WriteFail, name, tok, err)) }
	tx, err := w.Store.db.BeginTx(ctx, nil)
	if err != nil {
		fail(err)
		return
	}
	v, err := w.increment(ctx, tx, name, tok, op)
	if err == nil {
		err = lock.Guard(ctx, tx)
		if errors.Is(err, sqllock.ErrLockLost) {
			w.Rec.Add(w.event(op, Lost, name, tok, err))
		}
	}
	if err == nil {
		_, err = tx.ExecContext(ctx, w.Store.update, v, tok, name)
	}
	if err == nil {
		_, err = tx.ExecContext(ctx, w.Store.insert, name, v, tok, w.ID)
	}
	if err != nil {
		_ = tx.Rollback()
		fail(err)
		return
	}
	if err := tx.Commit(); err != nil {
		k := WriteFail
		if errors.Is(w.Store.classify(err), sqllock.ErrOutcomeUnknown) {
			k = WriteUnknown
		}
		w.Rec.Add(w.event(op, k, name, tok, fmt.Errorf("commit: %w%s", err, chain(err))))
		return
	}
	e := w.event(op, WriteOK, name, tok, nil)
	e.Value = v
	w.Rec.Add(e)
}

// writeInLock increments in the pessimistic lock's transaction; the
// release commits it.
func (w *Worker) writeInLock(ctx context.Context, lock *sqllock.Lock) {
	name, tok := lock.Name(), lock.Token()
	op := w.Rec.NextOp(w.ID)
	w.Rec.Add(w.event(op, WriteInvoke, name, tok, nil))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	tx := lock.Tx()
	v, err := w.increment(sctx, tx, name, tok, op)
	if err == nil {
		_, err = tx.ExecContext(sctx, w.Store.update, v, tok, name)
	}
	if err == nil {
		_, err = tx.ExecContext(sctx, w.Store.insert, name, v, tok, w.ID)
	}
	rerr := w.release(lock)
	switch {
	case err != nil:
		w.Rec.Add(w.event(op, WriteFail, name, tok, fmt.Errorf("%w%s; release: %v", err, chain(err), rerr)))
	case rerr == nil:
		e := w.event(op, WriteOK, name, tok, nil)
		e.Value = v
		w.Rec.Add(e)
	case errors.Is(rerr, sqllock.ErrOutcomeUnknown):
		w.Rec.Add(w.event(op, WriteUnknown, name, tok, rerr))
	default:
		w.Rec.Add(w.event(op, WriteFail, name, tok, fmt.Errorf("%w%s", rerr, chain(rerr))))
	}
}

// chain lists the types of err's chain, to tell driver errors apart in a
// report.
func chain(err error) string {
	var ts []string
	for e := err; e != nil; e = errors.Unwrap(e) {
		ts = append(ts, fmt.Sprintf("%T", e))
	}
	return " [" + strings.Join(ts, " > ") + "]"
}

func (w *Worker) release(lock *sqllock.Lock) error {
	name, tok := lock.Name(), lock.Token()
	op := w.Rec.NextOp(w.ID)
	w.Rec.Add(w.event(op, ReleaseInvoke, name, tok, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := lock.Release(ctx)
	if err == nil {
		w.Rec.Add(w.event(op, ReleaseOK, name, tok, nil))
		return nil
	}
	w.Rec.Add(w.event(op, ReleaseFail, name, tok, err))
	if errors.Is(err, sqllock.ErrLockLost) {
		w.Rec.Add(w.event(op, Lost, name, tok, err))
	}
	return err
}
