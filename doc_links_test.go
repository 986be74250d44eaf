package sqllock_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// Every relative link of README.md, CONTRIBUTING.md, BENCHMARKS.md,
// ARCHITECTURE.md and docs/ names a file or directory of the repository,
// and a #fragment names a heading of the Markdown file it points into.
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	files := append(docFiles(t), "CONTRIBUTING.md", "BENCHMARKS.md", "ARCHITECTURE.md")
	anchors := map[string]map[string]bool{}
	checked := 0
	for _, file := range files {
		for _, l := range markdownLinks(t, file) {
			target, frag, _ := strings.Cut(l.target, "#")
			path := file
			if target != "" {
				path = filepath.Join(filepath.Dir(file), target)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s:%d: link %q: %v", file, l.line, l.target, err)
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
	fenced := false
	scanLines(t, file, func(n int, line string) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			return
		}
		if !fenced {
			fn(n, line)
		}
	})
}

// scanLines calls fn for each line of a file, numbered from 1.
func scanLines(t *testing.T, file string, fn func(n int, line string)) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		fn(n, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// Every sqllock command line in the fenced blocks of README.md and docs/
// names a command of the built binary and only flags that its help lists,
// before NAME where a command follows it (run, elect, barrier): the
// examples follow the CLI.
func TestDocCommandLinesMatchHelp(t *testing.T) {
	t.Parallel()
	bin := sqllockCLI(t)
	helps := map[string]cliHelp{}
	help := func(cmd string) (cliHelp, bool) {
		if h, ok := helps[cmd]; ok {
			return h, h.flags != nil
		}
		out, err := exec.Command(bin, "help", cmd).Output()
		h := cliHelp{}
		if err == nil {
			h = parseHelp(string(out))
		}
		helps[cmd] = h
		return h, h.flags != nil
	}
	checked := 0
	for _, file := range docFiles(t) {
		for _, l := range commandLines(t, file) {
			args := l.args
			if len(args) == 0 || strings.HasPrefix(args[0], "-") || args[0] == "help" {
				continue // sqllock --version, sqllock help COMMAND
			}
			h, ok := help(args[0])
			if !ok {
				t.Errorf("%s:%d: sqllock %s: no such command", file, l.line, args[0])
				continue
			}
			checked++
			for i := 1; i < len(args); i++ {
				a := args[i]
				if a == "--" {
					break
				}
				if !strings.HasPrefix(a, "-") || a == "-" {
					if h.name && a != "flags" {
						// NAME: what follows is the command, or a usage error.
						if i+1 < len(args) && strings.HasPrefix(args[i+1], "-") && args[i+1] != "--" && args[i+1] != "-c" {
							t.Errorf("%s:%d: sqllock %s: option %s after NAME %s", file, l.line, args[0], args[i+1], a)
						}
						break
					}
					continue
				}
				flag, _, hasValue := strings.Cut(a, "=")
				takesValue, ok := h.flags[flag]
				if !ok {
					t.Errorf("%s:%d: sqllock %s: %s is not a flag of %q", file, l.line, args[0], flag, "sqllock help "+args[0])
					continue
				}
				if takesValue && !hasValue {
					i++
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d command lines, expected more: is the extraction broken?", checked)
	}
}

// cliHelp is what a command's help says about its arguments.
type cliHelp struct {
	flags map[string]bool // flag -> takes a value
	name  bool            // the usage has NAME [--] COMMAND: options end at NAME
}

var helpFlag = regexp.MustCompile(`^\s+(?:(-\w), )?(--[\w-]+)(?: ([A-Z][A-Z_]*))?\s`)

func parseHelp(out string) cliHelp {
	h := cliHelp{flags: map[string]bool{"-h": false, "--help": false}}
	for _, line := range strings.Split(out, "\n") {
		if usage, ok := strings.CutPrefix(line, "Usage: "); ok {
			h.name = strings.Contains(usage, " NAME [--] COMMAND")
		}
		if m := helpFlag.FindStringSubmatch(line); m != nil {
			takes := m[3] != ""
			h.flags[m[2]] = takes
			if m[1] != "" {
				h.flags[m[1]] = takes
			}
		}
	}
	return h
}

type commandLine struct {
	line int
	args []string // after "sqllock"
	text string   // the shell text from "sqllock" on, without a trailing comment
}

// trailingComment is a shell comment after a command.
var trailingComment = regexp.MustCompile(`\s+#\s.*$`)

// commandLines returns the sqllock command lines of the fenced blocks of a
// Markdown file, split into words as a shell would, up to a pipe, a
// redirection, a list operator or a comment.
func commandLines(t *testing.T, file string) []commandLine {
	t.Helper()
	var out []commandLine
	fenced, shell := false, false
	scanLines(t, file, func(n int, line string) {
		line = strings.TrimSpace(line)
		if lang, ok := strings.CutPrefix(line, "```"); ok {
			fenced = !fenced
			shell = fenced && (lang == "sh" || lang == "cron" || lang == "")
			return
		}
		if !shell {
			return
		}
		words := shellWords(line)
		for i, w := range words {
			if w == "sqllock" {
				text := line[strings.Index(line, "sqllock"):]
				out = append(out, commandLine{line: n, args: words[i+1:], text: trailingComment.ReplaceAllString(text, "")})
				return
			}
		}
	})
	return out
}

// shellWords splits a line into words, keeping quoted strings whole and
// dropping the brackets and bars of a usage synopsis.
func shellWords(line string) []string {
	var (
		words []string
		cur   strings.Builder
		quote rune
		in    bool
	)
	flush := func() {
		if in {
			w := strings.Trim(cur.String(), "[]")
			if w != "" && w != "|" && w != "..." {
				words = append(words, w)
			}
		}
		cur.Reset()
		in = false
	}
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '#' && !in, r == ';', r == '>', r == '<', r == '&':
			flush()
			return words
		case r == '|' && !in:
			if len(words) > 0 && !strings.HasPrefix(words[len(words)-1], "[") {
				flush()
				return words
			}
		case unicode.IsSpace(r):
			flush()
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	flush()
	return words
}
