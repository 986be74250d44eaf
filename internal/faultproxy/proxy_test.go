package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqllock/sqllock/internal/testutil"
)

// echoServer is a TCP server on 127.0.0.1:0 that writes back everything it reads.
type echoServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln, conns: make(map[net.Conn]struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				io.Copy(c, c)
				c.Close()
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(s.Close)
	return s
}

func (s *echoServer) Addr() string { return s.ln.Addr().String() }

// Close stops the server, closes its connections and waits for its goroutines.
func (s *echoServer) Close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// newTestProxy returns a proxy to target that is closed, and checked for
// leftover goroutines, when the test ends.
func newTestProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		if n := p.running.Load(); n != 0 {
			t.Errorf("%d proxy goroutines still running after Close", n)
		}
	})
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg to c and reads the echo back.
func roundTrip(t *testing.T, c net.Conn, msg []byte) {
	t.Helper()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo mismatch: got %q, want %q", got, msg)
	}
}

// waitFor polls cond until it holds, failing the test after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	testutil.Eventually(ctx, t, what, cond)
}

var errMismatch = errors.New("echoed data differs")

// echoRandom sends size random bytes through c in randomly sized writes while
// reading the echo concurrently, and checks that it matches. It may be called
// from any goroutine.
func echoRandom(c net.Conn, rng *rand.Rand, size int) error {
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	var sizes []int
	for n := 0; n < size; {
		k := min(1+rng.IntN(8<<10), size-n)
		sizes = append(sizes, k)
		n += k
	}
	werr := make(chan error, 1)
	go func() {
		off := 0
		for _, k := range sizes {
			if _, err := c.Write(data[off : off+k]); err != nil {
				werr <- err
				return
			}
			off += k
		}
		werr <- nil
	}()
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	got := make([]byte, size)
	_, rerr := io.ReadFull(c, got)
	if err := <-werr; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if rerr != nil {
		return fmt.Errorf("read: %w", rerr)
	}
	if i := firstDiff(got, data); i >= 0 {
		return fmt.Errorf("%w: first at byte %d of %d", errMismatch, i, size)
	}
	return nil
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func TestProxyPassthroughJitter(t *testing.T) {
	t.Parallel()
	p := newTestProxy(t, newEchoServer(t).Addr())
	p.SetLatency(time.Millisecond, 3*time.Millisecond)
	c := dial(t, p)
	if err := echoRandom(c, rand.New(rand.NewPCG(1, 2)), 1<<20); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.BytesUp != 1<<20 || s.BytesDown != 1<<20 || s.Accepted != 1 {
		t.Errorf("Stats() = %+v, want 1 MiB each way and 1 accepted", s)
	}
}

func TestProxyLatency(t *testing.T) {
	t.Parallel()
	p := newTestProxy(t, newEchoServer(t).Addr())
	c := dial(t, p)
	roundTrip(t, c, []byte("warm-up"))
	p.SetLatency(50*time.Millisecond, 0)
	start := time.Now()
	roundTrip(t, c, []byte("ping"))
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("round trip took %v with 50ms latency each way, want >= 100ms", d)
	}
	p.SetLatency(0, 0)
	roundTrip(t, c, []byte("no latency"))
}

func TestProxyStall(t *testing.T) {
	t.Parallel()
	p := newTestProxy(t, newEchoServer(t).Addr())
	old := dial(t, p)
	roundTrip(t, old, []byte("warm-up"))

	const stall = 200 * time.Millisecond
	start := time.Now()
	p.Stall(stall)
	// A connection made during the stall is accepted, but its bytes wait too.
	c := dial(t, p)
	var wg sync.WaitGroup
	for i, c := range []net.Conn{old, c} {
		wg.Go(func() {
			if err := echoRandom(c, rand.New(rand.NewPCG(3, uint64(i))), 64<<10); err != nil {
				t.Errorf("conn %d: %v", i, err)
			}
			if d := time.Since(start); d < stall {
				t.Errorf("data arrived after %v during a %v stall", d, stall)
			}
		})
	}
	wg.Wait()
	if got := p.Stats().Stalls; got != 1 {
		t.Errorf("Stats().Stalls = %d, want 1", got)
	}
}

func TestProxyResetAll(t *testing.T) {
	t.Parallel()
	p := newTestProxy(t, newEchoServer(t).Addr())
	var cs []net.Conn
	for range 3 {
		c := dial(t, p)
		roundTrip(t, c, []byte("hello")) // the proxy has registered c
		cs = append(cs, c)
	}
	if n := p.Conns(); n != 3 {
		t.Fatalf("Conns() = %d, want 3", n)
	}
	if n := p.ResetAll(); n != 3 {
		t.Errorf("ResetAll() = %d, want 3", n)
	}
	if n := p.Conns(); n != 0 {
		t.Errorf("Conns() after ResetAll = %d, want 0", n)
	}
	for i, c := range cs {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := c.Read(make([]byte, 1))
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("conn %d: Read after reset returned %v, want a connection error", i, err)
		}
	}
	if n := p.ResetAll(); n != 0 {
		t.Errorf("second ResetAll() = %d, want 0", n)
	}
	if got := p.Stats().Resets; got != 3 {
		t.Errorf("Stats().Resets = %d, want 3", got)
	}
	// The proxy keeps working after a reset.
	roundTrip(t, dial(t, p), []byte("again"))
}

