package chaos

import (
	"context"
	"time"

	"github.com/sqllock/sqllock"
)

// readTurn is a turn on the read side of a read/write lock: acquire it,
// hold, check that the lease is still trusted, and release. Readers do not
// write: the guarded counter is the writers' (whose turns are the mutex's),
// so a reader beside a writer shows in the history only, which the
// read/write model of the checker (see CheckRW) finds.
func (w *Worker) readTurn(ctx context.Context, turn int, rw *sqllock.RWLock, name string) {
	op := w.Rec.NextOp(w.ID)
	inv := w.event(op, AcquireInvoke, name, 0, nil)
	inv.Shared, inv.Try = true, w.try(turn)
	w.Rec.Add(inv)
	actx, cancel := context.WithTimeout(withTurn(ctx, w.Rec, w.ID, op), w.Wait)
	var lock *sqllock.Lock
	var err error
	if inv.Try {
		lock, err = rw.TryAcquireShared(actx, name)
	} else {
		lock, err = rw.AcquireShared(actx, name)
	}
	cancel()
	if err != nil {
		w.Rec.Add(w.event(op, AcquireFail, name, 0, err))
		w.sleep(ctx, 20*time.Millisecond)
		return
	}
	tok := lock.Token()
	ok := w.grant(op, name, tok)
	ok.Shared = true
	w.Rec.Add(ok)
	w.sleep(ctx, w.Hold)
	at := time.Now().UnixNano()
	if lock.Context().Err() != nil {
		w.Rec.Add(w.event(op, Lost, name, tok, context.Cause(lock.Context())))
	} else {
		e := w.event(op, Trusted, name, tok, nil)
		e.At = at
		w.Rec.Add(e)
	}
	w.release(lock)
}

// readSide reports whether a turn of a read/write locker takes the read
// side: two turns in three.
func (w *Worker) readSide() bool { return w.Rand.IntN(3) > 0 }
