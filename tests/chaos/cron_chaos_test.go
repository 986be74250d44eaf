package chaos

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock/ledger"
)

// cronEnv sets the length of each database's cron scenario (default 5m);
// SQLLOCK_CHAOS_CRON=30m is a soak (make soak-cron).
const cronEnv = "SQLLOCK_CHAOS_CRON"

// The cron scenario's daemons: how many, and their flags.
const (
	cronReplicas = 5
	cronTTL      = 5 * time.Second
)

// cronEntry is an entry of the scenario's crontab: its schedule line's
// start and settings, and what its job's command does (sleeps hold
// seconds, then fails with probability fail percent).
type cronEntry struct {
	job      CronJob
	sched    string // "@every 2s" or "*/2 * * * *"
	settings string // more "# sqllock:" settings
	hold     string // sleep(1)'s argument
	fail     int
}

// cronTable is the scenario's crontab: 22 entries, every second to every
// 10 s and every 1-4 minutes in four time zones (three besides UTC, with
// offsets of 5:45, -3:30 and 8:45 so that a step of minutes falls on other
// minutes of UTC than in UTC), under each overlap and catch-up policy,
// with retries, a max runtime, one job paused midway and one triggered by
// hand.
func cronTable(t *testing.T) []cronEntry {
	zone := func(name string) *time.Location {
		l, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ktm, stj, eucla := zone("Asia/Kathmandu"), zone("America/St_Johns"), zone("Australia/Eucla")
	every := func(name string, d time.Duration, overlap, catchUp, settings, hold string, fail int) cronEntry {
		j := CronJob{Name: name, Every: d, Overlap: overlap, CatchUp: catchUp}
		s := fmt.Sprintf("overlap=%s catchup=%s", overlap, catchUp)
		if catchUp != "skip" {
			j.Window = 2 * time.Minute
			s += " catchup-window=2m"
		}
		return cronEntry{job: j, sched: "@every " + d.String(), settings: strings.TrimSpace(s + " " + settings), hold: hold, fail: fail}
	}
	minutes := func(name string, step int, z *time.Location, overlap, catchUp, hold string) cronEntry {
		j := CronJob{Name: name, Step: step, Zone: z, Overlap: overlap, CatchUp: catchUp}
		s := fmt.Sprintf("tz=%s overlap=%s catchup=%s", z, overlap, catchUp)
		if catchUp != "skip" {
			j.Window = 10 * time.Minute
			s += " catchup-window=10m"
		}
		sched := "* * * * *"
		if step > 1 {
			sched = fmt.Sprintf("*/%d * * * *", step)
		}
		return cronEntry{job: j, sched: sched, settings: s, hold: hold}
	}
	s := time.Second
	return []cronEntry{
		every("s1-skip", s, "skip", "skip", "", "0.2", 10),
		every("s2-allow", 2*s, "allow", "skip", "", "0.3", 0),
		every("s2-skip-long", 2*s, "skip", "skip", "", "3", 0),
		every("s2-allow-long", 2*s, "allow", "skip", "", "3", 0),
		every("s2-quick", 2*s, "skip", "skip", "", "0.1", 0),
		every("s3-replace-long", 3*s, "replace", "skip", "", "5", 0),
		every("s3-all-allow", 3*s, "allow", "all", "", "1", 0),
		every("s4-replace", 4*s, "replace", "skip", "", "0.5", 0),
		every("s4-defaults", 4*s, "skip", "skip", "", "1", 0),
		every("s5-latest", 5*s, "skip", "latest", "", "0.5", 0),
		every("s5-all", 5*s, "skip", "all", "", "0.3", 0),
		every("s6-retries", 6*s, "skip", "skip", "retries=2 retry-backoff=1s", "0.5", 40),
		every("s7-max-runtime", 7*s, "skip", "skip", "max-runtime=2s", "3", 0),
		every("s8-paused", 2*s, "allow", "skip", "", "0.1", 0),
		every("s9-retry", 9*s, "replace", "latest", "retries=1", "0.5", 30),
		every("s10-latest", 10*s, "allow", "latest", "", "0.5", 0),
		every("s10-trigger", 10*s, "skip", "skip", "", "0.5", 0),
		minutes("m1-utc", 1, time.UTC, "allow", "all", "1"),
		minutes("m2-kathmandu", 2, ktm, "skip", "latest", "1"),
		minutes("m2-utc", 2, time.UTC, "skip", "skip", "1"),
		minutes("m4-st-johns", 4, stj, "allow", "all", "1"),
		minutes("m1-eucla-replace", 1, eucla, "replace", "skip", "70"),
	}
}

// cronScript is the command of every entry: `job.sh JOB HOLD FAIL` writes
// a line to the log when its work begins and another when it ends, with
// its job, occurrence, token, process ID and the time in nanoseconds.
const cronScript = `#!/bin/sh
log="$(dirname "$0")/effects.log"
echo "start $1 $SQLLOCK_OCCURRENCE $SQLLOCK_TOKEN $$ $(date +%s%N)" >> "$log"
sleep "$2"
r=$(od -An -N1 -tu1 /dev/urandom)
if [ $((r % 100)) -lt "$3" ]; then exit 3; fi
echo "end $1 $SQLLOCK_OCCURRENCE $SQLLOCK_TOKEN $$ $(date +%s%N)" >> "$log"
`

var (
	cronBinOnce sync.Once
	cronBin     string
	cronBinErr  error
)

// sqllockBinary builds the command (without the race detector: the
// command's own tests run it under it; here its CPU would slow the
// scenario's daemons past their leases) once for the package.
func sqllockBinary(t *testing.T) string {
	cronBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sqllock-chaos-cron")
		if err != nil {
			cronBinErr = err
			return
		}
		cronBin = filepath.Join(dir, "sqllock")
		out, err := exec.Command("go", "build", "-o", cronBin, "github.com/sqllock/sqllock/cmd/sqllock").CombinedOutput()
		if err != nil {
			cronBinErr = fmt.Errorf("building sqllock (the workspace's go.work brings in its module): %v\n%s", err, out)
		}
	})
	if cronBinErr != nil {
		t.Fatal(cronBinErr)
	}
	return cronBin
}

