package main

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The supervisor adopts the job's orphans (a child subreaper) and reaps
// them: after `kill -9` of sqllock, the job's group is stopped and nothing
// of it is left, not even a zombie that init would reap late, once
// sqllock's output has closed.
func TestSupervisorAdoptsOrphans(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		if b.kind == "sqlite" { // no database's part in this
			adoptsOrphans(t, b)
		}
	})
}

func adoptsOrphans(t *testing.T, b backend) {
	pidfile := filepath.Join(t.TempDir(), "orphan")
	c := b.cmd(t, "run", "orphans", "--", "sh", "-c",
		`(sleep 60 & echo $! > "$0"); echo ready; exec sleep 60`, pidfile)
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	if line, _ := r.ReadString('\n'); line != "ready\n" {
		_ = c.Process.Kill()
		t.Fatalf("run: %q, %v", line, c.Wait())
	}
	pid, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	orphan := strings.TrimSpace(string(pid))
	parent := procField(t, orphan, "PPid")
	if cmdline, _ := os.ReadFile("/proc/" + parent + "/cmdline"); !strings.Contains(string(cmdline), superviseCommand) {
		t.Errorf("the job's orphan %s has parent %s (%q), want the supervisor", orphan, parent, cmdline)
	}
	if err := c.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, r) // until the supervisor, the last writer, is gone
	_ = c.Wait()
	if _, err := os.Stat("/proc/" + orphan); err == nil {
		t.Errorf("the job's orphan %s is still there (%s) after sqllock's output closed", orphan, procField(t, orphan, "State"))
	}
}

// procField returns a field of /proc/PID/status, "" if there is none.
func procField(t *testing.T, pid, key string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
