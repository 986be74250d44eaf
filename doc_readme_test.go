package sqllock_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/doc"
	"go/format"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The package documentation names every exported function and type of the
// package, as a doc link, so that a new strategy or helper cannot be left
// out of it.
func TestPackageDocListsAPI(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	p := doc.New(pkgs["sqllock"], "github.com/sqllock/sqllock", 0)
	var names []string
	for _, f := range p.Funcs {
		names = append(names, f.Name)
	}
	for _, ty := range p.Types {
		names = append(names, ty.Name)
		for _, f := range ty.Funcs { // constructors
			names = append(names, f.Name)
		}
	}
	for _, name := range names {
		if !strings.Contains(p.Doc, "["+name+"]") && !strings.Contains(p.Doc, "[*"+name+"]") && !strings.Contains(p.Doc, "["+name+"].") {
			t.Errorf("the package doc (doc.go) does not mention [%s]", name)
		}
	}
}

// Every ```go block of README.md and docs/ type-checks against this
// module: blocks are fragments, so each is wrapped in a function returning
// error, with the names the prose takes for granted (ctx, db, d, id, qty,
// ...) declared around it, its own import lines hoisted, and `{ ... }`
// standing for code left out. Only unused variables and imports are
// forgiven.
func TestDocSnippetsCompile(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the module's export data")
	}
	var blocks []goBlock
	for _, file := range docFiles(t) {
		blocks = append(blocks, goBlocks(t, file)...)
	}
	if len(blocks) < 20 {
		t.Fatalf("found %d go blocks in README.md and docs/, expected more: is the extraction broken?", len(blocks))
	}
	imp := exportImporter(t)
	for _, b := range blocks {
		if strings.HasPrefix(b.text, "package ") {
			if formatted, err := format.Source([]byte(b.text)); err == nil && string(formatted) != b.text {
				t.Errorf("%s:%d: a whole program that gofmt would change", b.file, b.line)
			}
		}
		src := snippetFile(b.text)
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "snippet.go", src, 0)
		if err != nil {
			t.Errorf("%s:%d: %v\n%s", b.file, b.line, err, src)
			continue
		}
		var errs []string
		conf := types.Config{Importer: imp, Error: func(err error) {
			msg := err.Error()
			if strings.Contains(msg, "declared and not used") || strings.Contains(msg, "imported and not used") {
				return
			}
			errs = append(errs, msg)
		}}
		_, _ = conf.Check("snippet", fset, []*ast.File{f}, nil)
		if len(errs) > 0 {
			t.Errorf("%s:%d does not compile:\n\t%s\n%s", b.file, b.line, strings.Join(errs, "\n\t"), src)
		}
	}
}

// docFiles returns README.md and every Markdown file under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(path string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

type goBlock struct {
	file string
	line int
	text string
}

// goBlocks returns the ```go blocks of a Markdown file.
func goBlocks(t *testing.T, file string) []goBlock {
	t.Helper()
	var (
		out []goBlock
		cur *goBlock
		sb  strings.Builder
	)
	scanLines(t, file, func(n int, line string) {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &goBlock{file: file, line: n + 1}
			sb.Reset()
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.text = sb.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			sb.WriteString(line + "\n")
		}
	})
	return out
}

// snippetImports are the packages a snippet may use without importing
// them; unused ones are forgiven.
var snippetImports = []string{
	"context", "database/sql", "errors", "log/slog", "os", "time",
	"github.com/jackc/pgx/v5/pgxpool",
	"github.com/sqllock/sqllock",
	"github.com/sqllock/sqllock/barrier",
	"github.com/sqllock/sqllock/dialect",
	"github.com/sqllock/sqllock/dialect/mysql",
	"github.com/sqllock/sqllock/dialect/postgres",
	"github.com/sqllock/sqllock/dialect/sqlite",
	"github.com/sqllock/sqllock/latch",
	"github.com/sqllock/sqllock/ledger",
	"github.com/sqllock/sqllock/observe",
	"github.com/sqllock/sqllock/rowlock",
	"github.com/sqllock/sqllock/sqllockotel",
}

