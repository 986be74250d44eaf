package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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
// started again as "sqllock _supervise GRACE LEAD UNTIL -- COMMAND
// [ARGS...]". The supervisor starts COMMAND in a process group of its own
// and passes on to that whole group the signals the wrapper (the sqllock
// run that holds the lock) asks for. The two talk over two pipes:
//
//   - fd 3, wrapper to supervisor: one byte per signal to send to the job's
//     process group, or msgTrust and eight bytes (big-endian): the lease's
//     trust deadline, a clockNow reading. End of file means the wrapper is
//     gone (exited, or killed with SIGKILL, which no handler sees): the lock
//     is no longer renewed, so the supervisor sends SIGTERM to the group,
//     then SIGKILL after GRACE (or at the trust deadline, if sooner), and
//     exits.
//   - fd 4, supervisor to wrapper: the job's process group ID, one line, once
//     the job runs, so that the wrapper can end the group itself should the
//     supervisor die.
//
// The trust deadline is what keeps the job from running unlocked while the
// wrapper cannot act (stopped, swapped out, starved of CPU): UNTIL is the
// first, each renewal the wrapper hears of moves it on, and the supervisor
// stops the job's group on its own — SIGTERM LEAD before the deadline,
// SIGKILL at it — when no later one has come, and then exits with
// exitLost. UNTIL 0 means the lock has no lease (a pessimistic lock lives
// as long as its connection).
//
// When COMMAND exits, the members of its group still running (processes it
// started in the background) get SIGTERM, then SIGKILL after GRACE, before
// the supervisor exits with COMMAND's status: the lock is released only
// after that, so no part of the job runs unlocked. On Linux COMMAND is also
// tied to the supervisor's life (Pdeathsig), and the supervisor adopts the
// job's orphans (a child subreaper) to reap them at once. A process that leaves the group
// (setsid, or a daemon that detaches) escapes all of this.
//
// Job control: on a terminal that is the session's, a job that stops
// (Ctrl-Z, or reading the terminal from the background) stops the
// wrapper's group too — with the same signal, after taking the terminal
// back — so that the shell sees its job stopped; the supervisor itself
// keeps running, so that the trust deadline still holds. When the shell
// continues the group (fg, bg), the supervisor continues the job, giving
// it the terminal if the group is in the foreground.
const superviseCommand = "_supervise"

// msgTrust starts a trust-deadline message on the control pipe: not a
// signal number.
const msgTrust = 0xff

// jobEvent is what wait4 said of the job's process.
type jobEvent struct {
	stopped syscall.Signal // the signal that stopped it; 0 if it did not stop
	resumed bool           // continued
	status  int            // its exit status, once exited (stopped == 0 && !resumed)
}

// superviseMain is the supervisor's main. args are what follows
// "_supervise".
func superviseMain(args []string) int {
	if len(args) < 5 || args[3] != "--" {
		fmt.Fprintln(os.Stderr, "sqllock: _supervise is started by sqllock run")
		return exitUsage
	}
	grace, err := time.ParseDuration(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "sqllock: _supervise:", err)
		return exitUsage
	}
	lead, err := time.ParseDuration(args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "sqllock: _supervise:", err)
		return exitUsage
	}
	until, err := strconv.ParseInt(args[2], 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sqllock: _supervise:", err)
		return exitUsage
	}
	argv := args[4:]
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
	conts := make(chan os.Signal, 1)
	signal.Notify(conts, syscall.SIGCONT)
	go func() {
		for range sigs {
		}
	}()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	tty := controllingTerminal()
	if tty >= 0 && inForeground(tty) {
		// The job's group takes the terminal, so that it can read from it
		// and Ctrl-C and Ctrl-Z reach it; only from a wrapper in the
		// foreground (a background `sqllock run ... &` leaves the terminal
		// to the shell's foreground job).
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, tty
	}
	setPdeathsig(cmd.SysProcAttr)
	// The job's orphans become the supervisor's children, reaped at once:
	// a zombie left to init (which may reap late) would keep the group
	// alive, and sqllock's output open, after the job is gone.
	becomeSubreaper()

	started := make(chan error, 1)
	events := make(chan jobEvent, 4)
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
		waitJob(cmd.Process.Pid, events)
	}()
	if err := <-started; err != nil {
		fmt.Fprintf(os.Stderr, "sqllock: %s\n", startError(argv[0], err))
		return startStatus(err)
	}
	// COMMAND runs: from now on the supervisor stops the wrapper's group
	// (job control) without stopping itself, and takes the terminal back
	// from the background. Ignored here, after the exec, so that COMMAND
	// keeps the default actions.
	signal.Ignore(syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	pgid := cmd.Process.Pid
	fmt.Fprintf(report, "%d\n", pgid)
	report.Close()

	s := &supervisor{pgid: pgid, grace: grace, lead: lead, until: until, tty: tty, name: os.Getenv("SQLLOCK_NAME"), command: argv[0]}
	return s.loop(readControl(ctl), events, conts)
}

