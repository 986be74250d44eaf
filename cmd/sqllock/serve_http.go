package main

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sqllock/sqllock"
)

// consoleFiles are the console's templates, style sheet and script: no
// asset comes from elsewhere.
//
//go:embed console
var consoleFiles embed.FS

// pageSet holds a template per page, each with the layout.
type pageSet map[string]*template.Template

// pageNames are the pages, each console/NAME.html.
var pageNames = []string{"overview", "locks", "lock", "elections", "jobs", "job", "doctor", "message"}

func parsePages() (pageSet, error) {
	funcs := template.FuncMap{
		"ms":       func(ms int64) string { return shortDuration(time.Duration(ms) * time.Millisecond) },
		"dur":      shortDuration,
		"ago":      func(t any) string { return shortDuration(time.Since(timeOf(t))) + " ago" },
		"until":    func(t any) string { return "in " + shortDuration(time.Until(timeOf(t))) },
		"clock":    func(t any) string { return timeOf(t).Local().Format("2006-01-02 15:04:05") },
		"timeline": timelineOf,
		"path":     pathEscape,
	}
	set := pageSet{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(consoleFiles, "console/layout.html", "console/partials.html", "console/"+name+".html")
		if err != nil {
			return nil, err
		}
		set[name] = t
	}
	return set, nil
}

// timeOf is t, a time.Time or a *time.Time (zero for nil), for the
// templates.
func timeOf(t any) time.Time {
	switch t := t.(type) {
	case time.Time:
		return t
	case *time.Time:
		if t != nil {
			return *t
		}
	}
	return time.Time{}
}

// TimeLeft is the lock's TIME LEFT column of sqllock locks, for the
// templates.
func (r lockRow) TimeLeft() string { return r.timeLeft() }

// shortDuration rounds d for people: 1.2s, 3m4s, 5h6m, 7d8h.
func shortDuration(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		s = d.Round(time.Millisecond).String()
	case d < time.Minute:
		s = d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		s = d.Round(time.Second).String()
	case d < 48*time.Hour:
		s = strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	default:
		s = fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	}
	if neg {
		return "-" + s
	}
	return s
}

// pathEscape escapes a lock or job name for a URL path (slashes kept).
func pathEscape(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// page is what every page's template gets.
type page struct {
	Title  string
	Nav    string // the menu entry to mark
	Snap   *snapshot
	Writes bool // the actions are offered
	Body   any
	// Static pages (an action's outcome, a refusal) are not fetched again
	// on the live updates: their URL would not show them again.
	Static bool
}

// handler routes the console's URLs.
func (c *console) handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(consoleFiles, "console/static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", c.once(c.overviewPage))
	mux.HandleFunc("GET /locks", c.once(c.locksPage))
	mux.HandleFunc("GET /locks/{name...}", c.once(c.lockPage))
	mux.HandleFunc("GET /elections", c.once(c.electionsPage))
	mux.HandleFunc("GET /jobs", c.once(c.jobsPage))
	mux.HandleFunc("GET /jobs/{name...}", c.once(c.jobPage))
	mux.HandleFunc("GET /doctor", c.doctorPage)
	mux.HandleFunc("GET /metrics", c.once(c.metrics))
	mux.HandleFunc("GET /api/locks", c.once(c.apiLocks))
	mux.HandleFunc("GET /api/runs", c.once(c.apiRuns))
	mux.HandleFunc("GET /events", c.events)
	mux.HandleFunc("POST /actions/break", c.breakLock)
	mux.HandleFunc("POST /actions/ask", c.askRelease)
	mux.HandleFunc("POST /actions/job", c.jobAction)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "No such page", "The console has no page "+r.URL.Path+".")
	})
	return securityHeaders(mux)
}

// once serves what h answers for a URL once per read of the database: the
// first viewer's request renders it, the others get the same bytes until
// the next read. Only answers 200 are kept.
func (c *console) once(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.RequestURI()
		seq := c.hub.snapshot().Seq
		if p, ok := c.hub.rendered(key, seq); ok {
			for k, v := range p.header {
				w.Header()[k] = v
			}
			w.Write(p.body)
			return
		}
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		h(rec, r)
		if rec.status == http.StatusOK {
			c.hub.keep(key, seq, renderedPage{header: w.Header().Clone(), body: rec.body.Bytes()})
		}
	}
}

// recorder passes an answer on and keeps a copy.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

// securityHeaders adds the headers every answer carries: no framing, no
// sniffing, and no script or style but the console's own.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

