package mysql

import (
	"fmt"
	"strings"
	"testing"
)

// The protocol's procedures (migration 24) run the lock table's
// statements of the Go library, with the procedures' parameters for the
// statements' named parameters: a change to a statement must come with a
// new migration that changes the procedures.
func TestProtocolRunsLibraryStatements(t *testing.T) {
	body, err := migrationFiles.ReadFile("migrations/24_protocol_routines.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	migration := squeeze(string(body))
	params := strings.NewReplacer(
		":names", "lock_name", ":leases", "(lock_name, lock_owner, lease_token)", ":name", "lock_name",
		":owner", "lock_owner", ":token", "lease_token", ":ttl", "ttl_us", ":minhold", "0")
	s := lockSQL("sqllock_locks", "sqllock_token_floor")
	w := newWakeStmts("sqllock_waiters", []ticketQueue{{tickets: "sqllock_tickets"}}, "", "sqllock_locks")
	for what, stmt := range map[string]string{
		"acquire":     s.Acquire.Text,
		"renewal":     s.RenewMany.Text,
		"release":     s.Release.Text,
		"guard":       strings.Replace(s.Guard.Text, "SELECT 1 FROM", "SELECT 1 INTO live FROM", 1),
		"remaining":   s.Remaining.Text,
		"ring":        fmt.Sprintf(w.ringMark, "lock_name"),
		"bells":       fmt.Sprintf(w.ringFind, "lock_name"),
		"ticket ring": fmt.Sprintf(w.queues[0].mark, "lock_name"),
		"ticket bell": strings.Replace(fmt.Sprintf(w.queues[0].find, "lock_name"), " FROM", " INTO conn_id FROM", 1),
	} {
		if want := squeeze(params.Replace(stmt)); !strings.Contains(migration, want) {
			t.Errorf("migration 24 does not run the library's %s statement:\n%s", what, want)
		}
	}
}

// squeeze is s with its runs of white space made one space.
func squeeze(s string) string { return strings.Join(strings.Fields(s), " ") }
