package chaos

import (
	"context"
	"testing"
)

func TestRecorderWaitFor(t *testing.T) {
	t.Parallel()
	r := NewRecorder(nil)
	got := make(chan bool)
	go func() { got <- r.WaitFor(t.Context(), WriteOK, 2) }()
	r.Add(Event{Kind: WriteOK})
	r.Add(Event{Kind: AcquireOK})
	r.Add(Event{Kind: WriteOK})
	if !<-got {
		t.Fatal("WaitFor returned false after the second write")
	}
	if n := r.Count(WriteOK); n != 2 {
		t.Fatalf("Count(WriteOK) = %d, want 2", n)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if r.WaitFor(ctx, WriteOK, 3) {
		t.Fatal("WaitFor reported a third write that never came")
	}
}
