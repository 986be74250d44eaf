package main

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/ledger"
)

// The file of `sqllock cron` is a crontab(5) file, read as cronie reads
// one, with sqllock's settings in comments that a plain cron ignores:
//
//	# comments, blank lines
//	NAME=VALUE                  environment of the commands below (SHELL
//	                            runs them; CRON_TZ is the time zone of
//	                            the entries below)
//	MIN HOUR DOM MON DOW CMD    an entry: five fields, then the command
//	@daily CMD                  a descriptor: @yearly @annually @monthly
//	                            @weekly @daily @midnight @hourly
//	@every 10s CMD              every period, counted from the Unix epoch
//	# sqllock: name=report tz=Europe/Berlin retries=2
//	                            settings of the next entry
//
// The settings are KEY=VALUE words on one or more "# sqllock:" lines right
// before their entry (see cronKeys).

// cronEntry is one entry of the file, checked.
type cronEntry struct {
	line    int    // of the schedule, from 1
	name    string // the job
	sched   string // the schedule as written: five fields, or a descriptor
	every   time.Duration
	zone    *time.Location // nil for @every
	command string
	env     []string // NAME=VALUE lines above it
	shell   string
	retries int
	backoff time.Duration
	maxTime time.Duration
	early   time.Duration
	overlap ledger.Overlap // "" for the default (skip)
	catchUp ledger.CatchUp // "" for the default (skip)
	window  time.Duration  // catchup-window=
	// earlySet says early= was given.
	earlySet bool
}

// occurrence is e's scheduled occurrence.
func (e *cronEntry) occurrence() ledger.Occurrence {
	var o ledger.Occurrence
	if e.every > 0 {
		o = ledger.Every(e.every)
	} else {
		o = ledger.Cron(e.sched, e.zone)
	}
	if e.earlySet {
		o = o.Early(e.early)
	}
	if e.overlap != "" {
		o = o.Overlap(e.overlap)
	}
	if e.catchUp != "" {
		o = o.CatchUp(e.catchUp).CatchUpWindow(e.window)
	}
	return o
}

// argv is the command line that runs e's command.
func (e *cronEntry) argv() []string { return []string{e.shell, "-c", e.command} }

// same reports whether e and f run the same command on the same schedule
// with the same settings: a reload keeps an entry's timer only then.
func (e *cronEntry) same(f *cronEntry) bool {
	return e.name == f.name && e.sched == f.sched && e.every == f.every && e.zone.String() == f.zone.String() &&
		e.command == f.command && slices.Equal(e.env, f.env) && e.shell == f.shell && e.retries == f.retries &&
		e.backoff == f.backoff && e.maxTime == f.maxTime && e.early == f.early && e.earlySet == f.earlySet &&
		e.overlap == f.overlap && e.catchUp == f.catchUp && e.window == f.window
}

// scheduleText describes e's schedule for messages and --check.
func (e *cronEntry) scheduleText() string {
	if e.every > 0 {
		return "@every " + e.every.String()
	}
	return e.sched + " " + e.zone.String()
}

// cronKeys are the settings of an entry, with what each takes.
var cronKeys = map[string]string{
	"name":           "the job's name in the run ledger (default: the command's program, such as report for /usr/local/bin/report --all)",
	"tz":             "the IANA time zone of the schedule (default: CRON_TZ above, else UTC)",
	"retries":        "more attempts of a failed occurrence (default 0)",
	"retry-backoff":  "the time between a failed attempt and the next (with retries)",
	"max-runtime":    "stop the command once it ran this long (SIGTERM, SIGKILL after --grace), recorded failed, timed out",
	"early":          "take an occurrence at most this long before its time (default 5s)",
	"overlap":        "skip (the default), allow or replace: what an occurrence due while another of the entry's still runs does",
	"catchup":        "skip (the default), latest or all: which occurrences missed before the due one (downtime) run first",
	"catchup-window": "with catchup=latest or all, how far back before the due occurrence missed ones run (default 24h)",
}

// cronError is a mistake in the file: its line and the field at fault.
type cronError struct {
	file  string
	line  int
	field string
	msg   string
}

func (e cronError) Error() string {
	return fmt.Sprintf("%s:%d: %s: %s", e.file, e.line, e.field, e.msg)
}

// cronErrors are the mistakes of a file, in line order.
type cronErrors []cronError