// snippetPrelude declares what the docs' prose takes for granted.
const snippetPrelude = `
var (
	ctx        context.Context
	db         *sql.DB
	pool       *pgxpool.Pool
	d          dialect.Dialect
	lock       *sqllock.Lock
	id, qty    int
	amount     int
	body       string
	ErrSoldOut = errors.New("sold out")
)

func work(context.Context)              {}
func buildReport(context.Context) error { return nil }
`

var (
	importLine  = regexp.MustCompile(`^import\s+(_\s+)?("[^"]+")\s*$`)
	elidedBlock = regexp.MustCompile(`\{\s*\.\.\.\s*\}`)
)

// snippetFile turns a Markdown block into a Go file.
func snippetFile(text string) string {
	if strings.HasPrefix(text, "package ") {
		return text // a whole program: checked as it stands
	}
	imports := map[string]string{} // path -> name ("" or "_")
	for _, p := range snippetImports {
		imports[p] = ""
	}
	var body []string
	inImport := false
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "import (":
			inImport = true
		case inImport && trimmed == ")":
			inImport = false
		case inImport && trimmed != "":
			f := strings.Fields(trimmed)
			if len(f) == 2 {
				imports[strings.Trim(f[1], `"`)] = f[0]
			} else {
				imports[strings.Trim(f[0], `"`)] = ""
			}
		case importLine.MatchString(trimmed):
			m := importLine.FindStringSubmatch(trimmed)
			imports[strings.Trim(m[2], `"`)] = strings.TrimSpace(m[1])
		default:
			body = append(body, line)
		}
	}
	var b bytes.Buffer
	b.WriteString("package snippet\n\nimport (\n")
	paths := make([]string, 0, len(imports))
	for p := range imports {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		fmt.Fprintf(&b, "\t%s %q\n", imports[p], p)
	}
	b.WriteString(")\n")
	b.WriteString(snippetPrelude)
	b.WriteString("\nfunc snippet() error {\n")
	b.WriteString(elidedBlock.ReplaceAllString(strings.Join(body, "\n"), `{ panic("elided") }`))
	b.WriteString("\n\treturn nil\n}\n")
	return b.String()
}

// exportImporter imports packages from the export data that the go command
// builds for this module's dependencies.
func exportImporter(t *testing.T) types.Importer {
	t.Helper()
	args := append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", "github.com/jackc/pgx/v5/stdlib", "github.com/go-sql-driver/mysql"}, snippetImports...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -export: %v\n%s", err, stderr)
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, "\t"); ok && file != "" {
			exports[path] = file
		}
	}
	return importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %q", path)
		}
		return os.Open(file)
	})
}

// optionsPackages are the directories of the packages whose *Options
// types TestOptionsFieldsDocumented checks.
var optionsPackages = []string{".", "rowlock", "sqllockotel", "ledger", "latch", "barrier"}

// sameFields is how an options type's doc says that its fields are
// documented on another's.
var sameFields = regexp.MustCompile(`the fields are those of\s+(\w+Options)`)

// fieldRef is a reference to an options field in prose or code:
// TableOptions.MinHold, or TableOptions{MinHold: ...}.
var fieldRef = regexp.MustCompile(`\b(?:([a-z]\w*)\.)?(\w*Options)(?:\.|\{)([A-Z]\w*)\b`)