// control is one message from the wrapper.
type control struct {
	sig   syscall.Signal // a signal to pass on, or 0
	until int64          // a new trust deadline, when sig is 0
}

// readControl reads the wrapper's messages until the pipe ends, then closes
// the channel.
func readControl(ctl io.Reader) <-chan control {
	c := make(chan control)
	go func() {
		defer close(c)
		r := bufio.NewReader(ctl)
		for {
			b, err := r.ReadByte()
			if err != nil {
				return
			}
			if b != msgTrust {
				c <- control{sig: syscall.Signal(b)}
				continue
			}
			var buf [8]byte
			if _, err := io.ReadFull(r, buf[:]); err != nil {
				return
			}
			c <- control{until: int64(binary.BigEndian.Uint64(buf[:]))}
		}
	}()
	return c
}

// waitJob reports what becomes of the process pid, stops and continuations
// included, until it exits. It reaps the supervisor's other children too:
// the job's orphans, which a subreaper adopts.
func waitJob(pid int, events chan<- jobEvent) {
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, syscall.WUNTRACED|syscall.WCONTINUED, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			events <- jobEvent{status: exitFailure}
			return
		case wpid != pid: // an orphan of the job's, now reaped (or stopped)
			continue
		case ws.Stopped():
			events <- jobEvent{stopped: ws.StopSignal()}
		case ws.Continued():
			events <- jobEvent{resumed: true}
		case ws.Signaled():
			events <- jobEvent{status: 128 + int(ws.Signal())}
			return
		default:
			events <- jobEvent{status: ws.ExitStatus()}
			return
		}
	}
}

// reapOrphans reaps the supervisor's children that have exited (the job's
// orphans, once the job itself was reaped), without waiting.
func reapOrphans() {
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || wpid <= 0 {
			return
		}
	}
}

// supervisor is the state of superviseMain's loop.
type supervisor struct {
	pgid    int
	grace   time.Duration
	lead    time.Duration // SIGTERM this long before the trust deadline
	until   int64         // the trust deadline (clockNow); 0: none
	tty     int           // the session's terminal, -1 if none
	name    string        // the lock's, for messages
	command string

	status    int              // COMMAND's, once it exited; -1 before
	expired   bool             // the supervisor stopped the job at the trust deadline
	suspended bool             // the job is stopped and the wrapper's group with it
	stopped   bool             // the job's process is stopped
	killC     <-chan time.Time // SIGKILL after a SIGTERM
}

