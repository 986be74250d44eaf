package chaos

import (
	"context"

	"github.com/sqllock/sqllock"
)

// FIFO histories: a fair locker (sqllock.Options.Fair) is given
// EnqueueTracer as its Observer, and each turn of a Worker carries its
// operation on the Acquire's context, so that a waiter's ticket shows in
// the history as an Enqueued event. A waiter becomes the head of its
// locker's queue for a name (Tracer.Waiting, Delta 1) only after its
// ticket was committed, so the event's time is after the ticket was
// taken, as CheckFIFO needs.

// turnKey carries a turn's operation on the Acquire's context.
type turnKey struct{}

// turnOp is the operation of one Worker turn.
type turnOp struct {
	rec    *Recorder
	worker string
	op     int64
}

// withTurn returns ctx carrying the turn's operation.
func withTurn(ctx context.Context, rec *Recorder, worker string, op int64) context.Context {
	return context.WithValue(ctx, turnKey{}, turnOp{rec, worker, op})
}

// EnqueueTracer records an Enqueued event when a waiting Acquire of a
// Worker's turn becomes the head of its locker's queue; it ignores every
// other event.
type EnqueueTracer struct{}

var _ sqllock.Tracer = EnqueueTracer{}

// Waiting implements sqllock.Tracer.
func (EnqueueTracer) Waiting(ctx context.Context, e sqllock.WaitingEvent) {
	t, ok := ctx.Value(turnKey{}).(turnOp)
	if !ok || e.Delta != 1 {
		return
	}
	t.rec.Add(Event{Worker: t.worker, Op: t.op, Kind: Enqueued, Name: e.Name})
}

// The other methods of sqllock.Tracer do nothing.

func (EnqueueTracer) Acquired(context.Context, sqllock.AcquiredEvent) {}
func (EnqueueTracer) Released(context.Context, sqllock.ReleasedEvent) {}
func (EnqueueTracer) Lost(context.Context, sqllock.LostEvent)         {}
func (EnqueueTracer) StartAcquire(ctx context.Context, _ sqllock.AcquireStart) context.Context {
	return ctx
}
func (EnqueueTracer) EndAcquire(context.Context, sqllock.AcquireEnd) {}
func (EnqueueTracer) Handoff(context.Context, sqllock.HandoffEvent)  {}
func (EnqueueTracer) StartRelease(ctx context.Context, _ sqllock.LockEvent) context.Context {
	return ctx
}
func (EnqueueTracer) EndRelease(context.Context, sqllock.LockEvent, error) {}
func (EnqueueTracer) StartGuard(ctx context.Context, _ sqllock.LockEvent) context.Context {
	return ctx
}
func (EnqueueTracer) EndGuard(context.Context, sqllock.LockEvent, error) {}
func (EnqueueTracer) Renewed(context.Context, sqllock.RenewedEvent)      {}
func (EnqueueTracer) StartRenewBatch(ctx context.Context, _ sqllock.RenewBatch) context.Context {
	return ctx
}
func (EnqueueTracer) EndRenewBatch(context.Context, sqllock.RenewBatch, error) {}
func (EnqueueTracer) Listening(context.Context, sqllock.ListenerEvent)         {}
func (EnqueueTracer) Reaped(context.Context, sqllock.ReapEvent)                {}
func (EnqueueTracer) StartAttempt(ctx context.Context, _ sqllock.Attempt) context.Context {
	return ctx
}
func (EnqueueTracer) EndAttempt(context.Context, sqllock.AttemptEnd) {}
