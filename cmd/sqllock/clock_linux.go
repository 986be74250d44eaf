package main

import "golang.org/x/sys/unix"

// clockNow reads the clock that the supervisor and the wrapper share to
// state the lease's trust deadline to each other, in nanoseconds: Linux's
// CLOCK_BOOTTIME, which no one can set and which goes on while the machine
// sleeps, as the lease's expiry in the database does.
func clockNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	}
	return ts.Nano()
}
