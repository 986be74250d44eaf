package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
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

// printFlags writes fs's flags, each once with its aliases: "-n, --no-wait".
func printFlags(w io.Writer, fs *flag.FlagSet) {
	type entry struct {
		names []string
		f     *flag.Flag
	}
	var entries []*entry
	byValue := map[flag.Value]*entry{}
	fs.VisitAll(func(f *flag.Flag) {
		if e, ok := byValue[f.Value]; ok {
			e.names = append(e.names, f.Name)
			return
		}
		e := &entry{names: []string{f.Name}, f: f}
		byValue[f.Value] = e
		entries = append(entries, e)
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, e := range entries {
		// One-letter aliases first.
		var short, long []string
		for _, n := range e.names {
			if len(n) == 1 {
				short = append(short, "-"+n)
			} else {
				long = append(long, "--"+n)
			}
		}
		names := strings.Join(append(short, long...), ", ")
		arg, usage := flag.UnquoteUsage(e.f)
		if arg != "" {
			names += " " + strings.ToUpper(arg)
		}
		if def := e.f.DefValue; def != "" && def != "false" && def != "0" && def != "0s" {
			usage += " (default " + def + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", names, usage)
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
		return nil, usageError{msg: fmt.Sprintf("%s: %v", cmd, err)}
	}
	return pos, err
}