// render writes the page name with p, or a 500 if the template fails.
func (c *console) render(w http.ResponseWriter, status int, name string, p page) {
	p.Writes = c.opts.allowWrites
	if p.Snap == nil {
		p.Snap = c.hub.snapshot()
	}
	var b bytes.Buffer
	if err := c.pages[name].Execute(&b, p); err != nil {
		c.log.Error("sqllock serve: rendering a page", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// notice is the body of the message page: a 4xx, a 503, an action's
// outcome.
type notice struct {
	Heading, Text string
	Back, BackTo  string // a link back, if any
}

// fail answers with the message page and status.
func (c *console) fail(w http.ResponseWriter, r *http.Request, status int, heading, text string) {
	c.render(w, status, "message", page{Title: heading, Body: notice{Heading: heading, Text: text}, Static: r.Method != http.MethodGet})
}

// notReady answers 503 while no read of the database has succeeded yet.
func (c *console) notReady(w http.ResponseWriter, r *http.Request, s *snapshot) bool {
	if s.Reads > 0 {
		return false
	}
	text := "The console has not read the database yet; this page reloads when it has."
	if s.Err != "" {
		text = "The console cannot read the database: " + s.Err
	}
	w.Header().Set("Retry-After", "2")
	c.fail(w, r, http.StatusServiceUnavailable, "Database not read yet", text)
	return true
}

// overviewBody counts what is held, waiting, leading and running.
type overviewBody struct {
	Locks, Waiters, Elections, Jobs, Running, Failing, Missed, Late, Paused int
	Attention                                                               []jobSummary
}

func (c *console) overviewPage(w http.ResponseWriter, r *http.Request) {
	s := c.hub.snapshot()
	if c.notReady(w, r, s) {
		return
	}
	var o overviewBody
	for _, l := range s.Locks {
		if l.live() {
			o.Locks++
		}
		if l.Waiters != nil {
			o.Waiters += *l.Waiters
		}
		if l.Strategy == "election" {
			o.Elections++
		}
	}
	o.Jobs = len(s.Jobs)
	for _, j := range s.Jobs {
		switch j.State {
		case "running":
			o.Running++
		case "failing":
			o.Failing++
		case "missed":
			o.Missed++
		case "late":
			o.Late++
		case "paused":
			o.Paused++
		}
		if j.State == "failing" || j.State == "missed" || j.State == "late" {
			o.Attention = append(o.Attention, j)
		}
	}
	c.render(w, http.StatusOK, "overview", page{Title: "Overview", Nav: "overview", Snap: s, Body: o})
}

// lockKinds are the kinds of lock the locks page filters on.
var lockKinds = []string{"table", "election", "optimistic", "semaphore", "rwlock", "pessimistic"}

// locksBody is the locks page's.
type locksBody struct {
	Kind  string
	Kinds []string
	Rows  []lockRow
}

func (c *console) locksPage(w http.ResponseWriter, r *http.Request) {
	s := c.hub.snapshot()
	kind := r.URL.Query().Get("kind")
	if kind != "" && !slices.Contains(lockKinds, kind) {
		c.fail(w, r, http.StatusBadRequest, "Bad request", fmt.Sprintf("kind=%q: want one of %s.", kind, strings.Join(lockKinds, ", ")))
		return
	}
	if c.notReady(w, r, s) {
		return
	}
	b := locksBody{Kind: kind, Kinds: lockKinds}
	for _, l := range s.Locks {
		if kind == "" || l.Strategy == kind {
			b.Rows = append(b.Rows, l)
		}
	}
	c.render(w, http.StatusOK, "locks", page{Title: "Locks", Nav: "locks", Snap: s, Body: b})
}

// lockBody is a lock's page: its rows, and whether it can be broken (a
// live lease of the lock table: sqllock unlock's).
type lockBody struct {
	Name      string
	Rows      []lockRow
	Breakable *lockRow
}

func (c *console) lockPage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := sqllock.ValidateName(name); err != nil {
		c.fail(w, r, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	s := c.hub.snapshot()
	if c.notReady(w, r, s) {
		return
	}
	rows := s.locksNamed(name)
	if len(rows) == 0 {
		c.fail(w, r, http.StatusNotFound, "No such lock", fmt.Sprintf("Nothing holds %q (as of %s).", name, s.At.Format(time.TimeOnly)))
		return
	}
	b := lockBody{Name: name, Rows: rows}
	for i := range rows {
		if rows[i].isTable() && rows[i].live() {
			b.Breakable = &rows[i]
		}
	}
	c.render(w, http.StatusOK, "lock", page{Title: "Lock " + name, Nav: "locks", Snap: s, Body: b})
}

// electionsBody lists the leaders, and the elections seen that have none.
type electionsBody struct {
	Leaders    []lockRow
	Leaderless []string
}

func (c *console) electionsPage(w http.ResponseWriter, r *http.Request) {
	s := c.hub.snapshot()
	if c.notReady(w, r, s) {
		return
	}
	var b electionsBody
	for _, l := range s.Locks {
		if l.Strategy == "election" {
			b.Leaders = append(b.Leaders, l)
		}
	}
	for name, led := range s.Elections {
		if !led {
			b.Leaderless = append(b.Leaderless, name)
		}
	}
	slices.Sort(b.Leaderless)
	c.render(w, http.StatusOK, "elections", page{Title: "Elections", Nav: "elections", Snap: s, Body: b})
}

// jobsBody is the jobs page's: every job with its timeline.
type jobsBody struct {
	Jobs      []jobSummary
	Ledger    bool // the dialect has a run ledger
	PerJob    int
	Attempts  int
	Truncated bool // the ledger has more jobs than the page shows
}

func (c *console) jobsPage(w http.ResponseWriter, r *http.Request) {
	s := c.hub.snapshot()
	if c.notReady(w, r, s) {
		return
	}
	c.render(w, http.StatusOK, "jobs", page{Title: "Jobs", Nav: "jobs", Snap: s,
		Body: jobsBody{Jobs: s.Jobs, Ledger: c.ledger != nil, PerJob: c.opts.perJob, Attempts: c.opts.attempts}})
}

// jobBody is a job's page.
type jobBody struct {
	Job  jobSummary
	View runsView // its latest jobPageAttempts attempts and missed occurrences
	Err  string
}

func (c *console) jobPage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := sqllock.ValidateName(name); err != nil {
		c.fail(w, r, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	s := c.hub.snapshot()
	if c.notReady(w, r, s) {
		return
	}
	j, ok := s.job(name)
	if !ok || c.ledger == nil {
		c.fail(w, r, http.StatusNotFound, "No such job", fmt.Sprintf("The run ledger has no job %q (as of %s).", name, s.At.Format(time.TimeOnly)))
		return
	}
	b := jobBody{Job: j}
	v, err := c.jobView(r.Context(), s, name)
	if err != nil {
		b.Err = err.Error()
	}
	b.View = v
	// The job's page shows its longer history on the timeline.
	b.Job.Attempts = v.Runs
	c.render(w, http.StatusOK, "job", page{Title: "Job " + name, Nav: "jobs", Snap: s, Body: b})
}

// doctorBody is the doctor page's.
type doctorBody struct {
	Findings []findingView
	At       time.Time
	Err      string
}

// findingView is a finding, for the template.
type findingView struct{ Check, Status, Found string }

func (c *console) doctorPage(w http.ResponseWriter, r *http.Request) {
	fs, at, err := c.findings(r.Context())
	b := doctorBody{At: at}
	for _, f := range fs {
		b.Findings = append(b.Findings, findingView{f.check, f.status, f.found})
	}
	if err != nil {
		b.Err = c.scrub(message(err))
	}
	c.render(w, http.StatusOK, "doctor", page{Title: "Doctor", Nav: "doctor", Body: b})
}

// apiLocks is sqllock locks --json, from the latest read.
func (c *console) apiLocks(w http.ResponseWriter, r *http.Request) {
	s := c.hub.snapshot()
	if !c.apiReady(w, s) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	writeLocksJSON(w, s.Locks, true)
}

// apiRuns is sqllock runs --json [--limit N] [JOB]: every job's from the
// latest read (N at most --attempts), a job's from its page's read (N at
// most 200).
func (c *console) apiRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	job := q.Get("job")
	limit := c.opts.attempts
	if job != "" {
		limit = jobPageAttempts
		if err := sqllock.ValidateName(job); err != nil {
			apiError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > limit {
			apiError(w, http.StatusBadRequest, fmt.Sprintf("limit=%q: want 1 to %d", v, limit))
			return
		}
		limit = n
	}
	s := c.hub.snapshot()
	if !c.apiReady(w, s) {
		return
	}
	if c.ledger == nil {
		apiError(w, http.StatusNotFound, "this database has no run ledger")
		return
	}
	v := s.Runs
	if job != "" {
		if _, ok := s.job(job); !ok {
			apiError(w, http.StatusNotFound, fmt.Sprintf("no job %q", job))
			return
		}
		var err error
		if v, err = c.jobView(r.Context(), s, job); err != nil {
			apiError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
	}
	v.Runs = v.Runs[:min(limit, len(v.Runs))]
	v.Missed = v.Missed[max(len(v.Missed)-limit, 0):]
	w.Header().Set("Content-Type", "application/json")
	v.writeJSON(w, true)
}

// apiReady answers 503 while no read has succeeded.
func (c *console) apiReady(w http.ResponseWriter, s *snapshot) bool {
	if s.Reads > 0 {
		return true
	}
	w.Header().Set("Retry-After", "2")
	apiError(w, http.StatusServiceUnavailable, "the database has not been read yet: "+s.Err)
	return false
}

// apiError answers {"error": msg}.
func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, "{\"error\": %s}\n", strconv.Quote(msg))
}

// events streams a server-sent event after each read of the database: the
// pages then fetch themselves again (from memory: no viewer makes the
// console read the database).
func (c *console) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	s, changed := c.hub.watch()
	for {
		if err := rc.SetWriteDeadline(time.Now().Add(10 * time.Second)); err != nil {
			return
		}
		state := "ok"
		if s.Err != "" {
			state = "down"
		}
		if _, err := fmt.Fprintf(w, "id: %d\nevent: read\ndata: %s\n\n", s.Seq, state); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		// The stream lives longer than the server's write timeout: no
		// deadline while it waits.
		if err := rc.SetWriteDeadline(time.Time{}); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		}
		s, changed = c.hub.watch()
	}
}
