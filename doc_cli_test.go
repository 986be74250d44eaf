package sqllock_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// cli is the sqllock command, built once for the tests that run it.
var cli struct {
	once sync.Once
	dir  string // removed by removeCLI
	path string
	skip string // why it cannot be built here
	err  error
}

// sqllockCLI returns the path of the sqllock command built from this tree,
// or skips the test where it cannot be built.
func sqllockCLI(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds cmd/sqllock")
	}
	cli.once.Do(func() {
		if out, err := exec.Command("go", "env", "GOWORK").Output(); err != nil || strings.TrimSpace(string(out)) == "" {
			cli.skip = "cmd/sqllock is a module of its own: needs the workspace (go.work)"
			return
		}
		if cli.dir, cli.err = os.MkdirTemp("", "sqllock-docs-"); cli.err != nil {
			return
		}
		cli.path = filepath.Join(cli.dir, "sqllock")
		if out, err := exec.Command("go", "build", "-o", cli.path, "./cmd/sqllock").CombinedOutput(); err != nil {
			cli.err = errors.New("go build ./cmd/sqllock: " + err.Error() + "\n" + string(out))
		}
	})
	switch {
	case cli.skip != "":
		t.Skip(cli.skip)
	case cli.err != nil:
		t.Fatal(cli.err)
	}
	return cli.path
}

// removeCLI removes the command sqllockCLI built, if it did.
func removeCLI() {
	if cli.dir != "" {
		os.RemoveAll(cli.dir)
	}
}

// synopsisWord is a word of a usage synopsis: a quoted string or a run of
// non-blanks.
var synopsisWord = regexp.MustCompile(`'[^']*'|\S+`)

// optionalGroup is an innermost [...] of a synopsis.
var optionalGroup = regexp.MustCompile(`\[[^\[\]]*\]`)

// The synopsis at the top of docs/cli.md has a line for every command that
// "sqllock help" lists, written from the same source as help: each line
// names every flag its command's help lists (but the common --dsn and
// --schema), only those (TestDocCommandLinesMatchHelp), and every argument
// the help's usage line requires.
func TestDocCLISynopsis(t *testing.T) {
	t.Parallel()
	bin := sqllockCLI(t)
	synopses := cliSynopses(t)
	out, err := exec.Command(bin, "help").Output()
	if err != nil {
		t.Fatalf("sqllock help: %v", err)
	}
	_, list, _ := strings.Cut(string(out), "\nCommands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	var commands []string
	for line := range strings.SplitSeq(list, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			commands = append(commands, f[0])
		}
	}
	if len(commands) < 10 {
		t.Fatalf("sqllock help lists %d commands, expected more: is the extraction broken?\n%s", len(commands), out)
	}
	for _, cmd := range commands {
		words, ok := synopses[cmd]
		if !ok {
			t.Errorf("docs/cli.md: no synopsis line for sqllock %s", cmd)
			continue
		}
		out, err := exec.Command(bin, "help", cmd).Output()
		if err != nil {
			t.Errorf("sqllock help %s: %v", cmd, err)
			continue
		}
		help := string(out)
		for line := range strings.SplitSeq(help, "\n") {
			m := helpFlag.FindStringSubmatch(line)
			if m == nil || m[2] == "--dsn" || m[2] == "--schema" {
				continue
			}
			if !slices.Contains(words, m[2]) && (m[1] == "" || !slices.Contains(words, m[1])) {
				t.Errorf("docs/cli.md: the synopsis of sqllock %s lacks %s, which its help lists", cmd, m[2])
			}
		}
		usage, ok := strings.CutPrefix(strings.SplitN(help, "\n", 2)[0], "Usage: sqllock "+cmd)
		if !ok {
			t.Errorf("sqllock help %s starts without its usage line:\n%s", cmd, help)
			continue
		}
		for usage != optionalGroup.ReplaceAllString(usage, "") {
			usage = optionalGroup.ReplaceAllString(usage, "")
		}
		for _, w := range synopsisWord.FindAllString(usage, -1) {
			w = strings.Trim(w, "'")
			if w != "|" && !strings.HasPrefix(w, "-") && !slices.Contains(words, w) {
				t.Errorf("docs/cli.md: the synopsis of sqllock %s lacks the argument %s of its usage line", cmd, w)
			}
		}
	}
}

// cliSynopses returns the words of each command's lines (continuation
// lines included) in the first sh block of docs/cli.md, without brackets
// and quotes.
func cliSynopses(t *testing.T) map[string][]string {
	t.Helper()
	synopses := map[string][]string{}
	block, cmd := 0, ""
	scanLines(t, "docs/cli.md", func(_ int, line string) {
		if strings.HasPrefix(line, "```") {
			block++
			return
		}
		if block != 1 {
			return
		}
		line = trailingComment.ReplaceAllString(line, "")
		if rest, ok := strings.CutPrefix(line, "sqllock "); ok {
			cmd, _, _ = strings.Cut(rest, " ")
			line = rest[len(cmd):]
		} else if !strings.HasPrefix(line, " ") {
			cmd = ""
		}
		if cmd == "" {
			return
		}
		if _, ok := synopses[cmd]; !ok {
			synopses[cmd] = nil // a command without arguments
		}
		for _, w := range synopsisWord.FindAllString(line, -1) {
			if w = strings.Trim(w, "[]'"); w != "" && w != "|" {
				synopses[cmd] = append(synopses[cmd], w)
			}
		}
	})
	if len(synopses) == 0 {
		t.Fatal("docs/cli.md: no synopsis in its first block")
	}
	return synopses
}

