package engine

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any leave a goroutine running, as
// the root package's does (dbtest.Finish).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
