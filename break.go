package sqllock

import "context"

// Break ends the lease on name now, whoever holds it, and frees the lock:
// the way out when a holder is stuck or a minimum hold was set by mistake.
// It keeps the name's token floor, so the next acquisition's token is
// larger than the broken one; the broken holder's guarded writes are
// refused from then on, and it learns of the loss at its next renewal (its
// lock's context is cancelled with ErrLockLost). A lock released within
// its minimum hold is freed too.
//
// Break returns the lease it ended, with ok false (and no error) when
// nothing held name. Each break is logged at level WARN through
// TableOptions.Logger and reported to TableOptions.Observer if it
// implements observe.BreakObserver.
func (t *Table) Break(ctx context.Context, name string) (broken LockInfo, ok bool, err error) {
	if err := ValidateName(name); err != nil {
		return LockInfo{}, false, err
	}
	broken, ok, err = t.locks.Break(ctx, name)
	if err != nil || !ok {
		return LockInfo{}, false, err
	}
	t.eng.Room.Kick(name)
	t.eng.Events.Broken(ctx, broken)
	return broken, true, nil
}
