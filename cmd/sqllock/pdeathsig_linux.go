package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// setPdeathsig has the kernel kill the child with SIGKILL when the thread
// that starts it ends.
func setPdeathsig(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }

// becomeSubreaper makes the orphans of the process's descendants its own
// children (PR_SET_CHILD_SUBREAPER), rather than init's.
func becomeSubreaper() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }
