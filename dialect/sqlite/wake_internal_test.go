//go:build linux || darwin

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A socket left by a process that ended without removing it is removed by
// the next ring, which still reaches the live sockets beside it.
func TestWakeRemovesStaleSockets(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "locks.db")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := file + wakeSuffix
	live, err := bind(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer live.close()
	dead, err := bind(dir)
	if err != nil {
		t.Fatal(err)
	}
	dead.conn.Close() // a crash: the file stays
	if _, err := os.Stat(dead.path); err != nil {
		t.Fatalf("the dead socket's file: %v", err)
	}
	send(dir, "stale")
	if _, err := os.Stat(dead.path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dead socket's file after a ring: %v, want it removed", err)
	}
	got := make(chan string, 1)
	go func() { _ = live.read(func(name string) { got <- name }) }()
	select {
	case name := <-got:
		if name != "stale" {
			t.Fatalf("the live socket got %q, want %q", name, "stale")
		}
	case <-t.Context().Done():
		t.Fatal("never: the ring at the live socket")
	}
}

// The wake-up directory and the sockets get the database file's
// permissions, the directory with search permission where the file is
// readable, whatever the umask.
func TestWakePermissions(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "locks.db")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o660); err != nil {
		t.Fatal(err)
	}
	s, err := bind(file + wakeSuffix)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	for path, want := range map[string]os.FileMode{file + wakeSuffix: 0o770, s.path: 0o660} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", filepath.Base(path), got, want)
		}
	}
	s.close()
	if _, err := os.Stat(s.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket's file after close: %v, want it removed", err)
	}
}

// records is a slog handler that sends each record's message on a channel.
type records chan string

func (r records) Enabled(context.Context, slog.Level) bool { return true }
func (r records) Handle(_ context.Context, rec slog.Record) error {
	select {
	case r <- rec.Message:
	default:
	}
	return nil
}
func (r records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r records) WithGroup(string) slog.Handler      { return r }

// subscriber records what a notifier tells it.
type subscriber struct {
	ready chan struct{}
	lost  chan error
}

func (s *subscriber) Ready() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}
func (s *subscriber) Released(string) {}
func (s *subscriber) Lost(err error) {
	select {
	case s.lost <- err:
	default:
	}
}

// Where no socket can be bound — the directory's name taken by a file, an
// in-memory database — a subscription never listens, and the reason is
// logged at debug level, never reported as a lost connection: waiters
// poll.
func TestWakeFallsBackToPolling(t *testing.T) {
	t.Parallel()
	blocked := filepath.Join(t.TempDir(), "locks.db")
	if err := os.WriteFile(blocked+wakeSuffix, nil, 0o600); err != nil { // not a directory
		t.Fatal(err)
	}
	for name, dsn := range map[string]string{
		"blocked directory": dsn(blocked),
		"in memory":         ":memory:",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, err := sql.Open("sqlite", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			logs := make(records, 8)
			d, err := New(db, WithLogger(slog.New(logs)))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := d.Close(context.Background()); err != nil {
					t.Error(err)
				}
			}()
			s := &subscriber{ready: make(chan struct{}, 1), lost: make(chan error, 1)}
			sub := d.Catalogue().Notifier.Subscribe(s)
			defer sub.Unsubscribe()
			select {
			case msg := <-logs:
				if !strings.Contains(msg, "poll") {
					t.Fatalf("logged %q, want why waiters poll", msg)
				}
			case <-t.Context().Done():
				t.Fatal("never: the debug message")
			}
			if sub.Listening() {
				t.Error("Listening() = true without a socket")
			}
			select {
			case err := <-s.lost:
				t.Errorf("Lost(%v): the fallback is no failure", err)
			case <-s.ready:
				t.Error("Ready without a socket")
			default:
			}
		})
	}
}

// A ring of a database without a file, or before any process waited (no
// directory), sends nothing and creates nothing.
func TestRingWithoutDirectory(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "locks.db")
	db, err := Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := New(db)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	d.wake.ring(ctx, "nobody")
	if _, err := os.Stat(file + wakeSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the wake-up directory after a ring nobody waited for: %v, want none", err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
