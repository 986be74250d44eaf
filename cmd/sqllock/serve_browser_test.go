package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/ledger"
)

// chromium returns the path of a headless-capable Chromium, skipping the
// test without one (failing it under CI, whose test script installs
// Debian's chromium).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium: scripts/test.sh installs it (Debian: apt-get install chromium)")
	}
	t.Skip("no chromium (Debian: apt-get install chromium): the console's browser test skips")
	return ""
}

// The console in a real browser (headless Chromium): every page renders
// with data, a lock taken by another process appears without a reload, the
// keyboard reaches the break action, which is refused with a wrong token
// and breaks the lock with the right one. With SQLLOCK_CONSOLE_SCREENSHOTS
// set to a directory, it saves the PNGs of docs/console.md there.
func TestServeInBrowser(t *testing.T) {
	if os.Getenv("SQLLOCK_TEST_BROWSER") == "" {
		// Chromium's processes load every core: beside other tests, their
		// leases starve. make test runs this test last, alone.
		t.Skip("set SQLLOCK_TEST_BROWSER=1 to run (make test runs it alone, after the other tests)")
	}
	path := chromium(t)
	dir := t.TempDir()
	dsn := "sqlite:" + filepath.Join(dir, "locks.db")
	db, err := sqlite.Open(filepath.Join(dir, "locks.db"))
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
	b := backend{kind: "sqlite", dsn: dsn, d: d}
	seedBrowserData(t, b)
	s := serve(t, dsn, "--allow-writes", "--token-file", tokenFile(t))

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path),
		chromedp.Flag("headless", "new"), chromedp.NoSandbox, chromedp.WindowSize(1280, 900))
	actx, cancel := chromedp.NewExecAllocator(ctxT(t), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	shots := os.Getenv("SQLLOCK_CONSOLE_SCREENSHOTS")
	shoot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			if shots == "" {
				return nil
			}
			png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG; less is JPEG
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644)
		})
	}
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	// The page's text, read in one step: a live update may swap the
	// content between two steps.
	text := func() string { return eval(`document.getElementById("content").innerText`) }
	for _, p := range []struct{ path, want, shot string }{
		{"/", "locks held", "overview"},
		{"/locks", "report/daily", "locks"},
		{"/elections", "http://10.0.0.7:8080", "elections"},
		{"/jobs", "nightly", "jobs"},
		{"/jobs/nightly", "disk full", "job"},
		{"/doctor", "schema", "doctor"},
	} {
		run("GET "+p.path, chromedp.Navigate(s.url+p.path), chromedp.WaitVisible("main#content"))
		if got := text(); !strings.Contains(got, p.want) {
			t.Errorf("%s in Chromium lacks %q:\n%s", p.path, p.want, got)
		}
		if p.path == "/jobs" {
			if eval(`String(document.querySelectorAll("svg.timeline rect.bar").length)`) == "0" {
				t.Errorf("the jobs page's timelines have no bars")
			}
		}
		run("screenshot", shoot(p.shot))
	}

	// A live update: another process takes a lock while the page shows.
	run("GET /locks", chromedp.Navigate(s.url+"/locks"), chromedp.WaitVisible("main#content"))
	h := b.hold(t, "taken/elsewhere", "--ttl", "3") // renewed every second: it learns of the break soon
	tok := h.waitToken(t)
	run("waiting for the new lock", chromedp.WaitVisible(`tr[data-lock="taken/elsewhere"]`))
	if eval(`document.body.dataset.updates || "0"`) == "0" {
		t.Errorf("the lock appeared without a live update: was the page reloaded?")
	}

	// The break action, by keyboard: a wrong token is refused, the right
	// one breaks the lock.
	breakWith := func(secret string) string {
		run("break with a token",
			chromedp.Navigate(s.url+"/locks/taken/elsewhere"),
			chromedp.WaitVisible("#secret"),
			chromedp.Focus("#secret"),
			chromedp.KeyEvent(secret),
			chromedp.KeyEvent(kb.Tab), // to the button
			chromedp.KeyEvent(kb.Enter),
			chromedp.WaitVisible("p.message"))
		return text()
	}
	if got := breakWith("not-the-secret-0123456789"); !strings.Contains(got, "Refused") {
		t.Errorf("a wrong token: %s", got)
	}
	select {
	case <-h.done:
		t.Fatal("the refused break ended the holder")
	default:
	}
	if got := breakWith(testSecret); !strings.Contains(got, "Broke lock") || !strings.Contains(got, fmt.Sprint(tok)) {
		t.Errorf("the right token: %s", got)
	}
	run("screenshot", shoot("broken"))
	if code := h.wait(); code != exitLost {
		t.Errorf("the broken holder exited %d, want %d (lock lost)", code, exitLost)
	}
}

// seedBrowserData fills b with what the screenshots show: jobs that
// succeed, fail and run, a lock, a semaphore's holders, a leader.
func seedBrowserData(t *testing.T, b backend) {
	t.Helper()
	l, err := ledger.New(b.d, ledger.Options{Owner: "worker-1"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		for _, job := range []string{"nightly", "billing-export", "cache-warm"} {
			fail := (job == "nightly" && i%4 == 3) || (job == "billing-export" && i >= 10)
			_, err := l.Run(ctxT(t), job, ledger.Key(fmt.Sprintf("2026-01-%02d", i+1)), func(context.Context, *ledger.Run) error {
				if fail {
					return fmt.Errorf("exit status 1: disk full on /var/spool")
				}
				return nil
			})
			if (err != nil) != fail {
				t.Fatal(err)
			}
		}
	}
	b.hold(t, "report/daily").waitToken(t)
	b.hold(t, "uploads", "--max", "3").waitToken(t)
	b.hold(t, "uploads", "--max", "3").waitToken(t)
	c := b.cmd(t, "elect", "--value", "http://10.0.0.7:8080", "scheduler-leader", "--", "sh", "-c", "echo elected; read line || true")
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); c.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "elected\n" {
		t.Fatalf("sqllock elect printed %q, %v", line, err)
	}
}
