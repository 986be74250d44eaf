package sqllock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

// The package's surface and layout, as doc.go and ARCHITECTURE.md describe
// them, checked on the source.

// maxExported bounds the package's exported identifiers: see
// TestExportedIdentifiers.
const maxExported = 120

// parseLibrary parses the package's non-test files.
func parseLibrary(t *testing.T) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	p := pkgs["sqllock"]
	if p == nil {
		t.Fatal("no package sqllock in .")
	}
	return fset, p.Files
}

// receiver returns the name of the type a method is declared on.
func receiver(d *ast.FuncDecl) string {
	t := d.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// exported lists the package's exported consts, vars, funcs and types, the
// exported methods of its exported types, and the methods of its exported
// interfaces: what go doc shows, but the methods an exported type gets
// from an unexported embedded one.
func exported(files map[string]*ast.File) []string {
	var names []string
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				switch {
				case !d.Name.IsExported():
				case d.Recv == nil:
					names = append(names, "func "+d.Name.Name)
				case ast.IsExported(receiver(d)):
					names = append(names, "method "+receiver(d)+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						names = append(names, "type "+s.Name.Name)
						if it, ok := s.Type.(*ast.InterfaceType); ok {
							for _, m := range it.Methods.List {
								for _, n := range m.Names {
									names = append(names, "method "+s.Name.Name+"."+n.Name)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, d.Tok.String()+" "+n.Name)
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(names)
	return names
}

// The package keeps its surface small: every exported identifier is one
// more thing users learn and the project keeps. Run with -v to see them.
func TestExportedIdentifiers(t *testing.T) {
	t.Parallel()
	_, files := parseLibrary(t)
	names := exported(files)
	for _, n := range names {
		t.Log(n)
	}
	t.Logf("%d exported identifiers", len(names))
	if len(names) > maxExported {
		t.Errorf("%d exported identifiers, more than %d", len(names), maxExported)
	}
}

// A type's methods are in the file that declares it, so a maintainer
// finds all of them there.
func TestMethodsInTheirTypesFile(t *testing.T) {
	t.Parallel()
	fset, files := parseLibrary(t)
	declared := make(map[string]string) // type -> file
	for file, f := range files {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					declared[s.(*ast.TypeSpec).Name.Name] = file
				}
			}
		}
	}
	for file, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil {
				continue
			}
			if home := declared[receiver(fd)]; home != file {
				t.Errorf("%s: method %s.%s, whose type is declared in %s", fset.Position(fd.Pos()), receiver(fd), fd.Name.Name, home)
			}
		}
	}
}

// Data travels between the package's own files as arguments: the only
// context value it sets and reads is WithOwner's, which users set.
func TestNoContextValuesBetweenOwnFiles(t *testing.T) {
	t.Parallel()
	fset, files := parseLibrary(t)
	uses := 0
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "WithValue" && sel.Sel.Name != "Value") {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && (x.Name == "context" || x.Name == "ctx") {
				uses++
				t.Logf("%s: %s.%s", fset.Position(sel.Pos()), x.Name, sel.Sel.Name)
			}
			return true
		})
	}
	if uses != 2 {
		t.Errorf("%d uses of context values, want 2 (WithOwner's, and reading it)", uses)
	}
}
