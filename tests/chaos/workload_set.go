package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sqllock/sqllock"
)

// setTurn is a turn on a set of names taken at once (Table.AcquireAll):
// one to all of the worker's names, in a random order; then, as a single
// lock's turn does, a hold, a check that every lock of the set is still
// trusted, one guarded transaction incrementing every name's counter, and
// the release of the set. Each name is recorded as a lock of its own (see
// SetInvoke), so the history checks single locks' properties per name and
// the set's own.
func (w *Worker) setTurn(ctx context.Context, turn int) {
	t := w.Locker.(*sqllock.Table)
	names := slices.Clone(w.Names)
	w.Rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	names = names[:1+w.Rand.IntN(len(names))]
	op := w.Rec.NextOp(w.ID)
	at := time.Now().UnixNano()
	inv := w.event(op, SetInvoke, "", 0, nil)
	inv.Set, inv.At, inv.Try = JoinSet(names), at, w.try(turn)
	w.Rec.Add(inv)
	for _, n := range names {
		e := w.event(op, AcquireInvoke, n, 0, nil)
		e.At, e.Try = at, inv.Try
		w.Rec.Add(e)
	}
	actx, cancel := context.WithTimeout(withTurn(ctx, w.Rec, w.ID, op), w.Wait)
	var (
		set *sqllock.LockSet
		err error
	)
	if inv.Try {
		set, err = t.TryAcquireAll(actx, names...)
	} else {
		set, err = t.AcquireAll(actx, names...)
	}
	cancel()
	end := w.event(op, SetOK, "", 0, err)
	end.Set = inv.Set
	if err != nil {
		end.Kind = SetFail
		w.Rec.Add(end)
		w.sleep(ctx, 20*time.Millisecond)
		return
	}
	// The grants first: a process killed between the lines leaves a set
	// without its end, whose outcome is unknown, never an end without
	// all its grants.
	locks := set.Locks()
	for _, k := range locks {
		w.Rec.Add(w.grant(op, k.Name(), k.Token()))
	}
	w.Rec.Add(end)

	w.sleep(ctx, w.Hold)
	at = time.Now().UnixNano()
	lost := set.Context().Err() != nil
	for _, k := range locks {
		if lost {
			w.Rec.Add(w.event(op, Lost, k.Name(), k.Token(), context.Cause(set.Context())))
			continue
		}
		e := w.event(op, Trusted, k.Name(), k.Token(), nil)
		e.At = at
		w.Rec.Add(e)
	}
	w.writeSet(set)
	w.releaseSet(set)
}

// writeSet increments the counter of every name of set in one transaction
// guarded by the whole set (set.Guard), in name order.
func (w *Worker) writeSet(set *sqllock.LockSet) {
	locks := set.Locks()
	slices.SortFunc(locks, func(a, b *sqllock.Lock) int {
		switch {
		case a.Name() < b.Name():
			return -1
		case a.Name() > b.Name():
			return 1
		}
		return 0
	})
	ops := make([]int64, len(locks))
	for i, k := range locks {
		ops[i] = w.Rec.NextOp(w.ID)
		w.Rec.Add(w.event(ops[i], WriteInvoke, k.Name(), k.Token(), nil))
	}
	outcome := func(k Kind, err error, vs []int64) {
		for i, l := range locks {
			e := w.event(ops[i], k, l.Name(), l.Token(), err)
			if k == WriteOK {
				e.Value = vs[i]
			}
			w.Rec.Add(e)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := w.Store.db.BeginTx(ctx, nil)
	if err != nil {
		outcome(WriteFail, err, nil)
		return
	}
	vs := make([]int64, len(locks))
	for i, k := range locks {
		if vs[i], err = w.increment(ctx, tx, k.Name(), k.Token(), ops[i]); err != nil {
			break
		}
	}
	if err == nil {
		err = set.Guard(ctx, tx)
		if errors.Is(err, sqllock.ErrLockLost) {
			// The set is lost: the worker trusts none of its locks again.
			for i, k := range locks {
				w.Rec.Add(w.event(ops[i], Lost, k.Name(), k.Token(), err))
			}
		}
	}
	for i, k := range locks {
		if err != nil {
			break
		}
		if _, err = tx.ExecContext(ctx, w.Store.update, vs[i], k.Token(), k.Name()); err == nil {
			_, err = tx.ExecContext(ctx, w.Store.insert, k.Name(), vs[i], k.Token(), w.ID)
		}
	}
	if err != nil {
		_ = tx.Rollback()
		outcome(WriteFail, err, nil)
		return
	}
	if err := tx.Commit(); err != nil {
		k := WriteFail
		if errors.Is(w.Store.classify(err), sqllock.ErrOutcomeUnknown) {
			k = WriteUnknown
		}
		outcome(k, fmt.Errorf("commit: %w%s", err, chain(err)), nil)
		return
	}
	outcome(WriteOK, nil, vs)
}

// releaseSet releases set, recording a release of each of its locks.
func (w *Worker) releaseSet(set *sqllock.LockSet) {
	op := w.Rec.NextOp(w.ID)
	locks := set.Locks()
	for _, k := range locks {
		w.Rec.Add(w.event(op, ReleaseInvoke, k.Name(), k.Token(), nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := set.Release(ctx)
	for _, k := range locks {
		if err == nil {
			w.Rec.Add(w.event(op, ReleaseOK, k.Name(), k.Token(), nil))
			continue
		}
		w.Rec.Add(w.event(op, ReleaseFail, k.Name(), k.Token(), err))
		if errors.Is(err, sqllock.ErrLockLost) {
			w.Rec.Add(w.event(op, Lost, k.Name(), k.Token(), err))
		}
	}
}
