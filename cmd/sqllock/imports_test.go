package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The command stands on the core's public API: no file of the cmd module
// but a test imports a package under the core's internal/ (the module's
// own cmd/internal/ would be its own business).
func TestNoCoreInternalImports(t *testing.T) {
	t.Parallel()
	const core = "github.com/sqllock/sqllock/"
	files := 0
	err := filepath.WalkDir("..", func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if rest, ok := strings.CutPrefix(p, core); ok && (rest == "internal" || strings.HasPrefix(rest, "internal/")) {
				t.Errorf("%s imports %s: the command uses the core's public packages only", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("no Go files found in the cmd module")
	}
}
