package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/ledger"
)

// testSecret is the token of the tests' --token-file.
const testSecret = "operator-secret-0123456789"

// served is a running sqllock serve.
type served struct {
	url    string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{}
	err    error // of Wait, once done is closed
}

// serve starts sqllock serve on dsn on a free port, with flags, and returns
// once it listens. It is stopped (SIGTERM) at the end of the test, if the
// test has not stopped it.
func serve(t *testing.T, dsn string, flags ...string) *served {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--interval", "200ms"}, flags...)
	// Not the test's context, which ends before the cleanup that stops
	// the server with SIGTERM.
	s := &served{cmd: exec.Command(bin, args...), stderr: &lockedBuffer{}, done: make(chan struct{})}
	s.cmd.Env = append(os.Environ(), "SQLLOCK_DSN="+dsn)
	s.cmd.Stderr = s.stderr
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	go func() {
		io.Copy(io.Discard, out)
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() { s.stop(t) })
	_, rest, ok := strings.Cut(line, "http://")
	if err != nil || !ok {
		<-s.done
		t.Fatalf("sqllock serve printed %q (%v), then %v:\n%s", line, err, s.err, s.stderr.String())
	}
	s.url = "http://" + strings.Fields(rest)[0]
	s.url = strings.TrimSuffix(s.url, "/")
	return s
}

// stop sends SIGTERM and checks that serve exits 0 within the test's time.
func (s *served) stop(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(time.Minute):
		s.cmd.Process.Kill()
		<-s.done
	}
	if s.err != nil {
		t.Errorf("sqllock serve after SIGTERM: %v\n%s", s.err, s.stderr.String())
	}
}

