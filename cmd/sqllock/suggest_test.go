package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSuggest(t *testing.T) {
	t.Parallel()
	cands := []string{"run", "runs", "locks", "unlock", "elect", "migrate", "ttl", "grace", "wait"}
	for _, c := range []struct{ word, want string }{
		{"rn", "run"},
		{"rnu", "run"},        // a transposition is one edit
		{"lcoks", "locks"},    // so is this one
		{"unlok", "unlock"},   // a deletion
		{"migr", "migrate"},   // a prefix
		{"ttll", "ttl"},       // an insertion
		{"gracee", "grace"},   // likewise
		{"xyzzy", ""},         // nothing near
		{"ru", "run"},         // one edit from run, two from runs, and a prefix of both: run is closer
		{"wiat", "wait"},      // a transposition
		{"q", ""},             // one letter: nothing within one edit of three-letter names
		{"elekt", "elect"},    // a substitution
		{"rubs", "runs"},      // one edit from runs, two from run
		{"locks", "locks"},    // itself
		{"abcdefgh", ""},      // far from everything
		{"r", ""},             // a prefix of two names, but one letter is no hint
		{"unlock-", "unlock"}, // a trailing character
	} {
		if got := suggest(c.word, cands); got != c.want {
			t.Errorf("suggest(%q) = %q, want %q", c.word, got, c.want)
		}
	}
}

// TestMistypedCommandAndFlag: the usage errors of a mistyped command or
// flag name the closest one, as an operator reads them.
func TestMistypedCommandAndFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rn", "x", "--", "true"}, `sqllock: unknown command "rn" (did you mean "run"?)`},
		{[]string{"help", "lcoks"}, `sqllock: unknown command "lcoks" (did you mean "locks"?)`},
		{[]string{"run", "--ttll", "5s", "x", "--", "true"}, `sqllock: run: unknown flag --ttll (did you mean --ttl?)`},
		{[]string{"locks", "--jsno"}, `sqllock: locks: unknown flag --jsno (did you mean --json?)`},
		{[]string{"xyzzy"}, `sqllock: unknown command "xyzzy"`},
	} {
		var stdout, stderr bytes.Buffer
		code := mainCode(t.Context(), c.args, &stdout, &stderr)
		first, _, _ := strings.Cut(stderr.String(), "\n")
		if code != exitUsage || first != c.want {
			t.Errorf("sqllock %s: exit %d, first line %q; want exit %d, %q", strings.Join(c.args, " "), code, first, exitUsage, c.want)
		}
	}
}
