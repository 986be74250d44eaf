package sqlrun

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// Params are the values of a statement's named parameters.
type Params struct {
	Name    string        // :name
	Owner   string        // :owner
	Token   int64         // :token, the lease's token (on the version table, its version)
	Version int64         // :version, the version a swap expects
	TTL     time.Duration // :ttl, in whole microseconds
	MinHold time.Duration // :minhold, in whole microseconds
	Limit   int           // :limit
	Channel string        // :channel, the notification channel
	Ticket  int64         // :ticket, a waiter's ticket (see FairTable)
	// The run ledger's (see LedgerSQL).
	Job        string        // :job
	Occurrence string        // :occurrence
	Attempt    int           // :attempt
	State      string        // :state
	Error      string        // :error, a failed attempt's error text
	Period     time.Duration // :period, in whole microseconds
	Phase      time.Duration // :phase, in whole microseconds
	Grace      time.Duration // :grace, in whole microseconds
	Age        time.Duration // :age, in whole microseconds
	From, To   string        // :from and :to, a range of occurrences
	Spec       string        // :spec, a job's cron schedule
	Value      string        // :value, an election's value (see Elections)
	// Leases expands :names to a list of their names and :leases to a
	// list of (name, owner, token) tuples, for IN (...).
	Leases []dialect.Lease
}

// params lists the names a statement may use; list ones expand.
var params = map[string]bool{
	"name": false, "owner": false, "token": false, "version": false, "ttl": false, "minhold": false,
	"limit": false, "channel": false, "ticket": false, "value": false, "names": true, "leases": true,
	"job": false, "occurrence": false, "attempt": false, "state": false, "error": false,
	"period": false, "phase": false, "grace": false, "age": false, "from": false, "to": false,
	"spec": false,
}

// value returns the value of the scalar parameter name.
func (p *Params) value(name string) any {
	switch name {
	case "name":
		return p.Name
	case "owner":
		return p.Owner
	case "token":
		return p.Token
	case "version":
		return p.Version
	case "ttl":
		return p.TTL.Microseconds()
	case "minhold":
		return p.MinHold.Microseconds()
	case "limit":
		return p.Limit
	case "ticket":
		return p.Ticket
	case "job":
		return p.Job
	case "occurrence":
		return p.Occurrence
	case "attempt":
		return p.Attempt
	case "state":
		return p.State
	case "error":
		return p.Error
	case "period":
		return p.Period.Microseconds()
	case "phase":
		return p.Phase.Microseconds()
	case "grace":
		return p.Grace.Microseconds()
	case "age":
		return p.Age.Microseconds()
	case "from":
		return p.From
	case "to":
		return p.To
	case "value":
		return p.Value
	case "spec":
		return p.Spec
	}
	return p.Channel
}

// Stmt is a statement compiled for a dialect's placeholder style.
type Stmt struct {
	Kind  dialect.Kind
	style dialect.Style
	parts []string // text around the parameters: len(parts) == len(names)+1
	names []string // the parameters, in order of use
	list  bool     // a parameter expands to a list: rendered at each use
	text  string   // without list parameters: the final text,
	args  []string // and the parameter behind each placeholder
	lead  []any    // arguments before the statement's own (see Compiler.Lead)
}

// declared reports whether st was compiled from a statement (not the
// zero Stmt of one a dialect left out).
func (st *Stmt) declared() bool { return st.parts != nil }

// Compile parses s's named parameters for style. It fails on a name that
// Params does not have.
func Compile(style dialect.Style, s dialect.SQL) (Stmt, error) {
	st := Stmt{Kind: s.Kind, style: style}
	t := s.Text
	var cur strings.Builder
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c != ':' || i+1 >= len(t) || t[i+1] < 'a' || t[i+1] > 'z' || (i > 0 && t[i-1] == ':') {
			cur.WriteByte(c)
			continue
		}
		j := i + 1
		for j < len(t) && (t[j] >= 'a' && t[j] <= 'z' || t[j] == '_') {
			j++
		}
		name := t[i+1 : j]
		list, ok := params[name]
		if !ok {
			return Stmt{}, fmt.Errorf("sqlrun: statement uses unknown parameter :%s: %s", name, t)
		}
		st.list = st.list || list
		st.parts = append(st.parts, cur.String())
		st.names = append(st.names, name)
		cur.Reset()
		i = j - 1
	}
	st.parts = append(st.parts, cur.String())
	if !st.list {
		var refs []arg
		st.text, refs = st.render(nil)
		for _, r := range refs {
			st.args = append(st.args, r.name)
		}
	}
	return st, nil
}