func (es cronErrors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

// maxCronErrors is the most mistakes parseCrontab reports.
const maxCronErrors = 20

// parseCrontab reads the file of sqllock cron (file names it in messages)
// and checks every entry as a run would: the schedule, the time zone, the
// settings and their contradictions, and that no two entries share a name.
// It returns every entry, or the mistakes (cronErrors) and no entry.
func parseCrontab(file string, r io.Reader) ([]*cronEntry, error) {
	var (
		entries []*cronEntry
		errs    cronErrors
		env     []string
		shell   = "/bin/sh"
		zone    = time.UTC
		pending []setting
		pendAt  int // the line of the first pending setting
		names   = map[string]int{}
	)
	fail := func(line int, field, format string, args ...any) {
		if len(errs) < maxCronErrors {
			errs = append(errs, cronError{file, line, field, fmt.Sprintf(format, args...)})
		}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(text, "#"); ok {
			if kv, ok := strings.CutPrefix(strings.TrimSpace(rest), "sqllock:"); ok {
				if pending == nil {
					pendAt = n
				}
				pending = append(pending, readSettings(n, kv, fail)...)
			}
			continue
		}
		if text == "" {
			if pending != nil {
				fail(pendAt, "sqllock settings", "no entry follows them on the next line")
				pending = nil
			}
			continue
		}
		if name, value, ok := envLine(text); ok {
			if pending != nil {
				fail(pendAt, "sqllock settings", "an environment line follows them, not an entry")
				pending = nil
			}
			switch name {
			case "SHELL":
				shell = value
			case "CRON_TZ": // cronie's: the zone of the schedules, not the commands'
				loc, err := loadZone(value)
				if err != nil {
					fail(n, name, "%v", err)
				} else {
					zone = loc
				}
				continue
			}
			env = append(env, name+"="+value)
			continue
		}
		e, ok := readEntry(n, text, pending, fail)
		pending = nil
		if !ok {
			continue
		}
		e.env, e.shell = slices.Clone(env), shell
		if e.zone == nil && e.every == 0 {
			e.zone = zone
		}
		if e.every == 0 {
			if err := e.occurrence().Validate(); err != nil {
				fail(e.line, "schedule", "%s", cronMessage(err))
				continue
			}
		}
		if at, dup := names[e.name]; dup {
			fail(e.line, "name", "%q is the name of the entry on line %d too: give each a name=", e.name, at)
			continue
		}
		names[e.name] = e.line
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	if pending != nil {
		fail(pendAt, "sqllock settings", "no entry follows them")
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return entries, nil
}

// setting is one KEY=VALUE of a "# sqllock:" line.
type setting struct {
	line       int
	key, value string
}

// readSettings reads the KEY=VALUE words of a "# sqllock:" line.
func readSettings(line int, text string, fail func(int, string, string, ...any)) []setting {
	var out []setting
	for w := range strings.FieldsSeq(text) {
		k, v, ok := strings.Cut(w, "=")
		switch {
		case !ok || v == "":
			fail(line, "sqllock settings", "%q: want KEY=VALUE words (keys: %s)", w, strings.Join(sortedKeys(), ", "))
		case cronKeys[k] == "":
			fail(line, k, "unknown setting (keys: %s)", strings.Join(sortedKeys(), ", "))
		default:
			out = append(out, setting{line, k, v})
		}
	}
	if out == nil {
		out = []setting{}
	}
	return out
}

func sortedKeys() []string {
	keys := make([]string, 0, len(cronKeys))
	for k := range cronKeys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// envLine reads NAME=VALUE, VALUE maybe quoted, as crontab(5) has them.
func envLine(text string) (name, value string, ok bool) {
	name, value, ok = strings.Cut(text, "=")
	if !ok {
		return "", "", false
	}
	name = strings.TrimSpace(name)
	if name == "" || strings.ContainsAny(name, " \t*@/,-") {
		return "", "", false
	}
	value = strings.TrimSpace(value)
	if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
		value = value[1 : len(value)-1]
	}
	return name, value, true
}

// loadZone loads an IANA time zone, refusing the process's Local.
func loadZone(name string) (*time.Location, error) {
	loc, err := time.LoadLocation(name)
	if err != nil || name == "Local" || name == "" {
		return nil, fmt.Errorf("%q is not an IANA time zone (Europe/Berlin, America/New_York, UTC)", name)
	}
	return loc, nil
}

// descriptors are the schedules of one word, as the ledger reads them.
var descriptors = map[string]bool{"@yearly": true, "@annually": true, "@monthly": true, "@weekly": true,
	"@daily": true, "@midnight": true, "@hourly": true}

// readEntry reads an entry's line and its settings.
func readEntry(n int, text string, settings []setting, fail func(int, string, string, ...any)) (*cronEntry, bool) {
	e := &cronEntry{line: n}
	fields := strings.Fields(text)
	ok := true
	switch {
	case fields[0] == "@every":
		if len(fields) < 3 {
			fail(n, "schedule", "@every needs a period and a command: @every 10s COMMAND")
			return nil, false
		}
		d, err := time.ParseDuration(fields[1])
		if err != nil || d <= 0 || d%time.Microsecond != 0 {
			fail(n, "period", "%q is not a positive duration (10s, 5m, 1h)", fields[1])
			return nil, false
		}
		e.every, e.sched = d, "@every "+fields[1]
		e.command = restAfter(text, 2)
	case fields[0] == "@reboot":
		fail(n, "schedule", "@reboot has no occurrence the replicas share: run the command from the service that starts sqllock cron")
		return nil, false
	case strings.HasPrefix(fields[0], "@"):
		if !descriptors[fields[0]] {
			fail(n, "schedule", "%q: want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every PERIOD", fields[0])
			return nil, false
		}
		if len(fields) < 2 {
			fail(n, "command", "the entry has no command after its schedule")
			return nil, false
		}
		e.sched, e.command = fields[0], restAfter(text, 1)
	default:
		if len(fields) < 6 {
			fail(n, "schedule", "want five fields (minute hour day-of-month month day-of-week) and a command, or @daily COMMAND; got %d words", len(fields))
			return nil, false
		}
		e.sched, e.command = strings.Join(fields[:5], " "), restAfter(text, 5)
	}
	seen := map[string]int{}
	for _, s := range settings {
		if at, dup := seen[s.key]; dup {
			fail(s.line, s.key, "given twice (line %d too)", at)
			ok = false
			continue
		}
		seen[s.key] = s.line
		var err error
		switch s.key {
		case "name":
			if verr := sqllock.ValidateName(s.value); verr != nil {
				err = verr
			}
			e.name = s.value
		case "tz":
			if e.every > 0 {
				err = fmt.Errorf("@every counts periods since the Unix epoch, in no time zone")
				break
			}
			e.zone, err = loadZone(s.value)
		case "retries":
			e.retries, err = strconv.Atoi(s.value)
			if err == nil && e.retries < 0 {
				err = fmt.Errorf("must not be negative")
			} else if err != nil {
				err = fmt.Errorf("%q is not a whole number", s.value)
			}
		case "retry-backoff":
			e.backoff, err = settingDuration(s.value)
		case "max-runtime":
			e.maxTime, err = settingDuration(s.value)
		case "early":
			e.early, err = settingDuration(s.value)
			e.earlySet = true
		case "overlap":
			if e.overlap, err = ledger.ParseOverlap(s.value); err != nil {
				err = fmt.Errorf("%q: want skip, allow or replace", s.value)
			}
		case "catchup":
			if e.catchUp, err = ledger.ParseCatchUp(s.value); err != nil {
				err = fmt.Errorf("%q: want skip, latest or all", s.value)
			}
		case "catchup-window":
			if e.window, err = settingDuration(s.value); err == nil && e.window <= 0 {
				err = fmt.Errorf("must be positive")
			}
		}
		if err != nil {
			fail(s.line, s.key, "%v", err)
			ok = false
		}
	}
	if _, set := seen["catchup-window"]; set && e.catchUp != ledger.CatchUpLatest && e.catchUp != ledger.CatchUpAll {
		fail(seen["catchup-window"], "catchup-window", "needs catchup=latest or catchup=all: nothing is caught up")
		ok = false
	}
	if _, set := seen["retry-backoff"]; set && e.retries == 0 {
		fail(seen["retry-backoff"], "retry-backoff", "needs retries=N: there is no retry to wait for")
		ok = false
	}
	if e.name == "" {
		e.name = defaultJobName(e.command)
		if err := sqllock.ValidateName(e.name); err != nil {
			fail(n, "name", "no job name comes from the command: give one (# sqllock: name=JOB on the line before)")
			ok = false
		}
	}
	if strings.TrimSpace(e.command) == "" {
		fail(n, "command", "the entry has no command after its schedule")
		ok = false
	}
	return e, ok
}

// settingDuration reads a duration setting: seconds or a Go duration, not
// negative.
func settingDuration(s string) (time.Duration, error) {
	d, err := parseDuration(s)
	if err == nil && d < 0 {
		err = fmt.Errorf("must not be negative")
	}
	return d, err
}

// restAfter is text after its first n words, as written.
func restAfter(text string, n int) string {
	rest := text
	for range n {
		rest = strings.TrimLeft(rest, " \t")
		i := strings.IndexAny(rest, " \t")
		if i < 0 {
			return ""
		}
		rest = rest[i:]
	}
	return strings.TrimSpace(rest)
}

// defaultJobName is the job an entry without name= runs as: its command's
// program, without its directory (report for /usr/local/bin/report --all).
func defaultJobName(command string) string {
	fields := strings.Fields(command)
	for len(fields) > 0 && strings.Contains(fields[0], "=") { // VAR=value cmd
		fields = fields[1:]
	}
	if len(fields) == 0 {
		return ""
	}
	return filepath.Base(fields[0])
}
