package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock/ledger"
)

// TestParseCrontab reads a file with every kind of line and checks the
// entries it makes.
func TestParseCrontab(t *testing.T) {
	t.Parallel()
	const file = `# a comment, then the environment
SHELL=/bin/bash
MAILTO=""
CRON_TZ=Europe/Berlin

# sqllock: name=report tz=America/New_York
# sqllock: retries=2 retry-backoff=30s max-runtime=1h early=2s overlap=replace
# sqllock: catchup=all catchup-window=6h
30 2 * * 1-5   /usr/local/bin/report --all   # not a comment: the command's
@hourly /usr/local/bin/cleanup
	@every 10s   echo "$SQLLOCK_OCCURRENCE"
`
	entries, err := parseCrontab("crontab", strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Fatalf("%d entries, want 3", len(entries))
	}
	r, c, e := entries[0], entries[1], entries[2]
	if r.name != "report" || r.sched != "30 2 * * 1-5" || r.zone.String() != "America/New_York" || r.retries != 2 ||
		r.backoff != 30*time.Second || r.maxTime != time.Hour || !r.earlySet || r.early != 2*time.Second || r.line != 9 ||
		r.overlap != ledger.OverlapReplace || r.catchUp != ledger.CatchUpAll || r.window != 6*time.Hour {
		t.Errorf("report: %+v", *r)
	}
	if got := r.settingsText(); !strings.HasSuffix(got, "early=2s overlap=replace catchup=all catchup-window=6h0m0s") {
		t.Errorf("report's settings for --check: %q", got)
	}
	if r.command != "/usr/local/bin/report --all   # not a comment: the command's" || r.shell != "/bin/bash" {
		t.Errorf("report's command %q, shell %q", r.command, r.shell)
	}
	if len(r.env) != 2 || r.env[0] != "SHELL=/bin/bash" || r.env[1] != "MAILTO=" {
		t.Errorf("report's environment %q: want SHELL and MAILTO (CRON_TZ is the schedules')", r.env)
	}
	if c.name != "cleanup" || c.sched != "@hourly" || c.zone.String() != "Europe/Berlin" || c.retries != 0 || c.earlySet || c.overlap != "" || c.catchUp != "" {
		t.Errorf("cleanup (named after its program, in CRON_TZ): %+v", *c)
	}
	if e.name != "echo" || e.every != 10*time.Second || e.command != `echo "$SQLLOCK_OCCURRENCE"` {
		t.Errorf("@every entry: %+v", *e)
	}
	// The schedule the ledger runs: the next 02:30 on a weekday in New
	// York.
	from := time.Date(2025, 3, 7, 12, 0, 0, 0, time.UTC) // a Friday
	if got, want := r.occurrence().Next(from), time.Date(2025, 3, 10, 6, 30, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("report's next after %v: %v, want %v (Monday 02:30 EDT)", from, got, want)
	}
	if got, want := e.occurrence().Next(from), from.Add(10*time.Second); !got.Equal(want) {
		t.Errorf("@every 10s next after %v: %v, want %v", from, got, want)
	}
}

// TestParseCrontabMistakes checks that every mistake is named by its line
// and field, and that a file with one makes no entry.
func TestParseCrontabMistakes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, file string
		line       int
		field      string
		says       string
	}{
		{"minute", "61 * * * * echo", 1, "schedule", `minute field "61"`},
		{"day of week", "\n\n0 0 * * 8 echo", 3, "schedule", `day of week field "8"`},
		{"too few fields", "0 0 * * echo", 1, "schedule", "five fields"},
		{"no command", "@daily", 1, "command", "no command"},
		{"descriptor", "@fortnightly echo", 1, "schedule", "@fortnightly"},
		{"reboot", "@reboot echo", 1, "schedule", "@reboot"},
		{"period", "@every 0s echo", 1, "period", "positive"},
		{"zone", "# sqllock: tz=Mars/Olympus\n* * * * * echo", 1, "tz", "IANA"},
		{"CRON_TZ", "CRON_TZ=Nowhere\n* * * * * echo", 1, "CRON_TZ", "IANA"},
		{"zone of a period", "# sqllock: tz=UTC\n@every 1m echo", 1, "tz", "no time zone"},
		{"unknown setting", "# sqllock: overlap_policy=skip\n* * * * * echo", 1, "overlap_policy", "unknown setting"},
		{"not key=value", "# sqllock: name\n* * * * * echo", 1, "sqllock settings", "KEY=VALUE"},
		{"twice", "# sqllock: name=a\n# sqllock: name=b\n* * * * * echo", 2, "name", "given twice"},
		{"overlap", "# sqllock: overlap=forbid\n* * * * * echo", 1, "overlap", `"forbid": want skip, allow or replace`},
		{"catchup", "# sqllock: catchup=some\n* * * * * echo", 1, "catchup", `"some": want skip, latest or all`},
		{"catchup-window without catchup", "# sqllock: catchup-window=1h\n* * * * * echo", 1, "catchup-window", "needs catchup=latest"},
		{"retries", "# sqllock: retries=-1\n* * * * * echo", 1, "retries", "negative"},
		{"contradiction", "# sqllock: retry-backoff=5s\n* * * * * echo", 1, "retry-backoff", "needs retries"},
		{"duration", "# sqllock: max-runtime=soon\n* * * * * echo", 1, "max-runtime", "not a duration"},
		{"bad name", "# sqllock: name=a\x00b\n* * * * * echo", 1, "name", "NUL"},
		{"orphan settings", "# sqllock: name=a\n\n* * * * * echo", 1, "sqllock settings", "no entry follows"},
		{"settings at the end", "* * * * * echo\n# sqllock: name=a", 2, "sqllock settings", "no entry follows"},
		{"duplicate", "* * * * * /bin/report\n@daily /usr/bin/report", 2, "name", "line 1 too"},
	} {
		t.Run(c.name, func(t *testing.T) {
			entries, err := parseCrontab("f", strings.NewReader(c.file))
			var es cronErrors
			if !errors.As(err, &es) || len(entries) != 0 {
				t.Fatalf("entries %v, error %v: want mistakes and no entry", entries, err)
			}
			got := es[0]
			if got.line != c.line || got.field != c.field || !strings.Contains(got.msg, c.says) {
				t.Errorf("%v: want line %d, field %q, saying %q", got, c.line, c.field, c.says)
			}
			if !strings.HasPrefix(got.Error(), "f:") {
				t.Errorf("%q does not name the file", got.Error())
			}
		})
	}
}