func TestProxyResetRandom(t *testing.T) {
	t.Parallel()
	p := newTestProxy(t, newEchoServer(t).Addr())
	for range 4 {
		roundTrip(t, dial(t, p), []byte("hello"))
	}
	rng := rand.New(rand.NewPCG(5, 6))
	if n := p.ResetRandom(0, rng); n != 0 || p.Conns() != 4 {
		t.Errorf("ResetRandom(0) = %d leaving %d conns, want 0 leaving 4", n, p.Conns())
	}
	if n := p.ResetRandom(0.5, rng); n != 2 || p.Conns() != 2 {
		t.Errorf("ResetRandom(0.5) = %d leaving %d conns, want 2 leaving 2", n, p.Conns())
	}
	if n := p.ResetRandom(1, rng); n != 2 || p.Conns() != 0 {
		t.Errorf("ResetRandom(1) = %d leaving %d conns, want 2 leaving 0", n, p.Conns())
	}
	if got := p.Stats().Resets; got != 4 {
		t.Errorf("Stats().Resets = %d, want 4", got)
	}
}

func TestProxyPeerClose(t *testing.T) {
	t.Parallel()
	srv := newEchoServer(t)
	p := newTestProxy(t, srv.Addr())

	// The client closes: the proxy closes the server side and forgets the conn.
	c := dial(t, p)
	roundTrip(t, c, []byte("hello"))
	c.Close()
	waitFor(t, "Conns() == 0 after client close", func() bool { return p.Conns() == 0 })

	// The server closes: the client sees EOF.
	c = dial(t, p)
	roundTrip(t, c, []byte("hello"))
	srv.Close()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("Read after server close returned %v, want EOF", err)
	}
	waitFor(t, "Conns() == 0 after server close", func() bool { return p.Conns() == 0 })
}

func TestProxyConcurrentFaults(t *testing.T) {
	t.Parallel()
	p := newTestProxy(t, newEchoServer(t).Addr())
	done := make(chan struct{})
	var faults sync.WaitGroup
	faults.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			p.SetLatency(time.Duration(i%3)*time.Millisecond, time.Millisecond)
			p.Stall(time.Millisecond)
			if i%10 == 0 {
				p.ResetAll()
			}
		}
	})
	// Resets may break transfers, but bytes must never be altered or reordered.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(7, uint64(i)))
			for ok, failed := 0, 0; ok < 5; {
				// A reset can even hit a connection before Dial returns.
				c, err := net.Dial("tcp", p.Addr())
				if err == nil {
					err = echoRandom(c, rng, 32<<10)
					c.Close()
				}
				switch {
				case err == nil:
					ok++
				case errors.Is(err, errMismatch):
					t.Errorf("worker %d: %v", i, err)
					return
				case failed > 100:
					t.Errorf("worker %d: too many failures, last: %v", i, err)
					return
				default:
					failed++
				}
			}
		})
	}
	wg.Wait()
	close(done)
	faults.Wait()
}

func TestProxyCloseMidQueue(t *testing.T) {
	t.Parallel()
	p := newTestProxy(t, newEchoServer(t).Addr())
	p.SetLatency(time.Hour, 0)
	c := dial(t, p)
	msg := []byte("stuck in the queue")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "data to be queued", func() bool { return p.inflight.Load() == int64(len(msg)) })

	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close() = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close hung with data in a latency queue")
	}
	if n := p.running.Load(); n != 0 {
		t.Errorf("%d goroutines running after Close", n)
	}
	if n := p.inflight.Load(); n != 0 {
		t.Errorf("%d bytes still counted in flight after Close", n)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("Read after Close succeeded")
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Error("Dial after Close succeeded")
	}
}

// TestProxyCloseNoLeak is not parallel: it checks the process's goroutines.
func TestProxyCloseNoLeak(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	srv := newEchoServer(t)
	p, err := New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	p.SetLatency(time.Millisecond, time.Millisecond)
	var cs []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, c, []byte("hello"))
		cs = append(cs, c)
	}
	p.Stall(time.Hour)
	for _, c := range cs {
		c.Write([]byte("pending"))
	}
	p.ResetRandom(0.4, rand.New(rand.NewPCG(8, 9)))
	if err := p.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
	for _, c := range cs {
		c.Close()
	}
	srv.Close()
	goleak.VerifyNone(t, ignore)
}

func TestProxyTargetDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close()
	p := newTestProxy(t, target)
	c := dial(t, p)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Read with the target down returned %v, want a connection error", err)
	}
	if n := p.Conns(); n != 0 {
		t.Errorf("Conns() = %d, want 0", n)
	}
}