// TestChaosCron runs the distributed crontab's scenario on PostgreSQL and
// MariaDB: five `sqllock cron` daemons of one 22-entry crontab, while
// daemons and jobs are SIGKILLed and SIGSTOPped, connections are killed,
// a job is paused and another triggered by hand, and every daemon is down
// for a while (a downtime that the catch-up policies act on); CheckCron
// checks what the ledger and the commands left.
func TestChaosCron(t *testing.T) {
	dur := envDuration(t, cronEnv, 5*time.Minute)
	bin := sqllockBinary(t)
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			runCronScenario(t, kind, bin, dur)
		})
	}
}

// cronDaemon is a running `sqllock cron`.
type cronDaemon struct {
	id   string
	cmd  *exec.Cmd
	done chan struct{} // closed once it exited; then err is set
	err  error
}

// cronRun is one database's cron scenario under way.
type cronRun struct {
	t       *testing.T
	bin     string
	dir     string
	dsn     string
	daemons map[string]*cronDaemon
	n       int
	counts  map[string]int
}

func (r *cronRun) start() {
	r.n++
	id := fmt.Sprintf("r%d", r.n)
	log, err := os.Create(filepath.Join(r.dir, id+".log"))
	if err != nil {
		r.t.Fatal(err)
	}
	c := exec.Command(r.bin, "cron", "--ttl", cronTTL.String(), "--grace", "1s", "--poll", "1s", filepath.Join(r.dir, "crontab"))
	c.Env = append(os.Environ(), "SQLLOCK_DSN="+r.dsn)
	c.Stdout, c.Stderr = log, log
	if err := c.Start(); err != nil {
		r.t.Fatal(err)
	}
	log.Close()
	d := &cronDaemon{id: id, cmd: c, done: make(chan struct{})}
	go func() {
		d.err = c.Wait()
		close(d.done)
	}()
	r.daemons[id] = d
}

