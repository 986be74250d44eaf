package rowlock

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/observe"
)

type sqlStateError string

func (e sqlStateError) Error() string    { return "sqlstate " + string(e) }
func (e sqlStateError) SQLState() string { return string(e) }

func TestRetryReason(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]string{
		fmt.Errorf("x: %w", ErrConflict):                                          observe.RetryConflict,
		fmt.Errorf("%w: %w", sqllock.ErrTransient, sqlStateError("40P01")):        observe.RetryDeadlock,
		fmt.Errorf("%w: %w", sqllock.ErrTransient, sqlStateError("40001")):        observe.RetrySerialization,
		fmt.Errorf("%w: %w", sqllock.ErrTransient, errors.New("Error 1213: ...")): observe.RetryTransient,
	} {
		if got := retryReason(err); got != want {
			t.Errorf("retryReason(%v) = %q, want %q", err, got, want)
		}
	}
}
