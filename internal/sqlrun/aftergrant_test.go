package sqlrun

import (
	"context"
	"testing"
	"testing/synctest"
)

// A release waits for the work its name's grants left to run after them
// (a granted ticket's deletion, and its ring), and for nothing else: not
// for another name's, not once that work is done, not past its context.
func TestReleaseWaitsForWorkAfterGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var a afterGrants
		endX := a.begin("x")
		endX2 := a.begin("x")
		endY := a.begin("y")
		a.wait(t.Context(), "z") // nothing under way: returns at once

		waited := make(chan struct{})
		go func() {
			a.wait(t.Context(), "x")
			close(waited)
		}()
		endY()
		endX()
		synctest.Wait()
		select {
		case <-waited:
			t.Fatal("the release of x went on while work after a grant of x was under way")
		default:
		}
		endX2()
		synctest.Wait()
		select {
		case <-waited:
		default:
			t.Fatal("the release of x still waits once the work after its grants is done")
		}
		if len(a.m) != 0 {
			t.Fatalf("%d names kept after their work ended", len(a.m))
		}

		defer a.begin("x")()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		a.wait(ctx, "x") // returns: ctx ended
	})
}
