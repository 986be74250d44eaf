//go:build !linux

package main

import "syscall"

// setPdeathsig does nothing: only Linux ties a child to its parent's life.
// The supervisor's pipe to the wrapper still ends the job when the wrapper
// dies.
func setPdeathsig(*syscall.SysProcAttr) {}

// becomeSubreaper does nothing: only Linux has child subreapers. The
// supervisor then waits for init to reap the job's orphans.
func becomeSubreaper() {}
