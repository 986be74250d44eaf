package dialect_test

import (
	"testing"

	"github.com/sqllock/sqllock/dialect"
)

func TestTicketWake(t *testing.T) {
	t.Parallel()
	for _, id := range []int64{1, 42, 1 << 62} {
		if got, ok := dialect.ParseTicketWake(dialect.TicketWake(id)); !ok || got != id {
			t.Errorf("ParseTicketWake(TicketWake(%d)) = %d, %v", id, got, ok)
		}
	}
	for _, name := range []string{"job", "sqllock-ticket:5", "\x01sqllock-ticket:x", ""} {
		if _, ok := dialect.ParseTicketWake(name); ok {
			t.Errorf("ParseTicketWake(%q) took a lock name for a ticket", name)
		}
	}
}