// Every exported field of every options type (TableOptions, TxOptions,
// sqllockotel.Options, ...) has a doc comment, or is a documented field of
// the type whose doc says "the fields are those of TableOptions"; and every
// field that the
// README, docs/ and the packages' comments name as TypeOptions.Field (or
// TypeOptions{Field: ...}) exists.
func TestOptionsFieldsDocumented(t *testing.T) {
	t.Parallel()
	fields := map[string]map[string]bool{} // "pkg.Type" -> its exported fields
	documented := map[string]bool{}        // "pkg.Type.Field" with a doc comment
	type borrowed struct {
		pos        token.Position
		typ, field string
		from       string // the type whose fields these are
	}
	var borrowers []borrowed
	embeds := map[string][]string{} // "pkg.Type" -> the options types it embeds (or is)
	var sources []string
	for _, dir := range optionsPackages {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, pkg := range pkgs {
			for name, f := range pkg.Files {
				sources = append(sources, name)
				ast.Inspect(f, func(n ast.Node) bool {
					gd, ok := n.(*ast.GenDecl)
					if !ok || gd.Tok != token.TYPE {
						return true
					}
					for _, spec := range gd.Specs {
						ts := spec.(*ast.TypeSpec)
						doc := gd.Doc.Text() + ts.Doc.Text()
						if !ts.Name.IsExported() || !strings.HasSuffix(ts.Name.Name, "Options") {
							continue
						}
						typ := pkg.Name + "." + ts.Name.Name
						if id, ok := ts.Type.(*ast.Ident); ok {
							// type SemaphoreOptions TableOptions: the
							// other's fields.
							embeds[typ] = append(embeds[typ], pkg.Name+"."+id.Name)
							fields[typ] = map[string]bool{}
							continue
						}
						st, ok := ts.Type.(*ast.StructType)
						if !ok {
							continue
						}
						fields[typ] = map[string]bool{}
						from := sameFields.FindStringSubmatch(strings.Join(strings.Fields(doc), " "))
						for _, f := range st.Fields.List {
							if id, ok := f.Type.(*ast.Ident); ok && len(f.Names) == 0 {
								// An embedded options type: its name, and
								// its fields, promoted.
								fields[typ][id.Name] = true
								embeds[typ] = append(embeds[typ], pkg.Name+"."+id.Name)
							}
							for _, id := range f.Names {
								if !id.IsExported() {
									continue
								}
								fields[typ][id.Name] = true
								switch {
								case f.Doc.Text() != "" || f.Comment.Text() != "":
									documented[typ+"."+id.Name] = true
								case from != nil:
									borrowers = append(borrowers, borrowed{fset.Position(id.Pos()), typ, id.Name, pkg.Name + "." + from[1]})
								default:
									t.Errorf("%s: %s.%s has no doc comment", fset.Position(id.Pos()), typ, id.Name)
								}
							}
						}
					}
					return false
				})
			}
		}
	}
	for range 2 { // SemaphoreOptions is TableOptions, which embeds LeaseOptions
		for typ, from := range embeds {
			for _, e := range from {
				for f := range fields[e] {
					fields[typ][f] = true
				}
			}
		}
	}
	if len(fields) < 8 {
		t.Fatalf("found %d options types, expected more: is the parsing broken?", len(fields))
	}
	for _, b := range borrowers {
		if !documented[b.from+"."+b.field] {
			t.Errorf("%s: %s.%s has no doc comment, and %s, whose fields its type's doc says these are, has no documented %s",
				b.pos, b.typ, b.field, b.from, b.field)
		}
	}
	checked := 0
	for _, file := range append(append(docFiles(t), "CONTRIBUTING.md", "ARCHITECTURE.md"), sources...) {
		scanLines(t, file, func(n int, line string) {
			for _, m := range fieldRef.FindAllStringSubmatch(line, -1) {
				pkg, typ, field := m[1], m[2], m[3]
				// A qualified reference (ledger.Options.TTL) names its
				// package; an unqualified one may be of any package
				// that has an options type of that name.
				var cands []string
				for k := range fields {
					p, name, _ := strings.Cut(k, ".")
					if name == typ && (pkg == "" || p == pkg || pkg == "sqllock" && p == "sqllock") {
						cands = append(cands, k)
					}
				}
				if len(cands) == 0 {
					continue // another package's options (slog.HandlerOptions, ...)
				}
				checked++
				if !slices.ContainsFunc(cands, func(k string) bool { return fields[k][field] }) {
					t.Errorf("%s:%d: %s.%s: %s has no such field", file, n, typ, field, strings.Join(cands, ", "))
				}
			}
		})
	}
	if checked < 20 {
		t.Fatalf("checked %d field references, expected more: is the extraction broken?", checked)
	}
}