// Compiler compiles a dialect's statements, keeping the first error, so
// that a constructor compiles them all and checks once.
type Compiler struct {
	Style dialect.Style
	// Lead are arguments passed before every statement's own, which the
	// driver takes as options of the statement: pgx's QueryExecMode, say,
	// through its database/sql driver. Nil for none.
	Lead []any
	// Expand, if set, rewrites each statement's text before it is
	// compiled: a dialect's macros (see the postgres dialect's grant
	// epoch).
	Expand func(string) string
	Err    error
}

// NewCompiler returns a compiler of statements as cat's are compiled: a
// dialect's own statements (its reaper's) with its declarations'
// placeholders, lead arguments and macros.
func NewCompiler(cat dialect.Catalogue) *Compiler {
	return &Compiler{Style: cat.Style, Lead: cat.Lead, Expand: cat.Expand}
}

// Compile compiles s; after an error it returns a zero Stmt.
func (c *Compiler) Compile(s dialect.SQL) Stmt {
	if c.Err != nil {
		return Stmt{}
	}
	if c.Expand != nil {
		s.Text = c.Expand(s.Text)
	}
	st, err := Compile(c.Style, s)
	c.Err = err
	st.lead = c.Lead
	return st
}

// arg is the value behind one placeholder: a scalar parameter by name, or
// an element of a list parameter.
type arg struct {
	name string
	val  any
}

// bind returns the statement's text and arguments for p.
func (s *Stmt) bind(p *Params) (string, []any) {
	if !s.list {
		args := make([]any, len(s.lead), len(s.lead)+len(s.args))
		copy(args, s.lead)
		for _, name := range s.args {
			args = append(args, p.value(name))
		}
		return s.text, args
	}
	text, refs := s.render(p)
	args := make([]any, len(s.lead), len(s.lead)+len(refs))
	copy(args, s.lead)
	for _, r := range refs {
		v := r.val
		if r.name != "" {
			v = p.value(r.name)
		}
		args = append(args, v)
	}
	return text, args
}

// render writes the text with placeholders. List parameters take their
// elements from p; with a nil p they must not occur.
func (s *Stmt) render(p *Params) (string, []arg) {
	var (
		b    strings.Builder
		refs []arg
		nums map[string]int // Dollar: the number given to each scalar name
	)
	mark := func(a arg) {
		refs = append(refs, a)
		if s.style == dialect.Dollar {
			b.WriteString("$" + strconv.Itoa(len(refs)))
		} else {
			b.WriteByte('?')
		}
	}
	for i, name := range s.names {
		b.WriteString(s.parts[i])
		switch name {
		case "names", "leases":
			for k, l := range p.Leases {
				if k > 0 {
					b.WriteString(", ")
				}
				if name == "names" {
					mark(arg{val: l.Name})
					continue
				}
				b.WriteByte('(')
				mark(arg{val: l.Name})
				b.WriteString(", ")
				mark(arg{val: l.Owner})
				b.WriteString(", ")
				mark(arg{val: l.Token})
				b.WriteByte(')')
			}
		default:
			if n, ok := nums[name]; ok && s.style == dialect.Dollar {
				b.WriteString("$" + strconv.Itoa(n))
				continue
			}
			mark(arg{name: name})
			if s.style == dialect.Dollar {
				if nums == nil {
					nums = make(map[string]int)
				}
				nums[name] = len(refs)
			}
		}
	}
	b.WriteString(s.parts[len(s.parts)-1])
	return b.String(), refs
}

// Qualify prefixes each of names with the namespace ns (a schema or
// database, validated by the caller) quoted by quote, unless ns is "".
func Qualify(ns string, quote func(string) string, names ...*string) {
	if ns == "" {
		return
	}
	for _, n := range names {
		*n = quote(ns) + "." + *n
	}
}
