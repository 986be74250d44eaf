package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/ledger"
)

// The alert rules files shipped for the console's series.
var (
	mainRules    = filepath.Join("..", "..", "alerts", "sqllock.rules.yml")
	consoleRules = filepath.Join("..", "..", "alerts", "sqllock-console.rules.yml")
	consoleBoard = filepath.Join("..", "..", "grafana", "sqllock-console.json")
)

// ruleExpr finds an alert and its expression in a rules file.
var ruleExpr = regexp.MustCompile(`(?m)^\s*- alert: (\S+)\n(?:\s*#.*\n)*\s*expr: (.+)$`)

// The alerts on the console's series fire from a real scrape of sqllock
// serve: a job failing 3 times in a row (SqllockJobFailing, and
// sqllock.rules.yml's SqllockRunsFailing on the same series as
// sqllockotel's), a periodic job
// whose occurrences nobody claimed (sqllock.rules.yml's SqllockRunsMissed,
// unchanged), an election that lost its leader (SqllockElectionLeaderless).
// Every sqllock_ series the console's rules and its Grafana dashboard
// (grafana/sqllock-console.json) use is in the scrape; with
// promtool installed, the rules are checked and evaluated by it over the
// scrape's samples.
func TestServeAlertRules(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "locks.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := sqlite.New(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(context.Background()); db.Close() })
	if err := sqllock.Migrate(ctxT(t), d); err != nil {
		t.Fatal(err)
	}
	b := backend{kind: "sqlite", dsn: "sqlite:" + path, d: d}
	seedJobs(t, b)
	l, err := ledger.New(d, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Run(ctxT(t), "broken", ledger.Key("k3"), func(context.Context, *ledger.Run) error { return fmt.Errorf("boom") })
	if _, err := l.Run(ctxT(t), "every-second", ledger.Every(time.Second), func(context.Context, *ledger.Run) error { return nil }); err != nil {
		t.Fatal(err)
	}
	s := serve(t, b.dsn)
	elect := b.cmd(t, "elect", "scheduler", "--", "sh", "-c", "echo elected; read line || true")
	in, err := elect.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := elect.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := elect.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "elected\n" {
		t.Fatalf("elect printed %q, %v", line, err)
	}
	s.until(t, "/metrics", `sqllock_console_election_leader{sqllock_election="scheduler"} 1`)
	in.Close()
	elect.Wait()
	s.until(t, "/metrics", `sqllock_console_election_leader{sqllock_election="scheduler"} 0`)
	scrape := s.untilMatch(t, "/metrics", regexp.MustCompile(`sqllock_runs_missed\{sqllock_job="every-second"\} [1-9]`))

	// Every series and label the console's rules and its dashboard use.
	for _, f := range []string{consoleRules, consoleBoard} {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range regexp.MustCompile(`sqllock_[a-z_]+`).FindAllString(string(text), -1) {
			if !strings.Contains(scrape, "\n"+n+"{") && !strings.Contains(scrape, "\n"+n+" ") && !strings.Contains(scrape, "{"+n+`="`) {
				t.Errorf("%s uses %s, which the console's scrape lacks", f, n)
			}
		}
	}
	promtoolRules(t, scrape, map[string]int{"SqllockJobFailing": 1, "SqllockRunsFailing": 1, "SqllockRunsMissed": 1, "SqllockElectionLeaderless": 1})
}

// untilMatch is until with a regular expression.
func (s *served) untilMatch(t *testing.T, path string, re *regexp.Regexp) string {
	t.Helper()
	ctx := ctxT(t)
	for {
		_, body := s.get(t, path)
		if re.MatchString(body) {
			return body
		}
		select {
		case <-ctx.Done():
			t.Fatalf("GET %s never matched %s:\n%s", path, re, body)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// promtoolRules checks both rules files with promtool check rules, and
// evaluates the alerts' expressions with promtool test rules over the
// scraped samples (held for 10 minutes): each alert of fire yields that
// many series.
func promtoolRules(t *testing.T, scrape string, fire map[string]int) {
	t.Helper()
	tool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool is not installed (Debian: apt-get install prometheus): the rules are not evaluated")
		return
	}
	for _, f := range []string{mainRules, consoleRules} {
		if out, err := exec.CommandContext(ctxT(t), tool, "check", "rules", f).CombinedOutput(); err != nil {
			t.Errorf("promtool check rules %s: %v\n%s", f, err, out)
		}
	}
	exprs := map[string]string{}
	for _, f := range []string{mainRules, consoleRules} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ruleExpr.FindAllStringSubmatch(string(b), -1) {
			exprs[m[1]] = m[2]
		}
	}
	var tf strings.Builder
	tf.WriteString("evaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n")
	for line := range strings.SplitSeq(scrape, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape line %q: %v", line, err)
		}
		series := line[:i]
		fmt.Fprintf(&tf, "      - series: '%s'\n        values: '%s'\n", strings.ReplaceAll(series, "'", "''"),
			strings.TrimSpace(strings.Repeat(strconv.FormatFloat(v, 'f', -1, 64)+" ", 11)))
	}
	tf.WriteString("    promql_expr_test:\n")
	for alert, n := range fire {
		expr, ok := exprs[alert]
		if !ok {
			t.Fatalf("no alert %s in the rules files", alert)
		}
		fmt.Fprintf(&tf, "      - expr: 'count(%s)'\n        eval_time: 10m\n        exp_samples:\n          - labels: '{}'\n            value: %d\n",
			strings.ReplaceAll(expr, "'", "''"), n)
	}
	file := filepath.Join(t.TempDir(), "console.test.yml")
	if err := os.WriteFile(file, []byte(tf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctxT(t), tool, "test", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}
