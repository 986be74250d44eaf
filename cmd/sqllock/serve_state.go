package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/ledger"
	"github.com/sqllock/sqllock/observe"
)

// console is sqllock serve: what it read from the database last, and the
// means to read it again and to act.
type console struct {
	t       *target
	rawDSN  string // for doctor's checks; never shown
	opts    serveOptions
	log     *slog.Logger
	ledger  *ledger.Ledger // nil where the dialect has no run ledger (TiDB)
	locks   *sqllock.Table // for breaking a lock
	hub     *hub
	secrets []string // the DSN's passwords, scrubbed from every message shown
	pages   pageSet
	doctor  cachedFindings
	audit   audit
}

// audit counts the console's actions done, as the lock table's and the
// ledger's observers hear them (a lease broken; a job paused, resumed,
// triggered or forgotten), and the actions refused, for /metrics.
type audit struct {
	mu      sync.Mutex
	done    map[string]int
	refused int
}

// Broken implements observe.BreakObserver.
func (a *audit) Broken(context.Context, observe.BrokenEvent) { a.count("broken") }

// JobChanged implements ledger.ChangedObserver.
func (a *audit) JobChanged(_ context.Context, c ledger.JobChange) { a.count(string(c.Change)) }

func (a *audit) count(action string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done == nil {
		a.done = map[string]int{}
	}
	a.done[action]++
}

func (a *audit) refusal() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refused++
}

// counts returns the actions done, by name, and the refusals.
func (a *audit) counts() (map[string]int, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	done := make(map[string]int, len(a.done))
	for k, n := range a.done {
		done[k] = n
	}
	return done, a.refused
}

// jobPageAttempts is how many attempts a job's page shows.
const jobPageAttempts = 200

// maxRemembered bounds the elections the console remembers having seen
// (their leader series go to 0 when the leader goes).
const maxRemembered = 10000

func newConsole(t *target, rawDSN string, opts serveOptions) (*console, error) {
	c := &console{t: t, rawDSN: rawDSN, opts: opts, log: opts.log, secrets: passwords(rawDSN)}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if c.locks, err = sqllock.NewTable(t.d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{Logger: c.log, Observer: &c.audit}}); err != nil {
		return nil, err
	}
	switch c.ledger, err = ledger.New(t.d, ledger.Options{Logger: c.log, Observer: &c.audit}); {
	case errors.Is(err, sqllock.ErrUnsupported):
		c.ledger = nil
	case err != nil:
		return nil, err
	}
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	c.hub = newHub(opts.interval, c.read)
	return c, nil
}

// snapshot is one read of the database, shown to every viewer until the
// next.
type snapshot struct {
	Seq uint64    // the number of reads tried
	At  time.Time // of the last successful read
	// Locks are the held locks (sqllock locks --json); Skipped says why
	// some are not listed.
	Locks   []lockRow
	Skipped string
	// Runs is sqllock runs --json with --limit --attempts: the latest
	// attempts of every job, the missed occurrences and the jobs.
	Runs runsView
	Jobs []jobSummary
	// Elections maps every election seen since the start to whether it
	// has a leader now.
	Elections map[string]bool
	ReadTime  time.Duration // of the last read, successful or not
	// Err, if not "", is why the last read failed, since ErrSince: the
	// data are those of the read at At.
	Err      string
	ErrSince time.Time
	Reads    uint64 // successful reads
	Failures uint64 // failed reads
}

// ok reports whether the last read succeeded.
func (s *snapshot) ok() bool { return s.Err == "" && s.Reads > 0 }

// jobSummary is a job's row on the jobs page.
type jobSummary struct {
	jobRow
	// Attempts are its latest attempts (at most --per-job), the latest
	// first.
	Attempts []runRow
	Missed   int
	// LastSuccess is the end of its latest succeeded attempt among
	// Attempts; nil if none.
	LastSuccess *time.Time
	// State is paused, running (its latest attempt runs), or else its
	// health (see ledger.Health): failing, missed, late, new or up.
	State string
	// StreakCapped says all of Attempts failed (jobRow.FailingStreak
	// counts them).
	StreakCapped bool
	Next         *time.Time // its next occurrence, for a job run with --every
}

// summarize makes the summary of job j from its latest attempts (latest
// first) and missed count, at now.
func summarize(j jobRow, attempts []runRow, missed int, now time.Time) jobSummary {
	s := jobSummary{jobRow: j, Attempts: attempts, Missed: missed}
	for i := range attempts {
		if a := &attempts[i]; a.State == string(ledger.StateSucceeded) && s.LastSuccess == nil {
			s.LastSuccess = a.FinishedAt
		}
	}
	s.StreakCapped = s.FailingStreak > 0 && s.FailingStreak >= len(attempts)
	switch {
	case j.Paused:
		s.State = string(ledger.HealthPaused)
	case len(attempts) > 0 && attempts[0].State == string(ledger.StateRunning):
		s.State = "running"
	default:
		s.State = j.Health
	}
	if j.period > 0 {
		p, ph := j.period.Nanoseconds(), j.phase.Nanoseconds()
		k := (now.UnixNano() - ph) / p
		if k*p > now.UnixNano()-ph { // division truncates toward zero
			k--
		}
		next := time.Unix(0, (k+1)*p+ph)
		s.Next = &next
	}
	return s
}

