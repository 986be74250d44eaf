package main

import (
	"cmp"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// output runs the binary with args, with no database, and returns its
// standard output; it fails t unless the exit status is 0.
func output(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(ctxT(t), bin, args...).Output()
	if err != nil {
		t.Fatalf("sqllock %q: %v", args, err)
	}
	return string(out)
}

// --version prints the main module's version and the library module's as
// the build recorded them (what go version -m reads from the binary), and
// the Go release.
func TestVersion(t *testing.T) {
	t.Parallel()
	info, err := exec.CommandContext(ctxT(t), "go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\tmod\tgithub\.com/sqllock/sqllock/cmd\t(\S+)`).FindSubmatch(info)
	if m == nil {
		t.Fatalf("go version -m shows no main module:\n%s", info)
	}
	// The library's line, and its replacement's after it if any.
	lib := regexp.MustCompile(`(?m)^\tdep\tgithub\.com/sqllock/sqllock\t(\S+).*$(?:\n\t=>\t\S+\t([^\t\n]*))?`).FindSubmatch(info)
	if lib == nil {
		t.Fatalf("go version -m shows no library module:\n%s", info)
	}
	libVersion := string(lib[1])
	if lib[2] != nil {
		libVersion = cmp.Or(string(lib[2]), "(devel)")
	}
	// A build of a clone names its commit, as go version -m shows it.
	bi := &debug.BuildInfo{Main: debug.Module{Version: string(m[1])}}
	for _, s := range regexp.MustCompile(`(?m)^\tbuild\t(vcs\.\w+)=(.*)$`).FindAllSubmatch(info, -1) {
		bi.Settings = append(bi.Settings, debug.BuildSetting{Key: string(s[1]), Value: string(s[2])})
	}
	want := "sqllock " + moduleVersion(bi) + " (library " + libVersion + ") " + runtime.Version() + "\n"
	for _, flag := range []string{"--version", "-V", "version"} {
		if got := output(t, flag); got != want {
			t.Errorf("sqllock %s = %q, want %q", flag, got, want)
		}
	}
}

// A build of a clone without a release version says which commit it is.
func TestModuleVersionNamesTheCommit(t *testing.T) {
	for _, c := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{nil, "(devel)"},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123"},
			{Key: "vcs.time", Value: "2026-12-01T21:09:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			"(devel, commit 0123456789ab of 2026-12-01T21:09:00Z, modified)"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}},
			"(devel, commit abc)"},
	} {
		if got := moduleVersion(c.bi); got != c.want {
			t.Errorf("moduleVersion(%+v) = %q, want %q", c.bi, got, c.want)
		}
	}
}

// libraryVersion reads the library module's version from the build
// information: its replacement's when replaced, (devel) when unknown.
func TestLibraryVersion(t *testing.T) {
	t.Parallel()
	other := &debug.Module{Path: "github.com/sqllock/sqllock/sqllockotel", Version: "v9.9.9"}
	for _, c := range []struct {
		name string
		deps []*debug.Module
		want string
	}{
		{"required", []*debug.Module{other, {Path: libraryPath, Version: "v1.2.3"}}, "v1.2.3"},
		{"replaced by a version", []*debug.Module{{Path: libraryPath, Version: "v1.2.3", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.2.4"}}}, "v1.2.4"},
		{"replaced by a directory", []*debug.Module{{Path: libraryPath, Version: "v1.2.3", Replace: &debug.Module{Path: "../sqllock"}}}, "(devel)"},
		{"workspace module", []*debug.Module{{Path: libraryPath, Version: "(devel)"}}, "(devel)"},
		{"absent", []*debug.Module{other}, "(devel)"},
	} {
		if got := libraryVersion(&debug.BuildInfo{Deps: c.deps}); got != c.want {
			t.Errorf("%s: libraryVersion = %q, want %q", c.name, got, c.want)
		}
	}
}

// help elect and help leader describe their command and list its exit
// statuses; leader's includes 3 for no leader.
func TestHelpElectLeader(t *testing.T) {
	t.Parallel()
	for cmd, want := range map[string][]string{
		"elect":  {"Exit status:", "75", "76", "130", "64", "69", "SQLLOCK_TOKEN"},
		"leader": {"Exit status:", "3 when the election has no", "64", "69", "--watch"},
	} {
		out := output(t, "help", cmd)
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("help %s lacks %q:\n%s", cmd, w, out)
			}
		}
	}
}

// plain is roff text as a reader sees it, or help's text, with every run
// of white space one space: the form in which the two are compared.
func plain(s string, isRoff bool) string {
	if isRoff {
		var lines []string
		for line := range strings.SplitSeq(s, "\n") {
			if strings.HasPrefix(line, ".") {
				// A request: its arguments are text (.B, .SS).
				_, line, _ = strings.Cut(line, " ")
			}
			lines = append(lines, line)
		}
		s = strings.NewReplacer(`\-`, "-", `\e`, `\`, `\&`, "").Replace(strings.Join(lines, "\n"))
	}
	return strings.Join(strings.Fields(s), " ")
}

// The manual page is made of the same text as help: every command's help,
// flags included, and the general help's paragraphs read the same in both.
func TestManAgreesWithHelp(t *testing.T) {
	t.Parallel()
	man := output(t, "man")
	if !strings.HasPrefix(man, ".TH SQLLOCK 1 ") {
		t.Fatalf("man does not start with .TH:\n%.200s", man)
	}
	text := plain(man, true)
	for _, c := range commands {
		help := output(t, "help", c.name)
		help = strings.TrimPrefix(help, "Usage: ")
		if !strings.Contains(text, plain(help, false)) {
			t.Errorf("man lacks help %s as help prints it:\n%s", c.name, help)
		}
	}
	for para := range strings.SplitSeq(output(t, "help"), "\n\n") {
		if strings.HasPrefix(para, "Usage:") || strings.HasPrefix(para, "Commands:") || strings.HasPrefix(para, "Run ") {
			continue
		}
		if !strings.Contains(text, plain(para, false)) {
			t.Errorf("man lacks the help paragraph:\n%s", para)
		}
	}
	if path, err := exec.LookPath("man"); err == nil {
		c := exec.CommandContext(ctxT(t), path, "-l", "-")
		c.Stdin = strings.NewReader(man)
		c.Env = append(c.Environ(), "MANWIDTH=80")
		if out, err := c.CombinedOutput(); err != nil || strings.Contains(string(out), "warning") {
			t.Errorf("man -l: %v\n%s", err, out)
		}
	}
}

// The bash script completes commands, flags, a flag's values and
// arguments, run in bash; zsh and fish parse theirs where installed.
// Each script names every command and flag.
func TestCompletion(t *testing.T) {
	t.Parallel()
	script := output(t, "completion", "bash")
	for _, c := range []struct {
		words string // the command line, the word completed last
		want  string
	}{
		{"sqllock mig", "migrate"},
		{"sqllock co", "completion"}, {"sqllock cr", "cron"},
		{"sqllock run --no", "--no-wait"},
		{"sqllock run --strategy p", "pessimistic"},
		{"sqllock migrate --dsn x v", "version"},
		{"sqllock completion f", "fish"},
		{"sqllock help le", "leader"},
		{"sqllock leader --w", "--watch"},
	} {
		words := strings.Fields(c.words)
		cmd := exec.CommandContext(ctxT(t), "bash", "-c", `source /dev/stdin; COMP_WORDS=("$@"); COMP_CWORD=$(($#-1)); _sqllock; echo "${COMPREPLY[*]}"`, "bash")
		cmd.Args = append(cmd.Args, words...)
		cmd.Stdin = strings.NewReader(script)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != c.want {
			t.Errorf("bash completes %q to %q (%v), want %q", c.words, out, err, c.want)
		}
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		script := output(t, "completion", shell)
		for _, c := range completions() {
			if !strings.Contains(script, c.name) {
				t.Errorf("the %s script lacks the command %s", shell, c.name)
			}
			for _, e := range c.options {
				for _, n := range e.names {
					if name := strings.TrimLeft(n, "-"); !strings.Contains(script, name) {
						t.Errorf("the %s script lacks %s's flag %s", shell, c.name, n)
					}
				}
			}
		}
		path, err := exec.LookPath(shell)
		if err != nil {
			t.Logf("%s is not installed: its script is not parsed", shell)
			continue
		}
		c := exec.CommandContext(ctxT(t), path, "-n")
		c.Stdin = strings.NewReader(script)
		if out, err := c.CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", shell, err, out)
		}
	}
	out, err := exec.CommandContext(ctxT(t), bin, "completion", "tcsh").CombinedOutput()
	if exitStatus(err) != exitUsage {
		t.Errorf("completion tcsh: %v, want exit %d\n%s", err, exitUsage, out)
	}
}
