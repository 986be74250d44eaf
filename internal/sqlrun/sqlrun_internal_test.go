package sqlrun

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A statement that fails with the context's own error (as drivers do when
// a context ends mid-statement) reports it once, not once per layer; a
// failure of another kind gets the context's error beside it.
func TestWithCauseOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := WithCause(ctx, fmt.Errorf("running acquire: %w", context.Canceled))
	if got := err.Error(); strings.Count(got, "context canceled") != 1 || strings.Contains(got, "\n") {
		t.Errorf("the context's error twice: %q", got)
	}
	other := errors.New("bad connection")
	if err := WithCause(ctx, other); !errors.Is(err, context.Canceled) || !errors.Is(err, other) {
		t.Errorf("WithCause(another error) = %v, want both", err)
	}
	if err := WithCause(context.Background(), other); err != other {
		t.Errorf("WithCause on a live context = %v, want the error as it is", err)
	}
}
