package main

import (
	"flag"
	"strings"
)

// suggest returns the candidate closest to word, for a "did you mean"
// hint: one within two edits (one for words of three letters or fewer),
// or one that word is a prefix of; "" if none is, or if two are equally
// close.
func suggest(word string, candidates []string) string {
	best, bestDist, tie := "", 0, false
	limit := 2
	if len(word) <= 3 {
		limit = 1
	}
	for _, c := range candidates {
		d := editDistance(word, c)
		if d > limit && !(len(word) >= 2 && strings.HasPrefix(c, word)) {
			continue
		}
		switch {
		case best == "" || d < bestDist:
			best, bestDist, tie = c, d, false
		case d == bestDist:
			tie = true
		}
	}
	if tie {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and transpositions of adjacent
// bytes each count one.
func editDistance(a, b string) int {
	// rows i-2, i-1 and i of the distance matrix.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// flagHint turns the flag package's "flag provided but not defined: -x"
// into "unknown flag --x", with the closest flag of fs suggested.
func flagHint(fs *flag.FlagSet, err error) string {
	const undefined = "flag provided but not defined: "
	msg := err.Error()
	if !strings.HasPrefix(msg, undefined) {
		return msg
	}
	name := strings.TrimLeft(strings.TrimPrefix(msg, undefined), "-")
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if len(f.Name) > 1 {
			names = append(names, f.Name)
		}
	})
	msg = "unknown flag " + dashed(name)
	if s := suggest(name, names); s != "" {
		msg += " (did you mean " + dashed(s) + "?)"
	}
	return msg
}

// dashed writes a flag name as the help does: -x, --long.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// commandHint is the usage error for an unknown command name, with the
// closest command suggested.
func commandHint(name string) usageError {
	names := make([]string, 0, len(commands))
	for _, c := range commands {
		names = append(names, c.name)
	}
	msg := "unknown command " + quote(name)
	if s := suggest(name, names); s != "" {
		msg += " (did you mean " + quote(s) + "?)"
	}
	return usageError{msg: msg}
}

func quote(s string) string { return `"` + s + `"` }
