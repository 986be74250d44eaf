package sqlrun

import (
	"context"

	"github.com/sqllock/sqllock/dialect"
)

// LatchTable runs the statements of the latch table (see
// dialect.LatchSQL). Every method is one statement, or two one after the
// other, on connections of their own.
type LatchTable interface {
	// Create creates name's latch with count unless it exists, and returns
	// the count the latch was created with (count, or an earlier create's).
	Create(ctx context.Context, name string, count int) (int, error)
	// CountDown takes one from name's count if it is above 0, and returns
	// whether it did and the count it left (or, when it did not, the
	// count read after: 0, or -1 for no latch of that name). Of
	// concurrent count-downs, exactly one takes the count to 0.
	CountDown(ctx context.Context, name string) (bool, int, error)
	// Count returns the count name has left, -1 when it has no latch.
	Count(ctx context.Context, name string) (int, error)
	// Delete deletes name's latch and reports whether it existed.
	Delete(ctx context.Context, name string) (bool, error)
	// Announces says whether CountDown announces a latch that reached 0
	// to the dialect's Notifier.
	Announces() bool
}

// latchTable implements LatchTable.
type latchTable struct {
	run                                              *Runner
	create, initial, count, countDown, del, announce Stmt
	channel                                          string
}

var _ LatchTable = (*latchTable)(nil)

// newLatchTable compiles s; a compile error is kept in c.
func newLatchTable(run *Runner, c *Compiler, s dialect.LatchSQL) *latchTable {
	t := &latchTable{run: run, channel: s.Channel,
		create: c.Compile(s.Create), initial: c.Compile(s.Initial), count: c.Compile(s.Count),
		countDown: c.Compile(s.CountDown), del: c.Compile(s.Delete)}
	if s.Announce.Text != "" {
		t.announce = c.Compile(s.Announce)
	}
	return t
}

// Create implements LatchTable.
func (t *latchTable) Create(ctx context.Context, name string, count int) (int, error) {
	if _, err := t.run.Int(ctx, &t.create, &Params{Name: name, Limit: count}); err != nil {
		return 0, err
	}
	n, err := t.run.Int(ctx, &t.initial, &Params{Name: name})
	return int(n), err
}

// CountDown implements LatchTable: once its decrement leaves 0, it
// announces the name (where the dialect can).
func (t *latchTable) CountDown(ctx context.Context, name string) (bool, int, error) {
	before, err := t.run.Int(ctx, &t.countDown, &Params{Name: name})
	if err != nil {
		return false, 0, err
	}
	if before <= 0 {
		left, err := t.Count(ctx, name) // 0 already, or no latch
		return false, left, err
	}
	left := int(before - 1)
	if left == 0 && t.announce.declared() {
		if _, err := t.run.Int(ctx, &t.announce, &Params{Name: name, Channel: t.channel}); err != nil {
			return true, 0, err
		}
	}
	return true, left, nil
}

// Count implements LatchTable.
func (t *latchTable) Count(ctx context.Context, name string) (int, error) {
	n, err := t.run.Int(ctx, &t.count, &Params{Name: name})
	return int(n), err
}

// Delete implements LatchTable.
func (t *latchTable) Delete(ctx context.Context, name string) (bool, error) {
	n, err := t.run.Int(ctx, &t.del, &Params{Name: name})
	return n > 0, err
}

// Announces implements LatchTable.
func (t *latchTable) Announces() bool { return t.announce.declared() }
