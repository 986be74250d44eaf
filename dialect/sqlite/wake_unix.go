//go:build linux || darwin

package sqlite

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// hasWakeups says whether this system has the sockets of the wake-ups.
const hasWakeups = true

// socketSuffix ends the name of every socket of the wake-up directory.
const socketSuffix = ".sock"

// socket is this process's bound socket in the wake-up directory.
type socket struct {
	conn *net.UnixConn
	path string
}

// bind creates the wake-up directory dir beside the database file, if it
// is missing, and binds a socket of a random name in it. The directory
// and the socket get the database file's permissions (the directory with
// search permission where the file is readable): whoever may write the
// database may wake its waiters. Sockets left by processes that ended
// without removing theirs are removed.
func bind(dir string) (*socket, error) {
	fi, err := os.Stat(strings.TrimSuffix(dir, wakeSuffix))
	if err != nil {
		return nil, err
	}
	perm := fi.Mode().Perm()
	dirPerm := perm | (perm&0o444)>>2
	switch err := os.Mkdir(dir, dirPerm); {
	case err == nil:
		if err := os.Chmod(dir, dirPerm); err != nil { // past the umask
			return nil, err
		}
	case !errors.Is(err, os.ErrExist):
		return nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	path := filepath.Join(dir, hex.EncodeToString(b[:])+socketSuffix)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	s := &socket{conn: conn, path: path}
	if err := os.Chmod(path, perm&0o666); err != nil {
		s.close()
		return nil, err
	}
	send(dir, "") // an empty datagram, which readers ignore, finds stale sockets
	return s, nil
}

// read calls released with each name the socket receives, until the socket
// is closed (it then returns nil) or fails.
func (s *socket) read(released func(name string)) error {
	buf := make([]byte, 1024) // names are at most sqllock.MaxNameLen bytes
	for {
		n, _, err := s.conn.ReadFromUnix(buf)
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		if n > 0 {
			released(string(buf[:n]))
		}
	}
}

// close closes the socket and removes its file.
func (s *socket) close() {
	s.conn.Close()
	os.Remove(s.path)
}

// send sends name to every socket of dir without waiting: a socket whose
// queue is full misses it. A socket nobody reads any more (its process
// ended without removing it) refuses it and is removed.
func send(dir, name string) {
	f, err := os.Open(dir)
	if err != nil {
		return // no directory: no process ever waited
	}
	names, _ := f.Readdirnames(-1)
	f.Close()
	if len(names) == 0 {
		return
	}
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return
	}
	defer syscall.Close(fd)
	msg := []byte(name)
	for _, n := range names {
		if !strings.HasSuffix(n, socketSuffix) {
			continue
		}
		path := filepath.Join(dir, n)
		if err := syscall.Sendto(fd, msg, syscall.MSG_DONTWAIT, &syscall.SockaddrUnix{Name: path}); err == syscall.ECONNREFUSED {
			os.Remove(path)
		}
	}
}
