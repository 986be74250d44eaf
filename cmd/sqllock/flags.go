package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The command line is parsed by the standard library's flag package, with
// three additions: a flag can have a one-letter alias ("-n, --no-wait"),
// durations accept plain seconds ("-w 5", as flock(1) takes them) as well as
// Go durations ("5s", "1m30s"), and help lists each flag once with its
// aliases.

// durationValue is a flag.Value for durations: a number of seconds ("5",
// "0.5") or a Go duration ("5s", "250ms").
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// parseDuration reads s as seconds or as a Go duration.
func parseDuration(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > math.MaxInt64/float64(time.Second) {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: want seconds (30, 0.5) or a duration (30s, 1m, 250ms)", s)
	}
	return d, nil
}

// durationFlag defines a duration flag under each of names.
func durationFlag(fs *flag.FlagSet, names string, def time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	*p = def
	v := (*durationValue)(p)
	for name := range strings.SplitSeq(names, ",") {
		fs.Var(v, name, usage)
	}
	return p
}

// boolFlag defines a boolean flag under each of names.
func boolFlag(fs *flag.FlagSet, names string, usage string) *bool {
	p := new(bool)
	for name := range strings.SplitSeq(names, ",") {
		fs.BoolVar(p, name, false, usage)
	}
	return p
}

// intFlag defines an integer flag under each of names.
func intFlag(fs *flag.FlagSet, names string, def int, usage string) *int {
	p := new(int)
	for name := range strings.SplitSeq(names, ",") {
		fs.IntVar(p, name, def, usage)
	}
	return p
}

// stringFlag defines a string flag under each of names.
func stringFlag(fs *flag.FlagSet, names string, def, usage string) *string {
	p := new(string)
	for name := range strings.SplitSeq(names, ",") {
		fs.StringVar(p, name, def, usage)
	}
	return p
}

// isSet reports whether any of names was given on the command line.
func isSet(fs *flag.FlagSet, names ...string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		for _, n := range names {
			if f.Name == n {
				set = true
			}
		}
	})
	return set
}

// flagEntry is one flag of a command as help shows it: its names with
// their dashes, one-letter aliases first, its argument's name ("" for a
// switch), and its usage with the default.
type flagEntry struct {
	names []string
	arg   string
	usage string
}

// deprecatedValue is a flag's old name, kept working for scripts: help,
// the manual page and completion leave it out (see deprecatedFlag).
type deprecatedValue struct{ flag.Value }

// deprecatedFlag defines old as a name of the flag new, left out of help.
func deprecatedFlag(fs *flag.FlagSet, old, new string) {
	f := fs.Lookup(new)
	fs.Var(deprecatedValue{f.Value}, old, "the old name of --"+new)
}

// flagEntries lists fs's flags, each once with its aliases, but for the
// deprecated names.
func flagEntries(fs *flag.FlagSet) []flagEntry {
	var (
		entries []flagEntry
		flags   []*flag.Flag
	)
	byValue := map[flag.Value]int{}
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(deprecatedValue); ok {
			return
		}
		name := "--" + f.Name
		if len(f.Name) == 1 {
			name = "-" + f.Name
		}
		if i, ok := byValue[f.Value]; ok {
			entries[i].names = append(entries[i].names, name)
			return
		}
		byValue[f.Value] = len(entries)
		entries = append(entries, flagEntry{names: []string{name}})
		flags = append(flags, f)
	})
	for i, f := range flags {
		e := &entries[i]
		// One-letter aliases first.
		slices.SortStableFunc(e.names, func(a, b string) int { return len(a) - len(b) })
		arg, usage := flag.UnquoteUsage(f)
		e.arg = strings.ToUpper(arg)
		if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "0s" {
			usage += " (default " + def + ")"
		}
		e.usage = usage
	}
	return entries
}

// synopsis is the entry's names and argument: "-w, --timeout SECONDS".
func (e flagEntry) synopsis() string {
	s := strings.Join(e.names, ", ")
	if e.arg != "" {
		s += " " + e.arg
	}
	return s
}

// printFlags writes fs's flags, each once with its aliases: "-n, --no-wait".
func printFlags(w io.Writer, fs *flag.FlagSet) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, e := range flagEntries(fs) {
		fmt.Fprintf(tw, "  %s\t%s\n", e.synopsis(), e.usage)
	}
	tw.Flush()
}

// parseFlags parses args with fs, printing nothing: a bad flag is a usage
// error naming the command.
func parseFlags(fs *flag.FlagSet, cmd string, args []string, maxPositional int) ([]string, error) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	pos, err := parseInterspersed(fs, args, maxPositional)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return nil, usageError{msg: cmd + ": " + flagHint(fs, err)}
	}
	return pos, err
}
