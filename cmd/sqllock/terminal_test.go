//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
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
