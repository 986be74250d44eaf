package observe_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sqllock/sqllock/observe"
)

type acquired struct{}

func (acquired) Acquired(context.Context, observe.AcquiredEvent) {}

type reaped struct{}

func (*reaped) Reaped(context.Context, observe.ReapEvent) {}

// misspelt's method is AcquiredObserver's, misspelt: it hears nothing.
type misspelt struct{}

func (misspelt) Aquired(context.Context, observe.AcquiredEvent) {}

// Check takes nil and whatever implements an interface of the package, and
// refuses the rest with ErrNoInterface.
func TestCheck(t *testing.T) {
	t.Parallel()
	for _, obs := range []observe.Observer{nil, acquired{}, &reaped{}} {
		if err := observe.Check(obs); err != nil {
			t.Errorf("Check(%T) = %v, want nil", obs, err)
		}
	}
	for _, obs := range []observe.Observer{misspelt{}, reaped{}, 42} {
		if err := observe.Check(obs); !errors.Is(err, observe.ErrNoInterface) {
			t.Errorf("Check(%T) = %v, want ErrNoInterface", obs, err)
		}
	}
}
