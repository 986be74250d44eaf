package chaos

import (
	"context"
	"errors"
	"time"

	"github.com/sqllock/sqllock"
)

// sidesTurn is a turn of the "rwsides" strategy on the read/write lock rw:
// one turn in three a plain read (readTurn), one a write that downgrades
// midway (downgradeTurn), one an upgradeable read that upgrades midway
// (upgradeTurn). The guarded write of a turn runs only while its hold is
// the writer; the checker's model is CheckRWSides.
func (w *Worker) sidesTurn(ctx context.Context, turn int, rw *sqllock.RWLock, name string) {
	switch w.Rand.IntN(3) {
	case 0:
		w.readTurn(ctx, turn, rw, name)
	case 1:
		w.downgradeTurn(ctx, turn, rw, name)
	default:
		w.upgradeTurn(ctx, turn, rw, name)
	}
}

// downgradeTurn takes the write side, holds, writes, downgrades, holds the
// read side and releases. It downgrades even after a loss (Downgrade must
// then refuse).
func (w *Worker) downgradeTurn(ctx context.Context, turn int, rw *sqllock.RWLock, name string) {
	lock, op := w.acquireSide(ctx, turn, rw, name, false)
	if lock == nil {
		return
	}
	w.sleep(ctx, w.Hold)
	w.checkTrust(op, lock)
	w.writeGuarded(lock)
	if w.changeSides(ctx, lock, DowngradeInvoke) {
		w.sleep(ctx, w.Hold)
		w.checkTrust(op, lock)
	}
	w.release(lock)
}

// upgradeTurn takes an upgradeable read, holds, upgrades (waiting for the
// readers beside it to leave, at most Wait), writes as the writer, then
// one time in two downgrades and holds the read side, and releases. A
// failed upgrade ends the turn without a write.
func (w *Worker) upgradeTurn(ctx context.Context, turn int, rw *sqllock.RWLock, name string) {
	lock, op := w.acquireSide(ctx, turn, rw, name, true)
	if lock == nil {
		return
	}
	w.sleep(ctx, w.Hold)
	w.checkTrust(op, lock)
	if w.changeSides(ctx, lock, UpgradeInvoke) {
		w.checkTrust(op, lock)
		w.writeGuarded(lock)
		if w.Rand.IntN(2) == 0 && w.changeSides(ctx, lock, DowngradeInvoke) {
			w.sleep(ctx, w.Hold)
			w.checkTrust(op, lock)
		}
	}
	w.release(lock)
}

// acquireSide records and makes an acquisition of rw's write side, or of
// an upgradeable read, with TryAcquire or TryAcquireUpgradeable on the
// turns of w.try; it returns the lock and the acquisition's op, or a nil
// lock if it was not granted.
func (w *Worker) acquireSide(ctx context.Context, turn int, rw *sqllock.RWLock, name string, upgradeable bool) (*sqllock.Lock, int64) {
	op := w.Rec.NextOp(w.ID)
	inv := w.event(op, AcquireInvoke, name, 0, nil)
	inv.Shared, inv.Upgradeable, inv.Try = upgradeable, upgradeable, w.try(turn)
	w.Rec.Add(inv)
	actx, cancel := context.WithTimeout(withTurn(ctx, w.Rec, w.ID, op), w.Wait)
	var lock *sqllock.Lock
	var err error
	switch {
	case upgradeable && inv.Try:
		lock, err = rw.TryAcquireUpgradeable(actx, name)
	case upgradeable:
		lock, err = rw.AcquireUpgradeable(actx, name)
	case inv.Try:
		lock, err = rw.TryAcquire(actx, name)
	default:
		lock, err = rw.Acquire(actx, name)
	}
	cancel()
	if err != nil {
		w.Rec.Add(w.event(op, AcquireFail, name, 0, err))
		w.sleep(ctx, 20*time.Millisecond)
		return nil, 0
	}
	ok := w.grant(op, name, lock.Token())
	ok.Shared, ok.Upgradeable = upgradeable, upgradeable
	w.Rec.Add(ok)
	return lock, op
}

// checkTrust records, for the acquisition of operation op, that the lock is
// still trusted, or that it was lost.
func (w *Worker) checkTrust(op int64, lock *sqllock.Lock) {
	at := time.Now().UnixNano()
	if lock.Context().Err() != nil {
		w.Rec.Add(w.event(op, Lost, lock.Name(), lock.Token(), context.Cause(lock.Context())))
		return
	}
	e := w.event(op, Trusted, lock.Name(), lock.Token(), nil)
	e.At = at
	w.Rec.Add(e)
}

// changeSides records and makes a change of lock's side: kind is
// DowngradeInvoke or UpgradeInvoke. An upgrade waits at most Wait (and
// ends with ctx); the completion carries the token the lock reports
// afterwards. It reports whether the change was made.
func (w *Worker) changeSides(ctx context.Context, lock *sqllock.Lock, kind Kind) bool {
	name, tok := lock.Name(), lock.Token()
	op := w.Rec.NextOp(w.ID)
	w.Rec.Add(w.event(op, kind, name, tok, nil))
	var err error
	done, fail := DowngradeOK, DowngradeFail
	if kind == UpgradeInvoke {
		done, fail = UpgradeOK, UpgradeFail
		uctx, cancel := context.WithTimeout(ctx, w.Wait)
		err = lock.Upgrade(uctx)
		cancel()
	} else {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err = lock.Downgrade(dctx)
		cancel()
	}
	if err != nil {
		w.Rec.Add(w.event(op, fail, name, tok, err))
		if errors.Is(err, sqllock.ErrLockLost) {
			w.Rec.Add(w.event(op, Lost, name, tok, err))
		}
		return false
	}
	w.Rec.Add(w.event(op, done, name, lock.Token(), nil))
	return true
}