// any returns a daemon, at random.
func (r *cronRun) any(rng *rand.Rand) *cronDaemon {
	ids := make([]string, 0, len(r.daemons))
	for id := range r.daemons {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return r.daemons[ids[rng.IntN(len(ids))]]
}

// kill SIGKILLs d and waits for it.
func (r *cronRun) kill(d *cronDaemon) {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
	delete(r.daemons, d.id)
}

// sqllock runs the command with args on the scenario's database, again
// while it cannot reach it (exit 69: a killed connection, or a server
// short of connections on a loaded machine), up to five times.
func (r *cronRun) sqllock(args ...string) string {
	for i := 1; ; i++ {
		ctx, cancel := context.WithTimeout(r.t.Context(), time.Minute)
		c := exec.CommandContext(ctx, r.bin, args...)
		c.Env = append(os.Environ(), "SQLLOCK_DSN="+r.dsn)
		out, err := c.CombinedOutput()
		cancel()
		if err == nil {
			return string(out)
		}
		if c.ProcessState == nil || c.ProcessState.ExitCode() != 69 || i == 5 {
			r.t.Errorf("sqllock %s: %v\n%s", strings.Join(args, " "), err, out)
			return string(out)
		}
		r.t.Logf("sqllock %s (try %d): %v\n%s", strings.Join(args, " "), i, err, out)
		tm := time.NewTimer(2 * time.Second)
		<-tm.C
	}
}

// cronDSN is the command's DSN of s's database, its connections tagged
// for killOne.
func cronDSN(s *setup) (string, error) {
	if s.kind == "postgres" {
		u, err := url.Parse(s.dsn)
		if err != nil {
			return "", err
		}
		q := u.Query()
		q.Set("application_name", s.app)
		q.Set("search_path", s.ns)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	c, err := gomysql.ParseDSN(s.dsn)
	if err != nil {
		return "", err
	}
	u := url.URL{Scheme: "mysql", Host: c.Addr, Path: "/" + s.ns, User: url.User(c.User)}
	if c.Passwd != "" {
		u.User = url.UserPassword(c.User, c.Passwd)
	}
	return u.String(), nil
}

func runCronScenario(t *testing.T, kind, bin string, dur time.Duration) {
	s := newSetup(t, kind, nil)
	dsn, err := cronDSN(s)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	table := cronTable(t)
	var crontab strings.Builder
	crontab.WriteString("# The cron chaos scenario's table (tests/chaos/cron_chaos_test.go).\n")
	for _, e := range table {
		fmt.Fprintf(&crontab, "# sqllock: name=%s %s\n%s %s/job.sh %s %s %d\n", e.job.Name, e.settings, e.sched, dir, e.job.Name, e.hold, e.fail)
	}
	if err := os.WriteFile(filepath.Join(dir, "crontab"), []byte(crontab.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "job.sh"), []byte(cronScript), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &cronRun{t: t, bin: bin, dir: dir, dsn: dsn, daemons: map[string]*cronDaemon{}, counts: map[string]int{}}
	if out := r.sqllock("cron", "--check", filepath.Join(dir, "crontab")); !strings.Contains(out, "22 entries, ok") {
		t.Fatalf("cron --check:\n%s", out)
	}
	t.Cleanup(func() {
		for _, d := range r.daemons {
			_ = d.cmd.Process.Signal(syscall.SIGKILL)
			<-d.done
		}
		if t.Failed() {
			for i := 1; i <= r.n; i++ {
				b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("r%d.log", i)))
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("daemon r%d (its last lines):\n%s", i, b)
			}
		}
	})

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	for range cronReplicas {
		r.start()
	}
	started := time.Now()
	var (
		down               Span
		pausedDone, downed bool
		triggers           int
	)
	wait := func(d time.Duration) {
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-t.Context().Done():
		}
	}
	// Faults one at a time, 1-3 s apart, until the last 40 s, which are
	// left for takeovers and catch-ups to end.
	for time.Since(started) < dur-40*time.Second && t.Context().Err() == nil {
		wait(time.Second + time.Duration(rng.Int64N(int64(2*time.Second))))
		el := time.Since(started)
		switch {
		case !pausedDone && el > dur/4:
			pausedDone = true
			r.sqllock("runs", "pause", "s8-paused")
			continue
		case !downed && el > dur/2:
			downed = true
			for _, d := range r.daemons {
				r.kill(d)
			}
			// A Run may take an occurrence a moment early (Early).
			down.From = time.Now().Add(time.Second)
			wait(25 * time.Second)
			down.To = time.Now()
			for range cronReplicas {
				r.start()
			}
			r.counts["downtimes of every daemon"]++
			continue
		case triggers < 3 && el > time.Duration(triggers+1)*dur/5:
			triggers++
			r.sqllock("runs", "trigger", "s10-trigger")
			continue
		}
		switch rng.IntN(5) {
		case 0:
			r.kill(r.any(rng))
			r.start()
			r.counts["daemons killed"]++
		case 1:
			d := r.any(rng)
			if d.cmd.Process.Signal(syscall.SIGSTOP) == nil {
				wait(2*cronTTL + time.Second)
				_ = d.cmd.Process.Signal(syscall.SIGCONT)
				r.counts["daemons stopped past the TTL"]++
			}
		case 2, 3:
			pid := runningJob(t, filepath.Join(dir, "effects.log"), rng)
			if pid == 0 {
				continue
			}
			if rng.IntN(2) == 0 {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					r.counts["jobs killed"]++
				}
				continue
			}
			if syscall.Kill(pid, syscall.SIGSTOP) == nil {
				wait(3 * time.Second)
				_ = syscall.Kill(pid, syscall.SIGCONT)
				r.counts["jobs stopped"]++
			}
		case 4:
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			ok, err := s.killOne(ctx)
			cancel()
			if err != nil {
				t.Logf("killing a connection: %v", err)
			}
			if ok {
				r.counts["connections killed"]++
			}
		}
	}
	for time.Since(started) < dur {
		wait(dur - time.Since(started))
	}
	// SIGTERM drains: each daemon records what it runs, then exits 0.
	for _, d := range r.daemons {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
	}
	for id, d := range r.daemons {
		select {
		case <-d.done:
			if d.err != nil {
				t.Errorf("daemon %s: after SIGTERM: %v", id, d.err)
			}
		case <-time.After(5 * time.Minute):
			t.Errorf("daemon %s did not drain within 5 minutes of SIGTERM", id)
		}
		delete(r.daemons, id)
	}

	end := time.Now()
	h := cronHistory(t, s, table, filepath.Join(dir, "effects.log"))
	h.Down, h.End = []Span{down}, end
	v := CheckCron(h)
	for _, s := range v {
		t.Error(s)
	}
	reportCron(t, kind, dur, h, r.counts, len(v))
}

