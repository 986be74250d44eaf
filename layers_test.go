package sqllock_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// modulePath is the core module's path, which is also the root package's.
const modulePath = "github.com/sqllock/sqllock"

// TestInternalImportsNotTheRoot holds the floors of ARCHITECTURE.md apart:
// no package under an internal/ directory of the core module, nor its
// tests, depends on the root package, directly or through a package that
// stands on it (ledger, rowlock, the suites under tests/). What drives the
// public API lives above it, under tests/.
func TestInternalImportsNotTheRoot(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-test",
		"-f", "{{.ImportPath}}\t{{join .Imports \" \"}}\t{{join .Deps \" \"}}", "./...").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps -test ./...: %v\n%s", err, stderr)
	}
	type listed struct{ path, imports string }
	var pkgs []listed
	above := map[string]bool{} // the root and the packages that depend on it
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		fields := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if len(fields) != 3 {
			t.Fatalf("go list printed %q, not 3 tab-separated fields", line)
		}
		path := fields[0]
		if packageOf(path) == modulePath || slices.Contains(strings.Fields(fields[2]), modulePath) {
			above[path] = true
		}
		pkgs = append(pkgs, listed{path, fields[1]})
	}
	checked := 0
	reported := map[string]bool{}
	for _, p := range pkgs {
		pkg := packageOf(p.path)
		if !underInternal(pkg) {
			continue
		}
		checked++
		if !above[p.path] || reported[pkg] {
			continue
		}
		reported[pkg] = true
		var via []string
		for _, imp := range strings.Fields(p.imports) {
			if above[imp] {
				via = append(via, packageOf(imp))
			}
		}
		t.Errorf("%s (or its tests) imports %s, which is or stands on the root package: move it under tests/, or the dependency below the root",
			pkg, strings.Join(via, ", "))
	}
	if checked == 0 {
		t.Fatalf("go list listed no package under internal/ among %d", len(pkgs))
	}
}

// packageOf is the import path of a package go list -test printed: without
// the test binary a variant is built for ("p [p.test]"), and a package of
// external tests or a test main ("p_test", "p.test") counted as p's.
func packageOf(listed string) string {
	p, _, _ := strings.Cut(listed, " ")
	return strings.TrimSuffix(strings.TrimSuffix(p, ".test"), "_test")
}

// underInternal reports whether the package at import path p is the core
// module's and lies under one of its internal/ directories.
func underInternal(p string) bool {
	rel, ok := strings.CutPrefix(p, modulePath+"/")
	return ok && slices.Contains(strings.Split(rel, "/"), "internal")
}
