package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// manFlags is "sqllock man": the manual page, in roff, made of the same
// text as help (the overview, each command's help and flags, the
// database and the exit statuses), so that the two cannot disagree.
func manFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 0 {
			return usageError{msg: "man takes no arguments"}
		}
		writeMan(stdout)
		return nil
	}
}

// writeMan writes the manual page sqllock(1) to w.
func writeMan(w io.Writer) {
	fmt.Fprintf(w, ".TH SQLLOCK 1 \"\" %q \"User Commands\"\n", "sqllock "+moduleVersion(buildInfo()))
	fmt.Fprintln(w, ".SH NAME\nsqllock \\- run commands under distributed locks kept in a database")
	fmt.Fprintln(w, ".SH SYNOPSIS")
	for i, c := range commands {
		if i > 0 {
			fmt.Fprintln(w, ".br")
		}
		fmt.Fprintf(w, ".B sqllock %s\n%s\n", c.name, roff(c.args))
	}
	fmt.Fprintln(w, ".SH DESCRIPTION")
	roffParagraphs(w, overview)
	fmt.Fprintln(w, ".SH COMMANDS")
	for _, c := range commands {
		fmt.Fprintf(w, ".SS %s\n.B sqllock %s\n%s\n", c.name, c.name, roff(c.args))
		roffParagraphs(w, upperFirst(c.summary)+".")
		if help := commandHelp[c.name]; help != "" {
			roffParagraphs(w, help)
		}
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.flags(fs)
		entries := flagEntries(fs)
		if len(entries) == 0 {
			continue
		}
		fmt.Fprintln(w, ".PP\nFlags:")
		for _, e := range entries {
			fmt.Fprintf(w, ".TP\n.B %s\n%s\n", roff(e.synopsis()), roff(e.usage))
		}
	}
	fmt.Fprintln(w, ".SH DATABASE")
	roffParagraphs(w, fmt.Sprintf(databaseHelp, strings.TrimPrefix(defaultDSN(), "sqlite:")))
	fmt.Fprintln(w, ".SH \"EXIT STATUS\"")
	roffParagraphs(w, exitHelp)
	fmt.Fprintln(w, ".SH \"SEE ALSO\"\nflock(1)")
}

// roffParagraphs writes text as roff paragraphs: a blank line starts a
// new one, and indented lines (examples, lists) keep their lines.
func roffParagraphs(w io.Writer, text string) {
	fmt.Fprintln(w, ".PP")
	literal := false
	for line := range strings.SplitSeq(strings.TrimRight(text, "\n"), "\n") {
		indented := strings.HasPrefix(line, "  ")
		switch {
		case line == "":
			if literal {
				fmt.Fprintln(w, ".fi\n.RE")
				literal = false
			}
			fmt.Fprintln(w, ".PP")
			continue
		case indented && !literal:
			fmt.Fprintln(w, ".RS\n.nf")
			literal = true
		case !indented && literal:
			fmt.Fprintln(w, ".fi\n.RE")
			literal = false
		}
		fmt.Fprintln(w, roff(strings.TrimPrefix(line, "  ")))
	}
	if literal {
		fmt.Fprintln(w, ".fi\n.RE")
	}
}

// roff escapes s for a line of roff text: backslashes and hyphens, and a
// leading dot or apostrophe that would make the line a request.
func roff(s string) string {
	s = strings.NewReplacer(`\`, `\e`, "-", `\-`).Replace(s)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}
