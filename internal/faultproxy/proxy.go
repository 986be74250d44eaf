// Package faultproxy is a TCP proxy that injects network faults between a
// test's clients and a database server: latency with jitter, stalls, and
// connection resets. It imports nothing of sqllock, so that the tests of
// every layer (the dialects', the root's, the chaos suite's under tests/)
// can put it in front of a server.
package faultproxy

import (
	"cmp"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// chunkSize is the largest number of bytes read from one side in a single chunk.
const chunkSize = 32 << 10

// queueLen is the number of chunks a direction buffers before it stops reading.
const queueLen = 64

// Stats holds counters describing the traffic a Proxy has handled.
type Stats struct {
	// Accepted is the number of client connections accepted.
	Accepted int64
	// Resets is the number of connections closed by ResetAll or ResetRandom.
	Resets int64
	// Stalls is the number of calls to Stall.
	Stalls int64
	// BytesUp is the number of bytes forwarded from clients to the target.
	BytesUp int64
	// BytesDown is the number of bytes forwarded from the target to clients.
	BytesDown int64
}

// Proxy forwards TCP connections from a loopback listener to a target address and injects faults.
//
// All methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // canceled by Close; aborts pending dials
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine started by the proxy

	mu         sync.Mutex
	closed     bool
	nextID     uint64
	conns      map[uint64]*proxyConn
	latency    time.Duration
	jitter     time.Duration
	stallUntil time.Time

	accepted, resets, stalls, bytesUp, bytesDown atomic.Int64

	running  atomic.Int64 // goroutines currently running, for tests
	inflight atomic.Int64 // bytes read but not yet written, for tests
}

// proxyConn is one proxied connection: a client and its connection to the target.
type proxyConn struct {
	id     uint64
	client net.Conn
	server net.Conn
	done   chan struct{} // closed when the connection is closed
	once   sync.Once
}

// chunk is a piece of data read from one side, to be written at due.
type chunk struct {
	data []byte
	due  time.Time
}

// New listens on 127.0.0.1:0 and forwards every accepted connection to target (e.g. "127.0.0.1:5432").
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: target,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		conns:  make(map[uint64]*proxyConn),
	}
	p.goFunc(p.acceptLoop)
	return p, nil
}

// Addr returns the address of the proxy's listener, such as "127.0.0.1:54321".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk forwarded in either direction by d plus a
// uniformly random duration in [0, jitter). The delay of a chunk is fixed when
// it is read; chunks are never reordered. SetLatency(0, 0) removes the latency.
func (p *Proxy) SetLatency(d, jitter time.Duration) {
	p.mu.Lock()
	p.latency, p.jitter = max(d, 0), max(jitter, 0)
	p.mu.Unlock()
}

// Stall stops forwarding bytes in both directions on all current and new
// connections for d. Data is buffered, not dropped, and new connections are
// still accepted. Stall returns immediately; overlapping stalls end when the
// last one does.
func (p *Proxy) Stall(d time.Duration) {
	p.stalls.Add(1)
	until := time.Now().Add(d)
	p.mu.Lock()
	if until.After(p.stallUntil) {
		p.stallUntil = until
	}
	p.mu.Unlock()
}

// ResetAll abruptly closes every open proxied connection and returns how
// many it closed. Where possible the client side is reset (RST) rather than
// closed gracefully.
func (p *Proxy) ResetAll() int {
	return p.reset(p.snapshot())
}

// ResetRandom abruptly closes round(frac*n) of the n open proxied connections,
// chosen by rng, and returns how many it closed. frac is clamped to [0, 1]. If
// rng is nil, the global source of math/rand/v2 is used.
func (p *Proxy) ResetRandom(frac float64, rng *rand.Rand) int {
	pcs := p.snapshot()
	shuffle := rand.Shuffle
	if rng != nil {
		shuffle = rng.Shuffle
	}
	shuffle(len(pcs), func(i, j int) { pcs[i], pcs[j] = pcs[j], pcs[i] })
	n := int(math.Round(min(max(frac, 0), 1) * float64(len(pcs))))
	return p.reset(pcs[:n])
}

// Conns returns the number of currently open proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Stats returns a snapshot of the proxy's counters.
func (p *Proxy) Stats() Stats {
	return Stats{
		Accepted:  p.accepted.Load(),
		Resets:    p.resets.Load(),
		Stalls:    p.stalls.Load(),
		BytesUp:   p.bytesUp.Load(),
		BytesDown: p.bytesDown.Load(),
	}
}