// loop runs the supervisor until the job's group is gone, and returns the
// supervisor's exit status.
func (s *supervisor) loop(ctl <-chan control, events <-chan jobEvent, conts <-chan os.Signal) int {
	s.status = -1
	var (
		pollC <-chan time.Time // while COMMAND's leftovers are waited for
		trust = time.NewTimer(time.Hour)
	)
	defer trust.Stop()
	s.arm(trust)
	for {
		select {
		case m, ok := <-ctl:
			ctl = s.control(ctl, m, ok)
			s.arm(trust)
		case <-trust.C:
			// A later deadline may be waiting in the pipe (the supervisor
			// itself was slow to get here): read what is there first.
			for drained := false; !drained && ctl != nil; {
				select {
				case m, ok := <-ctl:
					ctl = s.control(ctl, m, ok)
				default:
					drained = true
				}
			}
			s.checkTrust()
			s.arm(trust)
		case e := <-events:
			switch {
			case e.stopped != 0:
				s.stopped = true
				s.suspend(e.stopped)
			case e.resumed:
				s.stopped = false
			default:
				s.status = e.status
				s.reclaimTerminal()
				reapOrphans()
				if groupGone(s.pgid) {
					return s.exitCode()
				}
				s.stop() // what COMMAND left running in the background
				poll := time.NewTicker(20 * time.Millisecond)
				defer poll.Stop()
				pollC = poll.C
			}
		case <-conts:
			s.resume()
		case <-s.killC:
			_ = syscall.Kill(-s.pgid, syscall.SIGKILL)
			if s.status >= 0 {
				return s.exitCode()
			}
		case <-pollC:
			reapOrphans()
			if groupGone(s.pgid) {
				return s.exitCode()
			}
		}
	}
}

// control acts on a message from the wrapper (ok false: the pipe ended),
// and returns the channel to read on, nil once the wrapper is gone.
func (s *supervisor) control(ctl <-chan control, m control, ok bool) <-chan control {
	switch {
	case !ok: // the wrapper is gone
		s.stop()
		return nil
	case m.sig != 0:
		_ = syscall.Kill(-s.pgid, m.sig)
	default:
		s.until = m.until
	}
	return ctl
}

// exitCode is the supervisor's exit status: exitLost when it stopped the
// job at the trust deadline, COMMAND's otherwise.
func (s *supervisor) exitCode() int {
	if s.expired {
		return exitLost
	}
	return s.status
}

// stop sends SIGTERM to the job's group (and SIGCONT, should it be
// stopped), and SIGKILL after --grace, or at the trust deadline if sooner.
func (s *supervisor) stop() {
	_ = syscall.Kill(-s.pgid, syscall.SIGTERM)
	if s.stopped {
		_ = syscall.Kill(-s.pgid, syscall.SIGCONT)
	}
	if s.killC == nil {
		s.killC = time.After(s.grace)
	}
}

// arm sets t to fire at the next moment the trust deadline asks for
// something: SIGTERM at until-lead, SIGKILL at until.
func (s *supervisor) arm(t *time.Timer) {
	t.Stop()
	if s.until == 0 {
		return
	}
	at := s.until
	if !s.expired {
		at -= int64(s.lead)
	}
	t.Reset(time.Duration(at - clockNow()))
}

// checkTrust stops the job if the trust deadline is near (SIGTERM) or past
// (SIGKILL).
func (s *supervisor) checkTrust() {
	if s.until == 0 {
		return
	}
	now := clockNow()
	if !s.expired && now >= s.until-int64(s.lead) {
		s.expired = true
		left := max(time.Duration(s.until-now), 0).Round(time.Millisecond)
		fmt.Fprintf(os.Stderr, "sqllock: the lease of lock %q was not renewed in time (sqllock stopped or starved?); stopping %s before it can end (SIGTERM to its process group, SIGKILL in %v)\n", s.name, s.command, left)
		s.stop()
	}
	if s.expired && now >= s.until {
		_ = syscall.Kill(-s.pgid, syscall.SIGKILL)
		s.until = 0 // nothing more to do at a deadline
	}
}

