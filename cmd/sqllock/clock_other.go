//go:build unix && !linux

package main

import "golang.org/x/sys/unix"

// clockNow reads the clock that the supervisor and the wrapper share to
// state the lease's trust deadline to each other, in nanoseconds: the
// system's monotonic clock.
func clockNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