// get fetches path and returns the status and body.
func (s *served) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(s.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// post posts form to path with the headers, and returns the status and
// body.
func (s *served) post(t *testing.T, path string, form url.Values, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// until fetches path until its body contains want, or fails the test at
// the test's deadline.
func (s *served) until(t *testing.T, path, want string) string {
	t.Helper()
	ctx := ctxT(t)
	for {
		code, body := s.get(t, path)
		if code == http.StatusOK && strings.Contains(body, want) {
			return body
		}
		select {
		case <-ctx.Done():
			t.Fatalf("GET %s never had %q; last (%d):\n%s", path, want, code, body)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// seedJobs records a succeeded job "nightly" and a failing job "broken"
// (two failed attempts) in b's run ledger.
func seedJobs(t *testing.T, b backend) {
	t.Helper()
	l, err := ledger.New(b.d, ledger.Options{Owner: "seeder"})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, *ledger.Run) error { return nil }
	boom := func(context.Context, *ledger.Run) error { return errors.New("boom: disk full") }
	for _, r := range []struct {
		job, key string
		fn       func(context.Context, *ledger.Run) error
	}{{"nightly", "k1", ok}, {"nightly", "k2", ok}, {"broken", "k1", boom}, {"broken", "k2", boom}} {
		if _, err := l.Run(ctxT(t), r.job, ledger.Key(r.key), r.fn); err != nil && r.fn == nil {
			t.Fatal(err)
		}
	}
}

// tokenFile writes a --token-file with testSecret for "alice".
func tokenFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("# the console's operators\nalice:"+testSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// sqllock serve on every database: each page with its data, the JSON API
// in the shapes of locks --json and runs --json, /metrics, the 400, 403 and
// 404 answers, breaking a lock with the token only, no password on any page
// or in the log, and a clean exit on SIGTERM.
func TestServe(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		seedJobs(t, b)
		// Renewed every 3 s: an ask reaches the holder within that.
		locks, err := sqllock.NewTable(b.d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 9 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		held, err := locks.TryAcquire(ctxT(t), "held/lock")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(context.Background())
		dsn, password := b.dsn, ""
		if b.kind == "postgres" && !b.pooled {
			// The test server trusts local connections: a password is
			// sent, and must show nowhere.
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			password = "hunter2-never-shown"
			u.User = url.UserPassword(u.User.Username(), password)
			dsn = u.String()
		}
		s := serve(t, dsn, "--allow-writes", "--token-file", tokenFile(t))
		pages := map[string]string{
			"/":                "locks held",
			"/locks":           "held/lock",
			"/locks/held/lock": "Break lock held/lock",
			"/elections":       "Elections",
			"/jobs":            `<svg class="timeline"`,
			"/jobs/broken":     "boom: disk full",
			"/jobs/nightly":    "succeeded",
			"/doctor":          "schema",
			"/metrics":         `sqllock_console_job_failing_streak{sqllock_job="broken"} 2`,
		}
		var shown strings.Builder
		for path, want := range pages {
			shown.WriteString(s.until(t, path, want))
		}
		for path, status := range map[string]int{
			"/jobs/no-such-job": 404, "/locks/no-such-lock": 404, "/nothing-here": 404,
			"/locks?kind=bogus": 400, "/api/runs?limit=x": 400, "/api/runs?job=broken&limit=0": 400,
		} {
			if code, body := s.get(t, path); code != status {
				t.Errorf("GET %s: %d, want %d:\n%.300s", path, code, status, body)
			}
		}
		// The JSON API: locks --json's and runs --json's shapes.
		_, body := s.get(t, "/api/locks")
		var rows []lockRow
		if err := json.Unmarshal([]byte(body), &rows); err != nil || len(rows) != 1 || rows[0].Name != "held/lock" || rows[0].Token != held.Token() {
			t.Errorf("/api/locks = %v (%v), want the lock held/lock with token %d", body, err, held.Token())
		}
		_, body = s.get(t, "/api/runs?job=broken")
		var runs runsView
		if err := json.Unmarshal([]byte(body), &runs); err != nil || len(runs.Runs) != 2 || !strings.Contains(runs.Runs[0].Error, "boom: disk full") {
			t.Errorf("/api/runs?job=broken = %v (%v), want its two failed attempts", body, err)
		}
		// Actions: refused without the token, with a wrong one, from
		// another site; done with the token from the same site.
		form := url.Values{"name": {"held/lock"}, "token": {fmt.Sprint(held.Token())}}
		same := map[string]string{"Origin": s.url}
		for _, c := range []struct {
			secret string
			header map[string]string
		}{{"", same}, {"wrong-secret-0123456789", same}, {testSecret, map[string]string{"Origin": "http://evil.example"}}} {
			f := url.Values{"secret": {c.secret}}
			for k, v := range form {
				f[k] = v
			}
			if code, body := s.post(t, "/actions/break", f, c.header); code != http.StatusForbidden {
				t.Errorf("break with secret %q and %v: %d, want 403:\n%.300s", c.secret, c.header, code, body)
			}
		}
		select {
		case <-held.Done():
			t.Fatal("a refused break broke the lock")
		default:
		}
		// Asking breaks nothing: the holder learns of it, and keeps the
		// lock.
		ask := url.Values{"name": {"held/lock"}, "reason": {"deploy v2"}, "secret": {testSecret}}
		if code, body := s.post(t, "/actions/ask", ask, same); code != http.StatusOK || !strings.Contains(body, "Nothing was broken") {
			t.Errorf("ask with the token: %d:\n%.500s", code, body)
		}
		<-held.Revoked()
		if held.RevokeReason() != "deploy v2" || held.Context().Err() != nil {
			t.Errorf("the asked holder: reason %q, context %v; want deploy v2 and still held", held.RevokeReason(), held.Context().Err())
		}
		ask.Set("name", "free/lock")
		if code, _ := s.post(t, "/actions/ask", ask, same); code != http.StatusConflict {
			t.Errorf("ask of a free lock: %d, want 409", code)
		}
		form.Set("secret", testSecret)
		if code, body := s.post(t, "/actions/break", form, same); code != http.StatusOK || !strings.Contains(body, "Broke lock") {
			t.Errorf("break with the token: %d:\n%.500s", code, body)
		}
		s.until(t, "/locks", "No lock is held")
		_, metrics := s.get(t, "/metrics")
		for _, want := range []string{`sqllock_console_actions_total{sqllock_action="broken"} 1`, `sqllock_console_actions_total{sqllock_action="asked"} 1`, "sqllock_console_actions_refused_total 3"} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		s.stop(t)
		log := s.stderr.String()
		if !strings.Contains(log, "lock broken") || !strings.Contains(log, "by=alice") {
			t.Errorf("the log does not name the break and who did it:\n%s", log)
		}
		if password != "" && strings.Contains(shown.String()+log, password) {
			t.Errorf("the DSN's password shows on a page or in the log")
		}
	})
}

// Without --allow-writes, no page offers an action and every action is
// refused; --allow-writes without --token-file, or a token file others can
// read, is a usage error.
func TestServeReadOnly(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "locks.db")
	s := serve(t, dsn)
	if _, body := s.until(t, "/", "read-only"), ""; strings.Contains(body, "<form") {
		t.Errorf("a read-only page has a form")
	}
	if code, _ := s.post(t, "/actions/break", url.Values{"name": {"x"}, "token": {"1"}, "secret": {testSecret}}, nil); code != http.StatusForbidden {
		t.Errorf("a break without --allow-writes: %d, want 403", code)
	}
	loose := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(loose, []byte("alice:"+testSecret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--allow-writes"}, {"--token-file", loose}, {"--allow-writes", "--token-file", loose}} {
		c := exec.CommandContext(ctxT(t), bin, append([]string{"serve", "--dsn", dsn}, args...)...)
		out, err := c.CombinedOutput()
		if exitStatus(err) != exitUsage {
			t.Errorf("serve %q: %v, want exit %d:\n%s", args, err, exitUsage, out)
		}
	}
}

// The DSN's passwords, in each form, are scrubbed from messages.
func TestServeScrub(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://u:s3cret-pw@db:5432/app",
		"host=db user=u password=s3cret-pw dbname=app",
		"host=db user=u password='s3cret-pw' dbname=app",
		"mysql://u:s3cret-pw@db:3306/app",
		"u:s3cret-pw@tcp(db:3306)/app",
	} {
		c := &console{t: &target{dsn: redact(dsn)}, rawDSN: dsn, secrets: passwords(dsn)}
		if got := c.scrub("failed: " + dsn + " said s3cret-pw"); strings.Contains(got, "s3cret-pw") {
			t.Errorf("scrub with %q: %q", dsn, got)
		}
	}
}

// A role that may only read sqllock's tables (docs/console.md's GRANTs)
// is enough to view: every page, the API and /metrics answer 200 with
// data, and the database-down banner never shows.
func TestServeAsViewer(t *testing.T) {
	eachServer(t, func(t *testing.T, b backend) {
		seedJobs(t, b)
		locks, err := sqllock.NewTable(b.d, sqllock.TableOptions{})
		if err != nil {
			t.Fatal(err)
		}
		held, err := locks.TryAcquire(ctxT(t), "viewed/lock")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(context.Background())
		s := serve(t, b.as(t, dbtest.Viewer).dsn)
		s.until(t, "/locks", "viewed/lock")
		for _, path := range []string{"/", "/locks", "/locks/viewed/lock", "/elections", "/jobs", "/jobs/nightly", "/doctor", "/api/locks", "/api/runs", "/metrics"} {
			code, body := s.get(t, path)
			if code != http.StatusOK {
				t.Errorf("GET %s as a viewer: %d\n%s", path, code, body)
			}
			if strings.Contains(body, "cannot read the database") {
				t.Errorf("GET %s as a viewer shows the database-down banner", path)
			}
		}
	})
}

// The job actions round-trip with the token: pause, resume, run now and
// forget (which asks for the job's name again), each logged with who did
// it; an unknown job is a 404, an unknown action a 400.
func TestServeJobActions(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "locks.db")
	dsn := "sqlite:" + path
	b := backend{kind: "sqlite", dsn: dsn}
	if out, err := b.cmd(t, "migrate", "up").CombinedOutput(); err != nil {
		t.Fatalf("migrate up: %v\n%s", err, out)
	}
	if out, err := b.cmd(t, "run", "--every", "1h", "hourly", "--", "true").CombinedOutput(); err != nil {
		t.Fatalf("run --every 1h: %v\n%s", err, out)
	}
	s := serve(t, dsn, "--allow-writes", "--token-file", tokenFile(t))
	s.until(t, "/jobs/hourly", "Forget hourly")
	same := map[string]string{"Origin": s.url}
	act := func(op string, form url.Values) (int, string) {
		t.Helper()
		form.Set("secret", testSecret)
		return s.post(t, "/actions/job?op="+op, form, same)
	}
	job := func() url.Values { return url.Values{"job": {"hourly"}} }
	// hourAgo is the whole hour k hours from now (k < 0: before), an
	// occurrence of the hourly job.
	hourAgo := func(k int) string {
		return time.Now().UTC().Truncate(time.Hour).Add(time.Duration(k) * time.Hour).Format(time.RFC3339)
	}
	for _, c := range []struct {
		op   string
		form url.Values
		code int
		want string
	}{
		{"pause", job(), http.StatusOK, "paused: its replicas run none"},
		{"pause", job(), http.StatusOK, "was paused already"},
		{"resume", job(), http.StatusOK, "resumed"},
		{"trigger", job(), http.StatusOK, "pending"},
		{"backfill", url.Values{"job": {"hourly"}, "from": {hourAgo(-3)}, "to": {hourAgo(-1)}}, http.StatusOK, "Backfill of 3 occurrences"},
		{"backfill", url.Values{"job": {"hourly"}, "from": {hourAgo(-3)}, "to": {hourAgo(-1)}}, http.StatusConflict, "pending"},
		{"backfill", url.Values{"job": {"hourly"}, "from": {"yesterday"}, "to": {hourAgo(-1)}}, http.StatusBadRequest, "RFC 3339"},
		{"pause", url.Values{"job": {"nope"}}, http.StatusNotFound, "no job"},
		{"explode", job(), http.StatusBadRequest, "want pause, resume, trigger, forget or backfill"},
		{"forget", job(), http.StatusBadRequest, "type its name"},
		{"forget", url.Values{"job": {"hourly"}, "confirm": {"hourly"}}, http.StatusOK, "forgotten"},
		{"forget", url.Values{"job": {"hourly"}, "confirm": {"hourly"}}, http.StatusNotFound, "no job"},
	} {
		if code, body := act(c.op, c.form); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s %v: %d, want %d and %q:\n%.600s", c.op, c.form, code, c.code, c.want, body)
		}
	}
	// Each change is an observed event, counted once; the second pause
	// changed nothing.
	_, metrics := s.get(t, "/metrics")
	for _, want := range []string{`sqllock_console_actions_total{sqllock_action="paused"} 1`,
		`sqllock_console_actions_total{sqllock_action="resumed"} 1`, `sqllock_console_actions_total{sqllock_action="triggered"} 1`,
		`sqllock_console_actions_total{sqllock_action="forgotten"} 1`, `sqllock_console_actions_total{sqllock_action="broken"} 0`,
		`sqllock_console_actions_total{sqllock_action="backfill-requested"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	s.stop(t)
	log := s.stderr.String()
	for _, want := range []string{"job paused", "job resumed", "job triggered", "job forgotten", "job backfill requested", "by=alice"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
}