// read reads everything the pages and /metrics show: the locks, and the
// run ledger's jobs, latest attempts and missed occurrences (one statement
// per job for its own latest attempts). Its cost does not depend on the
// number of viewers: the hub calls it once per interval.
func (c *console) read(ctx context.Context, prev *snapshot) (*snapshot, error) {
	s, err := c.readAll(ctx, prev)
	if err != nil {
		return nil, errors.New(c.scrub(message(c.t.fail(err))))
	}
	return s, nil
}

func (c *console) readAll(ctx context.Context, prev *snapshot) (*snapshot, error) {
	s := &snapshot{Runs: runsView{Runs: []runRow{}, Missed: []missedRow{}, MissedJobs: []missedJobRow{}, Jobs: []jobRow{}}}
	rows, skipped, err := listLocks(ctx, c.t)
	if err != nil {
		return nil, err
	}
	s.Locks = rows
	if skipped != nil {
		s.Skipped = skipped.Error()
	}
	s.Elections = make(map[string]bool, len(prev.Elections))
	for name := range prev.Elections {
		s.Elections[name] = false
	}
	for _, r := range rows {
		if r.Strategy == "election" && (len(s.Elections) < maxRemembered || prev.Elections[r.Name]) {
			s.Elections[r.Name] = true
		}
	}
	if c.ledger == nil {
		return s, nil
	}
	if s.Runs, err = readRuns(ctx, c.ledger, "", c.opts.attempts, c.health()); err != nil {
		return nil, err
	}
	missed := map[string]int{}
	for _, m := range s.Runs.MissedJobs {
		missed[m.Job] = m.Count
	}
	now := time.Now()
	for _, j := range s.Runs.Jobs {
		infos, err := c.ledger.Runs(ctx, j.Job, c.opts.perJob)
		if err != nil {
			return nil, err
		}
		s.Jobs = append(s.Jobs, summarize(j, appendRunRows(nil, infos, now), missed[j.Job], now))
	}
	return s, nil
}

// job returns the summary of the job name in s, if s has it.
func (s *snapshot) job(name string) (jobSummary, bool) {
	i, ok := slices.BinarySearchFunc(s.Jobs, name, func(j jobSummary, name string) int { return strings.Compare(j.Job, name) })
	if !ok {
		return jobSummary{}, false
	}
	return s.Jobs[i], true
}

// locksNamed returns the rows of s's locks named name.
func (s *snapshot) locksNamed(name string) []lockRow {
	var rows []lockRow
	for _, r := range s.Locks {
		if r.Name == name {
			rows = append(rows, r)
		}
	}
	return rows
}

// hub reads the database once per interval, whoever watches, and tells the
// watchers when it has.
type hub struct {
	interval time.Duration
	read     func(ctx context.Context, prev *snapshot) (*snapshot, error)
	poke     chan struct{} // asks for a read now (after an action)

	mu      sync.Mutex
	cur     *snapshot
	changed chan struct{} // closed when cur is replaced
	jobs    map[string]*jobEntry
	// pages are the answers rendered from cur, by URL (console.once).
	pages map[string]renderedPage
	// pagesSeq is the snapshot pages were rendered from.
	pagesSeq uint64
}

// renderedPage is an answer kept for the other viewers of a snapshot.
type renderedPage struct {
	header http.Header
	body   []byte
}

// rendered returns the answer kept for key under snapshot seq.
func (h *hub) rendered(key string, seq uint64) (renderedPage, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pagesSeq != seq {
		return renderedPage{}, false
	}
	p, ok := h.pages[key]
	return p, ok
}

// keep keeps the answer p for key, rendered from snapshot seq, unless a
// newer snapshot has been published meanwhile.
func (h *hub) keep(key string, seq uint64, p renderedPage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if seq != h.cur.Seq {
		return
	}
	if h.pagesSeq != seq {
		h.pages, h.pagesSeq = map[string]renderedPage{}, seq
	}
	h.pages[key] = p
}

func newHub(interval time.Duration, read func(context.Context, *snapshot) (*snapshot, error)) *hub {
	return &hub{interval: interval, read: read, poke: make(chan struct{}, 1),
		cur: &snapshot{}, changed: make(chan struct{}), jobs: map[string]*jobEntry{}}
}

// run reads at once, then every interval (or when poked), until ctx ends.
func (h *hub) run(ctx context.Context) {
	tick := time.NewTicker(h.interval)
	defer tick.Stop()
	for {
		h.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-h.poke:
		}
	}
}

