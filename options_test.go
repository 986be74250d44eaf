package sqllock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"strings"
	"testing"
)

// The options types let through only what the primitive has: the lease
// options are shared, and a field a primitive lacks (Fair on an optimistic
// locker, MinHold on a read/write lock or an election) does not compile.
func TestOptionsRefuseWhatCannotWork(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the module's export data")
	}
	imp := exportImporter(t)
	for _, tc := range []struct {
		code, refusal string // refusal: "" if it compiles
	}{
		{"_, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}, MinHold: time.Hour, Fair: true})\nreturn err", ""},
		{"_, err := sqllock.NewSemaphore(d, 2, sqllock.SemaphoreOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}, MinHold: time.Hour, Fair: true})\nreturn err", ""},
		{"_, err := sqllock.NewOptimistic(d, sqllock.OptimisticOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}, MinHold: time.Hour})\nreturn err", ""},
		{"_, err := sqllock.NewRWLock(d, sqllock.LeaseOptions{TTL: time.Minute})\nreturn err", ""},
		{"_, err := sqllock.NewElection(d, sqllock.LeaseOptions{MaxBackoff: time.Second})\nreturn err", ""},
		{"_, err := sqllock.NewOptimistic(d, sqllock.OptimisticOptions{Fair: true})\nreturn err", "unknown field Fair"},
		{"_, err := sqllock.NewRWLock(d, sqllock.LeaseOptions{MinHold: time.Hour})\nreturn err", "unknown field MinHold"},
		{"_, err := sqllock.NewElection(d, sqllock.LeaseOptions{Fair: true})\nreturn err", "unknown field Fair"},
		{"_, err := sqllock.NewRWLock(d, sqllock.TableOptions{MinHold: time.Hour})\nreturn err", "cannot use"},
	} {
		src := snippetFile(tc.code)
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "snippet.go", src, 0)
		if err != nil {
			t.Fatalf("%v\n%s", err, src)
		}
		var errs []string
		conf := types.Config{Importer: imp, Error: func(err error) {
			if msg := err.Error(); !strings.Contains(msg, "not used") {
				errs = append(errs, msg)
			}
		}}
		_, _ = conf.Check("snippet", fset, []*ast.File{f}, nil)
		got := strings.Join(errs, "; ")
		switch {
		case tc.refusal == "" && got != "":
			t.Errorf("%s: %s, want it to compile", tc.code, got)
		case tc.refusal != "" && !strings.Contains(got, tc.refusal):
			t.Errorf("%s: compiles with %q, want a refusal naming %q", tc.code, got, tc.refusal)
		}
	}
}
