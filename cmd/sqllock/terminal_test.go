//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: its master and the path of its slave.
func openPTY(t *testing.T) (*os.File, string) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), unix.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlockpt: %v", e)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	return master, fmt.Sprintf("/dev/pts/%d", n)
}

// inTerminal runs script with bash as the session leader of a new
// pseudo-terminal (job control on, as in an interactive shell), $BIN the
// binary under test and $DSN a lock database, and returns its output.
func inTerminal(t *testing.T, script string) string {
	t.Helper()
	master, slavePath := openPTY(t)
	slave, err := os.OpenFile(slavePath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close()
	c := exec.CommandContext(ctxT(t), "bash", "-c", "set -m\n"+script)
	c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	c.Env = append(os.Environ(), "BIN="+bin, "DSN=sqlite:"+filepath.Join(t.TempDir(), "l.db"), "DIR="+t.TempDir())
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var out strings.Builder
	sc := bufio.NewScanner(master)
	for sc.Scan() { // ends with EIO once the session's last holder of the slave exits
		out.WriteString(sc.Text() + "\n")
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("bash: %v\n%s", err, out.String())
	}
	return out.String()
}

// fields is the script's line "KEY a b": its two values.
func fields(t *testing.T, out, key string) (string, string) {
	t.Helper()
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == key {
			return f[1], f[2]
		}
	}
	t.Fatalf("no %s line in:\n%s", key, out)
	return "", ""
}

// A `sqllock run ... &` started from an interactive shell leaves the
// terminal to the shell: its job does not become the foreground group, so
// Ctrl-C still reaches the shell's foreground command. Run in the
// foreground, the job takes the terminal (to read from it and get Ctrl-C).
func TestRunTerminalForeground(t *testing.T) {
	t.Parallel()
	// /proc/PID/stat: field 5 is the process group, 8 the terminal's
	// foreground group.
	// The shell's foreground command (sh) has the terminal when the
	// background run starts (it waits for fg-ready), and checks that it
	// still has it once the background job runs.
	out := inTerminal(t, `
(while [ ! -e "$DIR/fg-ready" ]; do sleep 0.02; done
 exec "$BIN" run --dsn "$DSN" bg sh -c 'touch "$DIR/started"; sleep 60') &
sh -c 'touch "$DIR/fg-ready"
for i in $(seq 3000); do [ -e "$DIR/started" ] && break; sleep 0.02; done
[ -e "$DIR/started" ] || { echo "the background job never started"; exit 1; }
echo BACKGROUND $(awk "{print \$5, \$8}" /proc/$$/stat)'
kill -TERM %1; wait
"$BIN" run --dsn "$DSN" fg sh -c 'echo FOREGROUND $(awk "{print \$5, \$8}" /proc/$$/stat)'
`)
	shell, fg := fields(t, out, "BACKGROUND") // the foreground command's group
	if fg != shell {
		t.Errorf("a background run took the terminal: foreground group %s, the shell's foreground command's %s\n%s", fg, shell, out)
	}
	job, fg := fields(t, out, "FOREGROUND")
	if fg != job {
		t.Errorf("a foreground run's job is not the foreground group: %s, the job's %s\n%s", fg, job, out)
	}
}

// shell is an interactive bash on a pseudo-terminal of its own, driven as
// a person at a keyboard would: keys in, the screen's text out.
type shell struct {
	t      *testing.T
	master *os.File
	mu     sync.Mutex
	out    strings.Builder
	seen   int           // how much of out earlier expects consumed
	more   chan struct{} // signalled when out grows
	done   chan struct{} // closed once the terminal's output ended
}