// refresh reads the database once and publishes what it read, or, when the
// read fails, the failure beside the last data read.
func (h *hub) refresh(ctx context.Context) {
	prev := h.snapshot()
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, max(h.interval, 30*time.Second))
	s, err := h.read(rctx, prev)
	cancel()
	if ctx.Err() != nil {
		return // shutting down: not the database's fault
	}
	if err != nil {
		next := *prev
		next.Err, next.Failures = err.Error(), prev.Failures+1
		if prev.Err == "" {
			next.ErrSince = start
		}
		s = &next
	} else {
		s.At, s.Reads, s.Failures = start, prev.Reads+1, prev.Failures
	}
	s.Seq, s.ReadTime = prev.Seq+1, time.Since(start)
	h.mu.Lock()
	h.cur = s
	close(h.changed)
	h.changed = make(chan struct{})
	for name, e := range h.jobs {
		if e.viewed+2 < s.Seq { // not viewed lately
			delete(h.jobs, name)
		}
	}
	h.mu.Unlock()
}

// snapshot returns the latest snapshot.
func (h *hub) snapshot() *snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur
}

// watch returns the latest snapshot and a channel closed when the next is
// published.
func (h *hub) watch() (*snapshot, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur, h.changed
}

// refreshSoon asks run for a read now.
func (h *hub) refreshSoon() {
	select {
	case h.poke <- struct{}{}:
	default:
	}
}

// jobEntry is a job page's data, read at most once per snapshot however
// many view it.
type jobEntry struct {
	viewed uint64 // the latest snapshot it was asked for under (hub.mu)

	mu   sync.Mutex
	seq  uint64 // of the snapshot it was read under; 0: not yet
	view runsView
	err  error
}

// jobView returns sqllock runs JOB's view (the latest jobPageAttempts
// attempts and the missed occurrences) for a job of snapshot s, read again
// only once s has been replaced since the last read.
func (c *console) jobView(ctx context.Context, s *snapshot, job string) (runsView, error) {
	h := c.hub
	h.mu.Lock()
	e := h.jobs[job]
	if e == nil {
		e = &jobEntry{}
		h.jobs[job] = e
	}
	e.viewed = s.Seq
	h.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seq >= s.Seq {
		return e.view, e.err
	}
	e.view, e.err = readRuns(ctx, c.ledger, job, jobPageAttempts, c.health())
	if e.err != nil {
		e.err = errors.New(c.scrub(e.err.Error()))
	}
	e.seq = s.Seq
	return e.view, e.err
}

// cachedFindings is what doctor found, checked again at most once a minute.
type cachedFindings struct {
	mu       sync.Mutex
	at       time.Time
	findings []finding
	err      error
}

// doctorEvery is how often the doctor page runs the checks again.
const doctorEvery = time.Minute

// findings returns doctor's findings, checking again if the last check is
// older than doctorEvery.
func (c *console) findings(ctx context.Context) ([]finding, time.Time, error) {
	d := &c.doctor
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.at.IsZero() || time.Since(d.at) > doctorEvery || d.err != nil {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		d.findings, d.err = c.t.doctor(ctx, c.rawDSN)
		for i := range d.findings {
			d.findings[i].found = c.scrub(d.findings[i].found)
		}
		d.at = time.Now()
	}
	return d.findings, d.at, d.err
}

// keywordPassword finds a password in a keyword DSN (password=...).
var keywordPassword = regexp.MustCompile(`(?i)\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// passwords returns the passwords written in dsn, in every form a DSN
// takes, for scrub.
func passwords(dsn string) []string {
	var ps []string
	add := func(p string) {
		if len(p) >= 3 && !slices.Contains(ps, p) { // shorter ones would blank common words
			ps = append(ps, p)
		}
	}
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok {
			add(p)
			add(url.QueryEscape(p))
			add(url.PathEscape(p))
		}
	}
	for _, m := range keywordPassword.FindAllStringSubmatch(dsn, -1) {
		add(strings.Trim(m[1], "'"))
	}
	rest := dsn
	for _, scheme := range []string{"mysql://", "tidb://"} {
		rest = strings.TrimPrefix(rest, scheme)
	}
	if c, err := gomysql.ParseDSN(rest); err == nil {
		add(c.Passwd)
	}
	return ps
}

// scrub removes the DSN and its passwords from msg, an error's text to
// be shown or logged.
func (c *console) scrub(msg string) string {
	if c.rawDSN != "" {
		msg = strings.ReplaceAll(msg, c.rawDSN, c.t.dsn)
	}
	for _, p := range c.secrets {
		msg = strings.ReplaceAll(msg, p, "xxxxx")
	}
	return msg
}

// health is the console's reading of the jobs' health: --missed-after,
// over the latest --per-job attempts of each job.
func (c *console) health() ledger.HealthOptions {
	return ledger.HealthOptions{Grace: c.opts.grace, Attempts: c.opts.perJob}
}
