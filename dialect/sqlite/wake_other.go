//go:build !linux && !darwin

package sqlite

import "errors"

// hasWakeups says whether this system has the sockets of the wake-ups: it
// has not, so the catalogue has no Notifier and waiters poll.
const hasWakeups = false

// errNoSockets is why this system has no wake-ups.
var errNoSockets = errors.New("wake-ups need Unix datagram sockets, which this system lacks")

// socket is never bound here.
type socket struct{}

// bind reports that this system has no wake-up sockets.
func bind(string) (*socket, error) { return nil, errNoSockets }

func (*socket) read(func(string)) error { return errNoSockets }

func (*socket) close() {}

// send does nothing: no process listens.
func send(string, string) {}