// docLinesNotRun are the command lines of the docs that
// TestDocCommandLinesRun does not run, by their text, and why.
var docLinesNotRun = map[string]string{
	"sqllock serve":                                                                                        "serves until stopped (TestServe in cmd/sqllock runs it)",
	"sqllock serve --dsn \"$SQLLOCK_DSN\"":                                                                 "serves until stopped (TestServe in cmd/sqllock runs it)",
	"sqllock serve --listen :7466 --interval 5":                                                            "serves until stopped, on every interface",
	"sqllock serve --allow-writes --token-file /etc/sqllock/console.tokens":                                "serves until stopped, with the reader's token file",
	"sqllock cron --check /etc/sqllock/crontab":                                                            "reads the reader's /etc/sqllock/crontab (cmd's TestCronCheck checks a refused file)",
	"sqllock run --every 1h report -- /usr/local/bin/report":                                               "runs the reader's /usr/local/bin/report",
	"sqllock run --cron '0 2 * * *' --tz Europe/Berlin backup -- /usr/local/bin/backup":                    "runs the reader's /usr/local/bin/backup",
	"sqllock run --every 1h report:hourly -- /usr/local/bin/build-report":                                  "runs the reader's /usr/local/bin/build-report",
	"sqllock run --every 24h --phase 2h30m --retries 2 --retry-backoff 5m backup -- /usr/local/bin/backup": "runs the reader's /usr/local/bin/backup, and retries it 5 minutes apart",
	"sqllock run -n --min-hold 50m report:hourly -- /usr/local/bin/build-report":                           "runs the reader's /usr/local/bin/build-report",
	"sqllock run -w 10 -c 'pg_dump app > app.sql' backup":                                                  "needs pg_dump and the reader's PostgreSQL database",
	"sqllock run -w 10 -c 'pg_dump app > /backup/app.sql' backup":                                          "needs pg_dump and the reader's PostgreSQL database",
	"sqllock locks --watch 2":                                                                              "runs until interrupted",
	"sqllock runs --watch 2 report":                                                                        "runs until interrupted",
}

// docLineExits are the exit statuses of the command lines of the docs that
// do not exit 0 on a fresh database, by their text.
var docLineExits = map[string]int{
	"sqllock leader --json scheduler":                         3, // no leader
	"sqllock unlock -f report:hourly":                         1, // not held
	`sqllock unlock --ask --reason "deploy v2" report:hourly`: 1, // not held
	"sqllock latch count-down import-phase-1":                 1, // no latch (each line has a database of its own)
	"sqllock latch wait -w 600 import-phase-1":                1, // no latch
	"sqllock latch import-phase-1":                            1, // no latch
	"sqllock latch delete import-phase-1":                     1, // no latch
}

// placeholder is a word of a synopsis rather than of a command: NAME,
// [flags], up|down.
var placeholder = regexp.MustCompile(`\b[A-Z][A-Z_]+\b|\[|\w\|\w`)

// Every sqllock command line of README.md and docs/ that is a command, not
// a synopsis, runs as the docs write it (through sh, with the sqllock built
// from this tree first in PATH) against a fresh, migrated SQLite database in
// $SQLLOCK_DSN, and exits 0 or as docLineExits says; the reader's own
// programs it starts (./scheduler) are scripts that exit 0. The lines that
// need a server or run on are in docLinesNotRun, with the reason.
func TestDocCommandLinesRun(t *testing.T) {
	t.Parallel()
	bin := sqllockCLI(t)
	seen := map[string]bool{}
	ran := 0
	for _, file := range docFiles(t) {
		for _, l := range commandLines(t, file) {
			seen[l.text] = true
			if reason, ok := docLinesNotRun[l.text]; ok {
				t.Logf("%s:%d: not run (%s): %s", file, l.line, reason, l.text)
				continue
			}
			if placeholder.MatchString(l.text) {
				continue // a synopsis: TestDocCLISynopsis and TestDocCommandLinesMatchHelp check it
			}
			ran++
			t.Run(strings.ReplaceAll(l.text, "/", "_"), func(t *testing.T) {
				t.Parallel()
				runDocLine(t, bin, file, l)
			})
		}
	}
	for text := range docLinesNotRun {
		if !seen[text] {
			t.Errorf("docLinesNotRun: %q is in no doc any more", text)
		}
	}
	for text := range docLineExits {
		if !seen[text] {
			t.Errorf("docLineExits: %q is in no doc any more", text)
		}
	}
	if ran < 8 {
		t.Fatalf("ran %d command lines, expected more: is the extraction broken?", ran)
	}
}

// runDocLine runs l in a directory of its own, on a SQLite database of its
// own.
func runDocLine(t *testing.T, bin, file string, l commandLine) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	env := append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"SQLLOCK_DSN=sqlite:"+filepath.Join(dir, "locks.db"))
	migrate := exec.CommandContext(ctx, bin, "migrate", "up")
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("sqllock migrate up: %v\n%s", err, out)
	}
	after := false
	for _, a := range l.args {
		if after && strings.HasPrefix(a, "./") {
			if err := os.WriteFile(filepath.Join(dir, a), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		after = after || a == "--"
	}
	c := exec.CommandContext(ctx, "sh", "-c", l.text)
	c.Dir, c.Env = dir, env
	// The context kills sh alone: a sqllock it started would keep the
	// output open, and the wait with it.
	c.WaitDelay = 5 * time.Second
	out, err := c.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	if want := docLineExits[l.text]; code != want {
		t.Errorf("%s:%d: %s: exit %d, want %d\n%s", file, l.line, l.text, code, want, out)
	}
}
