package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/ledger"
)

// authorize checks an action's request: writes allowed, same origin, a
// token of --token-file (the form's field "secret", or an Authorization:
// Bearer header). It returns the token's label, or answers 403 itself and
// returns false. Every refusal is logged.
func (c *console) authorize(w http.ResponseWriter, r *http.Request, action string) (string, bool) {
	refuse := func(why string) (string, bool) {
		c.log.Warn("sqllock serve: action refused", "action", action, "why", why, "from", r.RemoteAddr)
		c.audit.refusal()
		c.fail(w, r, http.StatusForbidden, "Refused", "The console refused to "+action+": "+why+".")
		return "", false
	}
	if !c.opts.allowWrites {
		return refuse("actions are off (sqllock serve --allow-writes --token-file FILE turns them on)")
	}
	if !sameOrigin(r) {
		return refuse("the request came from another site")
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		return refuse("the form could not be read")
	}
	secret := r.PostForm.Get("secret")
	if h, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && secret == "" {
		secret = strings.TrimSpace(h)
	}
	if secret == "" {
		return refuse("no token given")
	}
	label, ok := c.tokenLabel(secret)
	if !ok {
		return refuse("the token is not one of --token-file's")
	}
	return label, true
}

// tokenLabel returns the label of the token secret, comparing it with every
// token in constant time (hashes of equal length: no length leaks either).
func (c *console) tokenLabel(secret string) (string, bool) {
	given := sha256.Sum256([]byte(secret))
	label, found := "", 0
	for _, t := range c.opts.tokens {
		want := sha256.Sum256(t.secret)
		if subtle.ConstantTimeCompare(given[:], want[:]) == 1 {
			label, found = t.label, 1
		}
	}
	return label, found == 1
}

// sameOrigin reports whether r comes from a page of this console: its Origin
// (sent by browsers with every POST) names the host it was sent to, or,
// without Origin, Sec-Fetch-Site says same-origin. A request with neither
// comes from no browser (curl, a script), which no other site can make a
// browser send.
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host && (u.Scheme == "http" || u.Scheme == "https")
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" {
		return s == "same-origin"
	}
	return true
}

// breakLock breaks a lock of the lock table as sqllock unlock does: the
// form names the lock and the token the operator saw, and the lock is
// broken only if that token still holds it.
func (c *console) breakLock(w http.ResponseWriter, r *http.Request) {
	label, ok := c.authorize(w, r, "break the lock")
	if !ok {
		return
	}
	name := r.PostForm.Get("name")
	token, terr := strconv.ParseInt(r.PostForm.Get("token"), 10, 64)
	if err := sqllock.ValidateName(name); err != nil || terr != nil {
		c.fail(w, r, http.StatusBadRequest, "Bad request", "The form needs a lock name and the token it was seen with.")
		return
	}
	broken, ok, err := c.locks.BreakToken(r.Context(), name, token)
	switch {
	case err != nil:
		c.fail(w, r, http.StatusServiceUnavailable, "Database unavailable", c.scrub(message(err)))
		return
	case !ok && broken.Token == 0:
		c.fail(w, r, http.StatusConflict, "Not held", fmt.Sprintf("Lock %q is not held any more: nothing was broken.", name))
		return
	case !ok:
		c.fail(w, r, http.StatusConflict, "Changed hands", fmt.Sprintf("Lock %q is now %s, not token %d as confirmed: nothing was broken.", name, describeHolder(broken), token))
		return
	}
	c.log.Warn("sqllock serve: lock broken", "name", name, "owner", broken.Owner, "token", broken.Token,
		"confirmed_token", token, "by", label, "from", r.RemoteAddr)
	c.hub.refreshSoon()
	text := fmt.Sprintf("Broke lock %q, %s; the next holder gets a larger token.", name, describeHolder(broken))
	if broken.Holds > 0 {
		text += fmt.Sprintf(" The old holder learns it at its next renewal (at the latest in %v) and may run until then.", broken.ExpiresIn.Round(time.Second))
	}
	c.render(w, http.StatusOK, "message", page{Title: "Lock broken", Body: notice{Heading: "Lock broken", Text: text, Back: "Back to the locks", BackTo: "/locks"}, Static: true})
}

// askRelease asks the holder of a lock of the lock table to release it,
// as sqllock unlock --ask does: nothing is broken. The form names the lock
// and, optionally, the reason the holder is told.
func (c *console) askRelease(w http.ResponseWriter, r *http.Request) {
	label, ok := c.authorize(w, r, "ask for the lock")
	if !ok {
		return
	}
	name, reason := r.PostForm.Get("name"), strings.TrimSpace(r.PostForm.Get("reason"))
	if reason == "" {
		reason = "asked by " + label + " on the sqllock console"
	}
	if sqllock.ValidateName(name) != nil || sqllock.ValidateValue(reason) != nil {
		c.fail(w, r, http.StatusBadRequest, "Bad request", "The form needs a lock name, and a reason of valid UTF-8 without NUL bytes, at most 64 KiB.")
		return
	}
	asked, err := c.locks.RequestRelease(r.Context(), name, reason)
	switch {
	case err != nil:
		c.fail(w, r, http.StatusServiceUnavailable, "Database unavailable", c.scrub(message(err)))
		return
	case !asked:
		c.fail(w, r, http.StatusConflict, "Not held", fmt.Sprintf("Lock %q is not held: nobody was asked.", name))
		return
	}
	c.audit.count("asked")
	c.log.Info("sqllock serve: release requested", "name", name, "reason", reason, "by", label, "from", r.RemoteAddr)
	text := fmt.Sprintf("Asked the holder of lock %q to release it (%q). It learns of it at its next renewal, within a third of its TTL; a sqllock run holder then sends its command its --on-revoke signal. Nothing was broken.", name, reason)
	c.render(w, http.StatusOK, "message", page{Title: "Release requested", Body: notice{Heading: "Release requested", Text: text, Back: "Back to the lock", BackTo: "/locks/" + pathEscape(name)}, Static: true})
}