// runningJob returns the process ID of a job's command that began its
// work within the last two seconds and has not ended it, or 0.
func runningJob(t *testing.T, log string, rng *rand.Rand) int {
	f, err := os.Open(log)
	if err != nil {
		return 0
	}
	defer f.Close()
	open := map[string]int64{} // pid -> start
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		if len(w) != 6 {
			continue
		}
		at, _ := strconv.ParseInt(w[5], 10, 64)
		if w[0] == "start" {
			open[w[4]] = at
		} else {
			delete(open, w[4])
		}
	}
	var pids []int
	for pid, at := range open {
		if time.Since(time.Unix(0, at)) < 2*time.Second {
			p, _ := strconv.Atoi(pid)
			pids = append(pids, p)
		}
	}
	if len(pids) == 0 {
		return 0
	}
	sort.Ints(pids)
	return pids[rng.IntN(len(pids))]
}

// cronHistory reads what the scenario left: the ledger's attempts, its
// missed occurrences, the paused job's pause, and the commands' lines.
func cronHistory(t *testing.T, s *setup, table []cronEntry, log string) CronHistory {
	ctx := t.Context()
	l, err := ledger.New(s.dialect(t, s.admin), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := CronHistory{TimeFormat: ledger.TimeFormat, ManualPrefix: ledger.ManualPrefix}
	jobs, err := l.Jobs(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	pausedAt := map[string]time.Time{}
	for _, j := range jobs {
		pausedAt[j.Job] = j.PausedAt
	}
	for _, e := range table {
		j := e.job
		j.PausedAt = pausedAt[j.Name]
		h.Jobs = append(h.Jobs, j)
	}
	runs, err := l.Runs(ctx, "", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		h.Attempts = append(h.Attempts, CronAttempt{Job: r.Job, Occurrence: r.Occurrence, Attempt: r.Attempt, State: string(r.State),
			Owner: r.Owner, Token: r.Token, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt})
	}
	missed, err := l.Missed(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range missed {
		h.Missed = append(h.Missed, CronMissed{Job: m.Job, Occurrence: m.Occurrence})
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		w := strings.Fields(line)
		if len(w) != 6 {
			continue
		}
		tok, err1 := strconv.ParseInt(w[3], 10, 64)
		at, err2 := strconv.ParseInt(w[5], 10, 64)
		if err1 != nil || err2 != nil {
			t.Errorf("a line of the commands' log: %q", line)
			continue
		}
		h.Effects = append(h.Effects, CronEffect{Job: w[1], Occurrence: w[2], Token: tok, End: w[0] == "end", At: time.Unix(0, at)})
	}
	return h
}

// reportCron logs and records (see reportEnv) the scenario's figures, and
// says when a policy left no trace of acting at all (over minutes, with
// jobs longer than their period, each one acts many times).
func reportCron(t *testing.T, kind string, dur time.Duration, h CronHistory, counts map[string]int, violations int) {
	states := map[string]int{}
	occs := map[string]bool{}
	byJob := map[string]map[string]int{}
	for _, a := range h.Attempts {
		states[a.State]++
		occs[a.Job+" "+a.Occurrence] = true
		if byJob[a.Job] == nil {
			byJob[a.Job] = map[string]int{}
		}
		byJob[a.Job][a.State]++
		if strings.HasPrefix(a.Occurrence, h.ManualPrefix) {
			byJob[a.Job]["manual"]++
		}
	}
	overlaps := commandOverlaps(h, "s2-allow-long")
	caught := 0
	for _, j := range h.Jobs {
		if j.CatchUp == "skip" || len(h.Down) == 0 {
			continue
		}
		for _, o := range j.occurrences(h.Down[0].From, h.Down[0].To) {
			for _, a := range h.Attempts {
				if a.Job == j.Name && a.Occurrence == o.UTC().Format(h.TimeFormat) {
					caught++
					break
				}
			}
		}
	}
	line := fmt.Sprintf("cron %s %v: %d jobs, %d occurrences, %d attempts %v, %d missed; faults %v; "+
		"skipped for overlap (s2-skip-long) %d, overlapping commands (s2-allow-long) %d, replaced (s3-replace-long) %d, "+
		"caught up after the downtime %d, manual %d; liveness, which depends on the machine's speed: %d occurrences left running or abandoned; %d violations",
		kind, dur.Round(time.Second), len(h.Jobs), len(occs), len(h.Attempts), states, len(h.Missed), counts,
		byJob["s2-skip-long"]["skipped"], overlaps, byJob["s3-replace-long"]["replaced"], caught, byJob["s10-trigger"]["manual"],
		notTakenOver(h), violations)
	t.Log(line)
	if path := os.Getenv(reportEnv); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
	// Each policy's trace, which a machine too slow for the scenario's
	// one-second jobs may not leave (their leases lapse, their attempts
	// fail): said, not failed on; CheckCron judged what they did.
	for what, n := range map[string]int{
		"no occurrence of s2-skip-long was skipped for overlap": byJob["s2-skip-long"]["skipped"],
		"no two commands of s2-allow-long overlapped":           overlaps,
		"no occurrence of s3-replace-long was replaced":         byJob["s3-replace-long"]["replaced"],
		"no attempt of s7-max-runtime failed (timed out)":       byJob["s7-max-runtime"]["failed"],
		"no manual occurrence of s10-trigger ran":               byJob["s10-trigger"]["manual"],
	} {
		if n == 0 {
			t.Logf("a policy left no trace (a machine too slow for the scenario?): %s", what)
		}
	}
}

// commandOverlaps counts the pairs of job's commands whose work overlapped
// (one began before the other ended).
func commandOverlaps(h CronHistory, job string) int {
	type span struct{ from, to time.Time }
	spans := map[string]*span{}
	for _, e := range h.Effects {
		if e.Job != job {
			continue
		}
		k := e.Occurrence + "/" + strconv.FormatInt(e.Token, 10)
		if spans[k] == nil {
			spans[k] = &span{}
		}
		if e.End {
			spans[k].to = e.At
		} else {
			spans[k].from = e.At
		}
	}
	var ss []span
	for _, s := range spans {
		if !s.from.IsZero() && !s.to.IsZero() {
			ss = append(ss, *s)
		}
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].from.Before(ss[j].from) })
	n := 0
	for i := 1; i < len(ss); i++ {
		if ss[i].from.Before(ss[i-1].to) {
			n++
		}
	}
	return n
}

// notTakenOver counts the occurrences whose last attempt is running or
// abandoned at the end: a dead replica's that no other took over (those of
// the replicas killed at the downtime, whose occurrences nobody waited
// for, or of a waiter that gave up).
func notTakenOver(h CronHistory) int {
	last := map[string]CronAttempt{}
	for _, a := range h.Attempts {
		k := a.Job + " " + a.Occurrence
		if l, ok := last[k]; !ok || a.Attempt > l.Attempt {
			last[k] = a
		}
	}
	n := 0
	for _, a := range last {
		if a.State == "running" || a.State == "abandoned" {
			n++
		}
	}
	return n
}
