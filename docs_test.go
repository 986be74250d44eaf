package sqllock_test

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// notYetMerged are files that links may name before the branch adding them
// is merged: a link to one of them is checked only once it exists.
var notYetMerged = map[string]bool{
	"ARCHITECTURE.md":   true,
	"contrib/README.md": true,
}

// Every relative link of README.md, CONTRIBUTING.md, BENCHMARKS.md,
// ARCHITECTURE.md and docs/ names a file or directory of the repository,
// and a #fragment names a heading of the Markdown file it points into.
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	files := append(docFiles(t), "CONTRIBUTING.md", "BENCHMARKS.md", "ARCHITECTURE.md")
	anchors := map[string]map[string]bool{}
	checked := 0
	for _, file := range files {
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) && notYetMerged[file] {
			continue
		}
		for _, l := range markdownLinks(t, file) {
			target, frag, _ := strings.Cut(l.target, "#")
			path := file
			if target != "" {
				path = filepath.Join(filepath.Dir(file), target)
			}
			if _, err := os.Stat(path); err != nil {
				if !notYetMerged[filepath.ToSlash(path)] {
					t.Errorf("%s:%d: link %q: %v", file, l.line, l.target, err)
				}
				continue
			}
			checked++
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if anchors[path] == nil {
				anchors[path] = headingAnchors(t, path)
			}
			if !anchors[path][frag] {
				t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", file, l.line, l.target, path, frag)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d relative links, expected more: is the extraction broken?", checked)
	}
}

type mdLink struct {
	line   int
	target string
}

var (
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
)

// markdownLinks returns the relative link targets of a Markdown file,
// outside code blocks and code spans.
func markdownLinks(t *testing.T, file string) []mdLink {
	t.Helper()
	var out []mdLink
	eachProseLine(t, file, func(n int, line string) {
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			out = append(out, mdLink{line: n, target: target})
		}
	})
	return out
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown file: lower case, punctuation dropped, spaces as hyphens, and
// -1, -2, ... after repeats.
func headingAnchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	seen := map[string]int{}
	eachProseLine(t, file, func(_ int, line string) {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			return
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	})
	return anchors
}

// eachProseLine calls fn for each line of a Markdown file outside fenced
// code blocks.
func eachProseLine(t *testing.T, file string, fn func(n int, line string)) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	fenced := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			fn(n, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}