// newShell starts bash -i on a new pseudo-terminal, with $BIN the binary
// under test and $DSN a lock database. Its prompt is the last exit
// status: "<0> ".
func newShell(t *testing.T) *shell {
	t.Helper()
	master, slavePath := openPTY(t)
	slave, err := os.OpenFile(slavePath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close()
	c := exec.Command("bash", "--norc", "--noprofile", "-i")
	c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	c.Env = append(os.Environ(), "BIN="+bin, "DSN=sqlite:"+filepath.Join(t.TempDir(), "l.db"), "DIR="+t.TempDir(), "PS1=<$?> ", "TERM=dumb")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	s := &shell{t: t, master: master, more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			s.mu.Lock()
			s.out.Write(buf[:n])
			s.mu.Unlock()
			select {
			case s.more <- struct{}{}:
			default:
			}
			if err != nil { // EIO once the session's last holder of the slave exits
				return
			}
		}
	}()
	t.Cleanup(func() {
		// Everything of the session, jobs and their supervisors too: the
		// terminal's output ends once no process holds its slave.
		_ = exec.Command("pkill", "-KILL", "-s", strconv.Itoa(c.Process.Pid)).Run()
		_ = c.Process.Kill()
		_ = c.Wait()
		select {
		case <-s.done:
		case <-time.After(time.Minute):
			t.Errorf("the terminal's output did not end a minute after its session was killed")
		}
		master.Close()
	})
	return s
}

// send types keys.
func (s *shell) send(keys string) {
	s.t.Helper()
	if _, err := s.master.WriteString(keys); err != nil {
		s.t.Fatal(err)
	}
}

// expect waits until the screen shows want after what earlier expects
// matched, and consumes it; the test fails if a minute passes first.
func (s *shell) expect(want string) {
	s.t.Helper()
	deadline := time.After(time.Minute)
	for {
		s.mu.Lock()
		text := s.out.String()
		i := strings.Index(text[s.seen:], want)
		if i >= 0 {
			s.seen += i + len(want)
		}
		s.mu.Unlock()
		if i >= 0 {
			return
		}
		select {
		case <-s.more:
		case <-s.done:
			s.t.Fatalf("the terminal closed before it showed %q:\n%s", want, text)
		case <-deadline:
			s.t.Fatalf("the terminal never showed %q:\n%s", want, text)
		}
	}
}

// Ctrl-Z on a foreground `sqllock run` stops the job and gives the shell
// its prompt, with the job listed as stopped and the lock still held; fg
// resumes the job in the foreground, where Ctrl-C ends it (130), and bg in
// the background. A stop that outlasts the lease's trust window ends the
// job: another run takes the lock, and the resumed run exits 76.
func TestRunJobControl(t *testing.T) {
	t.Parallel()
	s := newShell(t)
	s.send(`"$BIN" run --dsn "$DSN" jc -- sh -c 'echo RUN""NING; while read x; do echo GOT-$x; done'` + "\n")
	s.expect("RUNNING")
	s.send("\x1a") // Ctrl-Z
	s.expect("Stopped")
	s.send(`jobs; "$BIN" run -n --dsn "$DSN" jc true 2>/dev/null; echo BUSY=$? PROMPT-$((1+1))` + "\n")
	s.expect("BUSY=75 PROMPT-2")
	s.send("fg\n")
	s.send("ping\n") // read by the job once it has the terminal again
	s.expect("GOT-ping")
	s.send("\x03") // Ctrl-C
	s.expect("<130> ")

	// This job runs until it is told to end: it must still run when
	// Ctrl-Z comes, however slow the machine.
	s.send(`mkfifo "$DIR/end"; "$BIN" run --dsn "$DSN" jc -- sh -c 'echo BG""START; read x < "$DIR/end"; echo BG""DONE'` + "\n")
	s.expect("BGSTART")
	s.send("\x1a")
	s.expect("Stopped")
	s.send("bg\n")
	s.expect("' &") // bash's line for the job it resumed in the background
	s.send(`echo > "$DIR/end"` + "\n")
	s.expect("BGDONE")
	s.send("wait; echo STATUS=$?\n")
	s.expect("STATUS=0")

	s.send(`"$BIN" run --ttl 5 --dsn "$DSN" jc2 -- sh -c 'echo LONG""STOP; exec sleep 60'` + "\n")
	s.expect("LONGSTOP")
	s.send("\x1a")
	s.expect("Stopped")
	s.send(`"$BIN" run -w 60 --dsn "$DSN" jc2 -- echo TAKEN""OVER` + "\n")
	s.expect("TAKENOVER")
	s.send("fg; echo STATUS=$?\n")
	s.expect("STATUS=76")
}