// Close stops the listener, closes all proxied connections and waits for
// every goroutine started by the proxy to exit. Buffered data is discarded.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	err := p.ln.Close()
	for _, pc := range p.snapshot() {
		p.closeConn(pc, false)
	}
	p.wg.Wait()
	return err
}

// goFunc runs f in a goroutine tracked by p.wg and p.running.
func (p *Proxy) goFunc(f func()) {
	p.wg.Add(1)
	p.running.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.running.Add(-1)
		f()
	}()
}

func (p *Proxy) acceptLoop() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Probably out of file descriptors: back off and retry.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.accepted.Add(1)
		p.goFunc(func() { p.handle(c) })
	}
}

// handle dials the target for client and starts forwarding.
func (p *Proxy) handle(client net.Conn) {
	d := net.Dialer{Timeout: 30 * time.Second}
	server, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		client.Close()
		server.Close()
		return
	}
	p.nextID++
	pc := &proxyConn{id: p.nextID, client: client, server: server, done: make(chan struct{})}
	p.conns[pc.id] = pc
	p.mu.Unlock()
	p.pipe(pc, client, server, &p.bytesUp)
	p.pipe(pc, server, client, &p.bytesDown)
}

// pipe forwards bytes from src to dst through a queue, applying latency and stalls.
func (p *Proxy) pipe(pc *proxyConn, src, dst net.Conn, counter *atomic.Int64) {
	q := make(chan chunk, queueLen)
	p.goFunc(func() {
		defer close(q)
		buf := make([]byte, chunkSize)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				c := chunk{data: slices.Clone(buf[:n]), due: time.Now().Add(p.delay())}
				p.inflight.Add(int64(n))
				select {
				case q <- c:
				case <-pc.done:
					p.inflight.Add(-int64(n))
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	p.goFunc(func() {
		// Forward what was read before src ended, then close both sides.
		// The reader stops once pc is closed, so draining q terminates.
		defer func() {
			p.closeConn(pc, false)
			for c := range q {
				p.inflight.Add(-int64(len(c.data)))
			}
		}()
		t := time.NewTimer(time.Hour)
		defer t.Stop()
		for c := range q {
			ok := p.waitUntil(pc, t, c.due)
			if ok {
				n, err := dst.Write(c.data)
				counter.Add(int64(n))
				ok = err == nil
			}
			p.inflight.Add(-int64(len(c.data)))
			if !ok {
				return
			}
		}
	})
}

// delay returns the latency for a chunk read now.
func (p *Proxy) delay() time.Duration {
	p.mu.Lock()
	d, j := p.latency, p.jitter
	p.mu.Unlock()
	if j > 0 {
		d += rand.N(j)
	}
	return d
}

// waitUntil blocks until due has passed and no stall is in effect. It
// reports false if pc was closed first.
func (p *Proxy) waitUntil(pc *proxyConn, t *time.Timer, due time.Time) bool {
	for {
		p.mu.Lock()
		until := p.stallUntil
		p.mu.Unlock()
		if due.Before(until) {
			due = until
		}
		wait := time.Until(due)
		if wait <= 0 {
			select {
			case <-pc.done:
				return false
			default:
				return true
			}
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-pc.done:
			return false
		}
	}
}

// snapshot returns the open connections ordered by id.
func (p *Proxy) snapshot() []*proxyConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	pcs := make([]*proxyConn, 0, len(p.conns))
	for _, pc := range p.conns {
		pcs = append(pcs, pc)
	}
	slices.SortFunc(pcs, func(a, b *proxyConn) int { return cmp.Compare(a.id, b.id) })
	return pcs
}

// reset abruptly closes pcs and returns how many were still open.
func (p *Proxy) reset(pcs []*proxyConn) int {
	n := 0
	for _, pc := range pcs {
		if p.closeConn(pc, true) {
			n++
		}
	}
	p.resets.Add(int64(n))
	return n
}

// closeConn closes both sides of pc, sending RST to the client if abort is
// set. It reports whether this call closed pc.
func (p *Proxy) closeConn(pc *proxyConn, abort bool) bool {
	closed := false
	pc.once.Do(func() {
		closed = true
		p.mu.Lock()
		delete(p.conns, pc.id)
		p.mu.Unlock()
		if tc, ok := pc.client.(*net.TCPConn); abort && ok {
			tc.SetLinger(0)
		}
		pc.client.Close()
		pc.server.Close()
		close(pc.done)
	})
	return closed
}