// suspend passes a stop of the job on to the wrapper's group, for the
// shell's job control: on the session's terminal only, taking the terminal
// back first. The supervisor does not stop (it ignores the signal).
func (s *supervisor) suspend(sig syscall.Signal) {
	if s.tty < 0 || s.expired || s.status >= 0 {
		return
	}
	s.reclaimTerminal()
	if sig != syscall.SIGTTIN && sig != syscall.SIGTTOU {
		sig = syscall.SIGTSTP
	}
	s.suspended = true
	_ = syscall.Kill(0, sig)
}

// resume continues a job suspended with the wrapper's group, when the
// shell continues that group: in the foreground (it gets the terminal) if
// the group is there, else in the background.
func (s *supervisor) resume() {
	if !s.suspended {
		return
	}
	s.suspended = false
	if s.expired {
		return
	}
	if inForeground(s.tty) {
		_ = unix.IoctlSetPointerInt(s.tty, unix.TIOCSPGRP, s.pgid)
	}
	_ = syscall.Kill(-s.pgid, syscall.SIGCONT)
}

// reclaimTerminal makes the supervisor's own group the terminal's foreground
// group again, if the job's group has it.
func (s *supervisor) reclaimTerminal() {
	if s.tty < 0 {
		return
	}
	if pgrp, err := unix.IoctlGetInt(s.tty, unix.TIOCGPGRP); err == nil && pgrp == s.pgid {
		_ = unix.IoctlSetPointerInt(s.tty, unix.TIOCSPGRP, syscall.Getpgrp())
	}
}

// groupGone reports whether no process of the group pgid is left.
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// controllingTerminal returns the first of stdin, stdout and stderr that is
// this session's controlling terminal, or -1.
func controllingTerminal() int {
	for fd := range 3 {
		if _, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil {
			return fd
		}
	}
	return -1
}

// inForeground reports whether this process's group is the foreground
// group of the terminal tty.
func inForeground(tty int) bool {
	if tty < 0 {
		return false
	}
	pgrp, err := unix.IoctlGetInt(tty, unix.TIOCGPGRP)
	return err == nil && pgrp == syscall.Getpgrp()
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
	ctl    *os.File      // signals and trust deadlines to the supervisor
	known  chan struct{} // closed once the supervisor reported group or ended
	group  int           // the job's process group, 0 if never reported
	exited chan error    // the supervisor's end
	until  time.Time     // the last trust deadline told
}

// leadFor is how long before the trust deadline the supervisor sends SIGTERM
// to a job whose lease renewals it no longer hears of: --grace, but at most
// a third of the TTL, so that a lease renewed on time (every TTL/3) never
// gets there.
func leadFor(grace, ttl time.Duration) time.Duration {
	return min(grace, ttl/3)
}

// startJob starts argv under a supervisor with env added to sqllock's
// environment. until is the lease's trust deadline (zero: no lease), lead
// how long before it the supervisor stops the job if no later one comes.
func startJob(argv []string, env []string, grace, lead time.Duration, until time.Time) (*job, error) {
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
	cmd := exec.Command(exe, append([]string{superviseCommand, grace.String(), lead.String(),
		strconv.FormatInt(deadline(until), 10), "--"}, argv...)...)
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
	j := &job{cmd: cmd, ctl: ctlW, known: make(chan struct{}), exited: make(chan error, 1), until: until}
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

// deadline converts a trust deadline on this process's monotonic clock to
// a clockNow reading; 0 for the zero time.
func deadline(until time.Time) int64 {
	if until.IsZero() {
		return 0
	}
	return clockNow() + int64(time.Until(until))
}

// signal asks the supervisor to send s to the job's process group.
func (j *job) signal(s syscall.Signal) {
	_, _ = j.ctl.Write([]byte{byte(s)})
}

// trust tells the supervisor the lease's trust deadline, if it moved.
func (j *job) trust(until time.Time) {
	if until.IsZero() || !until.After(j.until) {
		return
	}
	j.until = until
	var msg [9]byte
	msg[0] = msgTrust
	binary.BigEndian.PutUint64(msg[1:], uint64(deadline(until)))
	_, _ = j.ctl.Write(msg[:])
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
