package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The job of `sqllock run` runs under a supervisor: sqllock itself,
// started again as "sqllock _supervise GRACE -- COMMAND [ARGS...]". The
// supervisor starts COMMAND in a process group of its own and passes on to
// that whole group the signals the wrapper (the sqllock run that holds the
// lock) asks for. The two talk over two pipes:
//
//   - fd 3, wrapper to supervisor: one byte per signal to send to the job's
//     process group. End of file means the wrapper is gone (exited, or
//     killed with SIGKILL, which no handler sees): the lock is no longer
//     renewed, so the supervisor sends SIGTERM to the group, then SIGKILL
//     after GRACE, and exits.
//   - fd 4, supervisor to wrapper: the job's process group ID, one line, once
//     the job runs, so that the wrapper can end the group itself should the
//     supervisor die.
//
// When COMMAND exits, the members of its group still running (processes it
// started in the background) get SIGTERM, then SIGKILL after GRACE, before
// the supervisor exits with COMMAND's status: the lock is released only
// after that, so no part of the job runs unlocked. On Linux COMMAND is also
// tied to the supervisor's life (Pdeathsig). A process that leaves the group
// (setsid, or a daemon that detaches) escapes all of this.
const superviseCommand = "_supervise"

// superviseMain is the supervisor's main. args are what follows
// "_supervise".
func superviseMain(args []string) int {
	if len(args) < 3 || args[1] != "--" {
		fmt.Fprintln(os.Stderr, "sqllock: _supervise is started by sqllock run")
		return exitUsage
	}
	grace, err := time.ParseDuration(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "sqllock: _supervise:", err)
		return exitUsage
	}
	argv := args[2:]
	ctl, report := os.NewFile(3, "control"), os.NewFile(4, "report")
	if ctl == nil || report == nil {
		fmt.Fprintln(os.Stderr, "sqllock: _supervise is started by sqllock run")
		return exitUsage
	}
	// The wrapper decides which signals reach the job; the supervisor only
	// must not die of them. Handlers (unlike ignored signals) do not pass
	// on to COMMAND.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		for range sigs {
		}
	}()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	onTerminal := isTerminal(os.Stdin) && inForeground(os.Stdin)
	if onTerminal {
		// The job's group takes the terminal, so that it can read from it
		// and Ctrl-C reaches it; only from a wrapper in the foreground (a
		// background `sqllock run ... &` leaves the terminal to the
		// shell's foreground job).
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, int(os.Stdin.Fd())
	}
	setPdeathsig(cmd.SysProcAttr)

	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the child ends, so
		// the thread stays this goroutine's until the child is reaped.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		fmt.Fprintf(os.Stderr, "sqllock: %s\n", startError(argv[0], err))
		return startStatus(err)
	}
	pgid := cmd.Process.Pid
	fmt.Fprintf(report, "%d\n", pgid)
	report.Close()

	// Signals to pass on, and the wrapper's end.
	relay := make(chan syscall.Signal)
	go func() {
		r := bufio.NewReader(ctl)
		for {
			b, err := r.ReadByte()
			if err != nil {
				close(relay)
				return
			}
			relay <- syscall.Signal(b)
		}
	}()

	var (
		status = -1 // COMMAND's, once it exited
		killC  <-chan time.Time
		pollC  <-chan time.Time // while COMMAND's leftovers are waited for
	)
	stop := func() {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		if killC == nil {
			killC = time.After(grace)
		}
	}
	for {
		select {
		case s, ok := <-relay:
			if !ok { // the wrapper is gone
				relay = nil
				stop()
				continue
			}
			_ = syscall.Kill(-pgid, s)
		case err := <-exited:
			status = exitStatus(err)
			if onTerminal {
				reclaimTerminal()
			}
			if groupGone(pgid) {
				return status
			}
			stop() // what COMMAND left running in the background
			poll := time.NewTicker(20 * time.Millisecond)
			defer poll.Stop()
			pollC = poll.C
		case <-killC:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			if status >= 0 {
				return status
			}
		case <-pollC:
			if groupGone(pgid) {
				return status
			}
		}
	}
}

// groupGone reports whether no process of the group pgid is left.
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// inForeground reports whether this process's group is the foreground
// group of the terminal f.
func inForeground(f *os.File) bool {
	pgrp, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == syscall.Getpgrp()
}

// reclaimTerminal makes the supervisor's own group the terminal's foreground
// group again, after the job's group had it.
func reclaimTerminal() {
	signal.Ignore(syscall.SIGTTOU) // a background group may not take the terminal otherwise
	_ = unix.IoctlSetPointerInt(int(os.Stdin.Fd()), unix.TIOCSPGRP, syscall.Getpgrp())
}

// startError describes why COMMAND could not start, as a shell would.
func startError(name string, err error) string {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		return fmt.Sprintf("%s: command not found", name)
	case errors.Is(err, os.ErrPermission):
		return fmt.Sprintf("%s: permission denied", name)
	}
	return fmt.Sprintf("cannot run %s: %v", name, err)
}

// startStatus is a shell's exit status for a command that could not start:
// 127 when it does not exist, 126 when it cannot be run.
func startStatus(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return 127
	}
	return 126
}

// job is the wrapper's side of a supervised command.
type job struct {
	cmd    *exec.Cmd
	ctl    *os.File      // signals to the supervisor
	known  chan struct{} // closed once the supervisor reported group or ended
	group  int           // the job's process group, 0 if never reported
	exited chan error    // the supervisor's end
}

// startJob starts argv under a supervisor with env added to sqllock's
// environment.
func startJob(argv []string, env []string, grace time.Duration) (*job, error) {
	// On Linux the running binary itself, even if a package upgrade
	// replaced or removed its file since sqllock started.
	exe := "/proc/self/exe"
	if runtime.GOOS != "linux" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding the sqllock executable to supervise %s: %w", argv[0], err)
		}
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	cmd := exec.Command(exe, append([]string{superviseCommand, grace.String(), "--"}, argv...)...)
	cmd.Args[0] = "sqllock"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	cmd.ExtraFiles = []*os.File{ctlR, repW}
	err = cmd.Start()
	ctlR.Close()
	repW.Close()
	if err != nil {
		ctlW.Close()
		repR.Close()
		return nil, fmt.Errorf("starting the supervisor of %s: %w", argv[0], err)
	}
	j := &job{cmd: cmd, ctl: ctlW, known: make(chan struct{}), exited: make(chan error, 1)}
	go func() {
		defer close(j.known)
		defer repR.Close()
		line, _ := bufio.NewReader(repR).ReadString('\n')
		if n, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && n > 1 {
			j.group = n
		}
	}()
	go func() { j.exited <- cmd.Wait() }()
	return j, nil
}

// signal asks the supervisor to send s to the job's process group.
func (j *job) signal(s syscall.Signal) {
	_, _ = j.ctl.Write([]byte{byte(s)})
}

// finish is called once the supervisor has exited with err: if it died of
// a signal before the job's group was gone, the wrapper kills the group
// itself. It returns the job's exit status.
func (j *job) finish(err error) int {
	j.ctl.Close()
	status := exitStatus(err)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			<-j.known // the supervisor is gone: its end of the pipe is closed
			if j.group > 0 && !groupGone(j.group) {
				_ = syscall.Kill(-j.group, syscall.SIGKILL)
			}
		}
	}
	return status
}
