package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// completionFlags is "sqllock completion bash|zsh|fish": a script that
// completes sqllock's commands, their flags and the few arguments known
// without a database (migrate's operations, shells, command names,
// --strategy's values). Other arguments complete as file names.
func completionFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 1 {
			return usageError{msg: "completion takes one shell: bash, zsh or fish"}
		}
		write, ok := map[string]func(io.Writer, []completion){
			"bash": bashCompletion, "zsh": zshCompletion, "fish": fishCompletion,
		}[args[0]]
		if !ok {
			return usageError{msg: fmt.Sprintf("completion %s: want bash, zsh or fish", args[0])}
		}
		write(stdout, completions())
		return nil
	}
}

// completion is what a shell completes for one command.
type completion struct {
	command
	options []flagEntry
	args    []string // its arguments, where they are few and known
}

// flagValues are the values of the flags that take one of a few.
var flagValues = map[string]string{"--strategy": "table optimistic pessimistic"}

// completions lists every command with its flags and known arguments.
func completions() []completion {
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	args := map[string][]string{
		"migrate":    {"up", "down", "version", "force"},
		"completion": {"bash", "zsh", "fish"},
		"help":       names,
	}
	var cs []completion
	for _, c := range append(commands, command{name: "help", summary: "show the help of sqllock or of a command"}) {
		var entries []flagEntry
		if c.flags != nil {
			fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
			c.flags(fs)
			entries = flagEntries(fs)
		}
		cs = append(cs, completion{command: c, options: entries, args: args[c.name]})
	}
	return cs
}

// flagNames lists the names of c's flags, with their dashes.
func (c completion) flagNames() string {
	var names []string
	for _, e := range c.options {
		names = append(names, e.names...)
	}
	return strings.Join(names, " ")
}

// valued lists the names of c's flags that take an argument.
func (c completion) valued() []string {
	var names []string
	for _, e := range c.options {
		if e.arg != "" {
			names = append(names, e.names...)
		}
	}
	return names
}

func bashCompletion(w io.Writer, cs []completion) {
	var names []string
	for _, c := range cs {
		names = append(names, c.name)
	}
	fmt.Fprintf(w, `# bash completion for sqllock: source <(sqllock completion bash)
_sqllock() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} flags= args=
	if ((COMP_CWORD == 1)); then
		COMPREPLY=($(compgen -W "%s --version" -- "$cur"))
		return
	fi
	case $prev in
`, strings.Join(names, " "))
	for flag, values := range flagValues {
		fmt.Fprintf(w, "\t%s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", flag, values)
	}
	fmt.Fprint(w, "\tesac\n\tcase ${COMP_WORDS[1]} in\n")
	for _, c := range cs {
		fmt.Fprintf(w, "\t%s) flags=%q args=%q", c.name, c.flagNames(), strings.Join(c.args, " "))
		if v := c.valued(); len(v) > 0 {
			fmt.Fprintf(w, "\n\t\tcase $prev in %s) return ;; esac", strings.Join(v, "|"))
		}
		fmt.Fprint(w, " ;;\n")
	}
	fmt.Fprint(w, `	esac
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$flags" -- "$cur"))
	elif [[ -n $args ]]; then
		COMPREPLY=($(compgen -W "$args" -- "$cur"))
	fi
}
complete -o bashdefault -o default -F _sqllock sqllock
`)
}

func zshCompletion(w io.Writer, cs []completion) {
	fmt.Fprint(w, `#compdef sqllock
# zsh completion for sqllock: source <(sqllock completion zsh), after compinit
_sqllock() {
	if ((CURRENT == 2)); then
		local -a cmds
		cmds=(
`)
	for _, c := range cs {
		fmt.Fprintf(w, "\t\t\t%s\n", shellQuote(c.name+":"+c.summary))
	}
	fmt.Fprint(w, "\t\t)\n\t\t_describe command cmds\n\t\treturn\n\tfi\n\tcase $words[CURRENT-1] in\n")
	for flag, values := range flagValues {
		fmt.Fprintf(w, "\t(%s) compadd -- %s; return ;;\n", flag, values)
	}
	fmt.Fprint(w, "\tesac\n\tlocal -a flags args\n\tcase $words[2] in\n")
	for _, c := range cs {
		fmt.Fprintf(w, "\t(%s) flags=(%s) args=(%s)", c.name, c.flagNames(), strings.Join(c.args, " "))
		if v := c.valued(); len(v) > 0 {
			fmt.Fprintf(w, "\n\t\tcase $words[CURRENT-1] in (%s) _files; return ;; esac", strings.Join(v, "|"))
		}
		fmt.Fprint(w, " ;;\n")
	}
	fmt.Fprint(w, `	esac
	if [[ $PREFIX == -* ]]; then
		compadd -- $flags
	elif (($#args)); then
		compadd -- $args
	else
		_files
	fi
}
compdef _sqllock sqllock
`)
}

func fishCompletion(w io.Writer, cs []completion) {
	fmt.Fprint(w, "# fish completion for sqllock: sqllock completion fish | source\ncomplete -c sqllock -f\n")
	fmt.Fprint(w, "complete -c sqllock -n __fish_use_subcommand -l version -d 'print the version'\n")
	for _, c := range cs {
		fmt.Fprintf(w, "complete -c sqllock -n __fish_use_subcommand -a %s -d %s\n", c.name, shellQuote(c.summary))
		when := shellQuote("__fish_seen_subcommand_from " + c.name)
		for _, e := range c.options {
			fmt.Fprintf(w, "complete -c sqllock -n %s", when)
			for _, n := range e.names {
				if long, ok := strings.CutPrefix(n, "--"); ok {
					fmt.Fprintf(w, " -l %s", long)
				} else {
					fmt.Fprintf(w, " -s %s", strings.TrimPrefix(n, "-"))
				}
			}
			switch values, ok := flagValues[e.names[len(e.names)-1]]; {
			case ok:
				fmt.Fprintf(w, " -x -a %s", shellQuote(values))
			case e.arg != "":
				fmt.Fprint(w, " -r -F")
			}
			fmt.Fprintf(w, " -d %s\n", shellQuote(e.usage))
		}
		if len(c.args) > 0 {
			fmt.Fprintf(w, "complete -c sqllock -n %s -a %s\n", when, shellQuote(strings.Join(c.args, " ")))
		}
	}
	// After the lock or election name comes a command: file names.
	fmt.Fprint(w, "complete -c sqllock -n '__fish_seen_subcommand_from run elect' -F\n")
}

// shellQuote quotes s for a shell, in single quotes.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
