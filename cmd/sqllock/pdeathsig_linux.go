package main

import "syscall"

// setPdeathsig has the kernel kill the child with SIGKILL when the thread
// that starts it ends.
func setPdeathsig(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }
