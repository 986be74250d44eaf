package sqlrun

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

func TestCompileBindsByName(t *testing.T) {
	p := &Params{Name: "n", Owner: "o", Token: 7, Version: 3, TTL: 2 * time.Second, Limit: 10, Channel: "c",
		Leases: []dialect.Lease{{Name: "a", Owner: "x", Token: 1}, {Name: "b", Owner: "y", Token: 2}}}
	for _, tc := range []struct {
		style dialect.Style
		text  string
		want  string
		args  []any
	}{
		{dialect.Dollar, `UPDATE t SET e = now() + :ttl::bigint * interval '1 microsecond' WHERE name = :name AND owner = :owner AND o2 = :owner`,
			`UPDATE t SET e = now() + $1::bigint * interval '1 microsecond' WHERE name = $2 AND owner = $3 AND o2 = $3`,
			[]any{int64(2000000), "n", "o"}},
		{dialect.Question, `UPDATE t SET e = :ttl WHERE name = :name AND owner = :owner AND o2 = :owner`,
			`UPDATE t SET e = ? WHERE name = ? AND owner = ? AND o2 = ?`,
			[]any{int64(2000000), "n", "o", "o"}},
		{dialect.Question, `SELECT '00:00:00', a::b, :version, :limit, :channel, :token`,
			`SELECT '00:00:00', a::b, ?, ?, ?, ?`,
			[]any{int64(3), 10, "c", int64(7)}},
		{dialect.Dollar, `WHERE name IN (:names) AND (name, owner, token) IN (:leases) AND e > :ttl`,
			`WHERE name IN ($1, $2) AND (name, owner, token) IN (($3, $4, $5), ($6, $7, $8)) AND e > $9`,
			[]any{"a", "b", "a", "x", int64(1), "b", "y", int64(2), int64(2000000)}},
		{dialect.Question, `WHERE e > :ttl AND name IN (:names)`,
			`WHERE e > ? AND name IN (?, ?)`,
			[]any{int64(2000000), "a", "b"}},
	} {
		st, err := Compile(tc.style, dialect.X(tc.text))
		if err != nil {
			t.Fatal(err)
		}
		text, args := st.bind(p)
		if text != tc.want || !reflect.DeepEqual(args, tc.args) {
			t.Errorf("bind(%q)\n got %q %v\nwant %q %v", tc.text, text, args, tc.want, tc.args)
		}
	}
}

func TestCompileRefusesUnknownNames(t *testing.T) {
	_, err := Compile(dialect.Question, dialect.Q(`SELECT :nope`))
	if err == nil || !strings.Contains(err.Error(), ":nope") {
		t.Fatalf("unknown parameter: %v", err)
	}
	c := &Compiler{Style: dialect.Dollar}
	c.Compile(dialect.Q(`SELECT :name`))
	c.Compile(dialect.Q(`SELECT :typo`))
	if st := c.Compile(dialect.Q(`SELECT :name`)); c.Err == nil || st.text != "" {
		t.Fatalf("the compiler kept no error: %v", c.Err)
	}
}

// A compiler's Lead arguments come before every statement's own, list
// parameters or not.
func TestCompilerLead(t *testing.T) {
	type mode string
	c := &Compiler{Style: dialect.Dollar, Lead: []any{mode("exec")}}
	p := &Params{Name: "a", Leases: []dialect.Lease{{Name: "a", Owner: "x", Token: 1}}}
	for _, tc := range []struct {
		text string
		args []any
	}{
		{`WHERE name = :name`, []any{mode("exec"), "a"}},
		{`WHERE name IN (:names)`, []any{mode("exec"), "a"}},
		{`SELECT 1`, []any{mode("exec")}},
	} {
		st := c.Compile(dialect.Q(tc.text))
		if _, args := st.bind(p); !reflect.DeepEqual(args, tc.args) {
			t.Errorf("bind(%q): args %v, want %v", tc.text, args, tc.args)
		}
	}
	if c.Err != nil {
		t.Fatal(c.Err)
	}
}
