package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqllock/sqllock"
)

// The files shipped for operators, from the repository's root.
var (
	dashboardFile = filepath.Join("..", "..", "grafana", "sqllock.json")
	rulesFile     = filepath.Join("..", "..", "alerts", "sqllock.rules.yml")
)

// nameToken is a metric or label name of sqllock's in PromQL.
var nameToken = regexp.MustCompile(`\bsqllock_[a-z0-9_]+\b`)

// scrapeLine is a sample of the Prometheus text format: its metric name
// and its labels.
var scrapeLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? `)

// labelName is a label in a sample's braces.
var labelName = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)

// Every metric and label name the Grafana dashboard and the alerting rules
// use is in a real scrape of the exporter as this example runs it, on
// PostgreSQL, once its locks were lost (their rows deleted behind the
// holders), broken, and its listening connection cut. With promtool installed (the
// Debian package prometheus), the rules and the dashboard's queries are
// checked by it too.
func TestDashboardAndAlertsMatchScrape(t *testing.T) {
	t.Parallel()
	used := usedNames(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// Holds longer than a renewal interval (TTL/3 = 1s), so that leases are
	// renewed, and lost once their rows are gone.
	lockers := make(chan *sqllock.Table, 1)
	e := startExample(ctx, t, config{workers: 4, locks: 1, hold: 3 * time.Second,
		breaker: func(l *sqllock.Table) { lockers <- l }})
	locker := <-lockers // made before the address is ready
	// Every fifth second, break the lock, lose the locks held then and the
	// listening connection; scrape every second until every name is there.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n := 1; ; n++ {
		names := scrape(t, e.url)
		var missing []string
		for name := range used {
			if !names[name] {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			slices.Sort(missing)
			t.Fatalf("the scrape never had %q", missing)
		case <-tick.C:
		}
		if n%5 != 0 {
			continue
		}
		if _, _, err := locker.Break(ctx, "demo:0"); err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			`DELETE FROM "` + e.schema + `".sqllock_locks`,
			`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = 'LISTEN "sqllock:` + e.schema + `"'`,
		} {
			// Deleting every lock row under the workload's transactions,
			// which lock two rows at a time (an attempt's lease and its
			// job's), can deadlock; the server then aborts one of them,
			// and if it is this statement, the next tick tries again.
			var pgErr *pgconn.PgError
			if _, err := e.db.ExecContext(ctx, q); err != nil && ctx.Err() == nil && !(errors.As(err, &pgErr) && pgErr.Code == "40P01") {
				t.Fatal(err)
			}
		}
	}
	e.stop(t)
}

// usedNames returns the sqllock_ names the dashboard's queries and the
// rules use, checking each file's shape on the way (and, with promtool,
// their PromQL).
func usedNames(t *testing.T) map[string]bool {
	t.Helper()
	used := map[string]bool{}
	var dash struct {
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct{ Definition string }
		}
	}
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		for _, n := range nameToken.FindAllString(v.Definition, -1) {
			used[n] = true
		}
	}
	if len(exprs) == 0 {
		t.Fatalf("%s has no queries", dashboardFile)
	}
	for _, e := range exprs {
		for _, n := range nameToken.FindAllString(e, -1) {
			used[n] = true
		}
	}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for line := range strings.SplitSeq(string(rules), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "- alert: ") {
			alerts++
		}
		if e, ok := strings.CutPrefix(line, "expr: "); ok {
			for _, n := range nameToken.FindAllString(e, -1) {
				used[n] = true
			}
		}
	}
	if alerts == 0 {
		t.Fatalf("%s has no alerts", rulesFile)
	}
	promtool(t, exprs)
	return used
}

// promtool checks the rules, and the dashboard's queries as recording
// rules (Grafana's variables replaced), if promtool is installed.
func promtool(t *testing.T, exprs []string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool is not installed (Debian: apt-get install prometheus): the PromQL is not checked")
		return
	}
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	vars := strings.NewReplacer("$__rate_interval", "5m", "$dialect", ".*", "$strategy", ".*")
	for i, e := range exprs {
		fmt.Fprintf(&b, "      - record: dashboard_query_%d\n        expr: '%s'\n", i, strings.ReplaceAll(vars.Replace(e), "'", "''"))
	}
	queries := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(queries, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{rulesFile, queries} {
		if out, err := exec.CommandContext(t.Context(), path, "check", "rules", f).CombinedOutput(); err != nil {
			t.Errorf("promtool check rules %s: %v\n%s", filepath.Base(f), err, out)
		}
	}
}

// scrape returns the metric and label names of one scrape of url.
func scrape(t *testing.T, url string) map[string]bool {
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for line := range strings.SplitSeq(string(b), "\n") {
		m := scrapeLine.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(line, "#") {
			continue
		}
		names[m[1]] = true
		for _, l := range labelName.FindAllStringSubmatch(m[2], -1) {
			names[l[1]] = true
		}
	}
	return names
}