// jobActions are the run ledger's operations on a job the console offers.
var jobActions = map[string]string{"pause": "paused", "resume": "resumed", "trigger": "triggered", "forget": "forgotten",
	"backfill": "backfill requested"}

// jobAction pauses, resumes, triggers or forgets a job, or asks its
// replicas for a backfill (sqllock runs pause|resume|trigger|forget JOB,
// runs backfill JOB --from --to). Forgetting asks for the job's name
// again (confirm), and deletes its attempts too only when asked
// (attempts=on); a backfill takes from and to (RFC 3339).
func (c *console) jobAction(w http.ResponseWriter, r *http.Request) {
	op := r.URL.Query().Get("op")
	if _, known := jobActions[op]; !known {
		c.fail(w, r, http.StatusBadRequest, "Bad request", fmt.Sprintf("op=%q: want pause, resume, trigger, forget or backfill.", op))
		return
	}
	label, ok := c.authorize(w, r, op+" the job")
	if !ok {
		return
	}
	job := r.PostForm.Get("job")
	if err := sqllock.ValidateName(job); err != nil || c.ledger == nil {
		c.fail(w, r, http.StatusBadRequest, "Bad request", "The form needs a job of the run ledger.")
		return
	}
	var (
		text string
		err  error
	)
	switch op {
	case "pause", "resume":
		fn, done := c.ledger.Pause, "paused: its replicas run none of its occurrences, and none counts as missed, until it is resumed"
		if op == "resume" {
			fn, done = c.ledger.Resume, "resumed: its next due occurrence runs"
		}
		var changed bool
		if changed, err = fn(r.Context(), job); err == nil {
			text = fmt.Sprintf("Job %q %s.", job, done)
			if !changed {
				text = fmt.Sprintf("Job %q was %s already.", job, jobActions[op])
			}
		}
	case "trigger":
		var key string
		if key, err = c.ledger.Trigger(r.Context(), job); err == nil {
			text = fmt.Sprintf("Manual occurrence %s of %q pending: the next sqllock run of the job runs it, once across replicas.", key, job)
		}
	case "backfill":
		var from, to time.Time
		from, err = time.Parse(time.RFC3339, strings.TrimSpace(r.PostForm.Get("from")))
		if err == nil {
			to, err = time.Parse(time.RFC3339, strings.TrimSpace(r.PostForm.Get("to")))
		}
		if err != nil {
			c.fail(w, r, http.StatusBadRequest, "Bad range", "A backfill needs from and to in RFC 3339, as 2026-11-30T00:00:00Z.")
			return
		}
		var n int
		n, err = c.ledger.RequestBackfill(r.Context(), job, from, to)
		switch {
		case errors.Is(err, sqllock.ErrInvalidOptions), errors.Is(err, ledger.ErrBackfillPending):
			c.fail(w, r, http.StatusConflict, "Backfill refused", c.scrub(message(err)))
			return
		case err == nil:
			text = fmt.Sprintf("Backfill of %d occurrences of %q asked for: the job's next replica to run an occurrence runs them, each once across replicas.", n, job)
		}
	case "forget":
		if r.PostForm.Get("confirm") != job {
			c.fail(w, r, http.StatusBadRequest, "Not confirmed", fmt.Sprintf("To forget job %q, type its name in the confirmation field.", job))
			return
		}
		attempts := r.PostForm.Get("attempts") == "on"
		var n int
		if n, err = c.ledger.Forget(r.Context(), job, attempts); err == nil {
			text = fmt.Sprintf("Job %q forgotten: its schedule, pause, pending manual occurrence and missed history are gone; its attempts stay.", job)
			if attempts {
				text = fmt.Sprintf("Job %q forgotten, with its %d attempts. A later run of it starts its history anew.", job, n)
			}
		}
	}
	switch {
	case errors.Is(err, ledger.ErrUnknownJob):
		c.fail(w, r, http.StatusNotFound, "No such job", fmt.Sprintf("The run ledger has no job %q.", job))
		return
	case err != nil:
		c.fail(w, r, http.StatusServiceUnavailable, "Database unavailable", c.scrub(message(err)))
		return
	}
	c.log.Warn("sqllock serve: job "+jobActions[op], "job", job, "by", label, "from", r.RemoteAddr)
	c.hub.refreshSoon()
	back, backTo := "Back to the job", "/jobs/"+pathEscape(job)
	if op == "forget" {
		back, backTo = "Back to the jobs", "/jobs"
	}
	c.render(w, http.StatusOK, "message", page{Title: "Job " + jobActions[op], Body: notice{Heading: "Job " + jobActions[op], Text: text, Back: back, BackTo: backTo}, Static: true})
}
