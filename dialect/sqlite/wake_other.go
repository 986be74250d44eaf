//go:build !linux && !darwin

package sqlite

import "errors"

// errNoSockets is why this system has no wake-ups: waiters poll.
var errNoSockets = errors.New("wake-ups need Unix datagram sockets, which this system lacks")

// socket is never bound here.
type socket struct{}

// bind reports that this system has no wake-up sockets.
func bind(string) (*socket, error) { return nil, errNoSockets }

func (*socket) read(func(string)) error { return errNoSockets }

func (*socket) close() {}

// send does nothing: no process listens.
func send(string, string) {}
