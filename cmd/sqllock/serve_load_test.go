package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// countingTracer counts the statements a pgx connection sends.
type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// consoleOn returns a console on PostgreSQL whose statements tr counts,
// with the jobs of seedJobs and a lock held, and an HTTP server of its
// pages. Its hub does not run: the test reads the database with refresh.
func consoleOn(t *testing.T, tr *countingTracer) (*console, *httptest.Server) {
	t.Helper()
	_, schema := dbtest.Postgres(t)
	cfg, err := pgx.ParseConfig(dbtest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tracer, cfg.DefaultQueryExecMode = tr, pgx.QueryExecModeExec
	db := stdlib.OpenDB(*cfg)
	d, err := postgres.New(db, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{db: db, d: d, dsn: "the test's"}
	t.Cleanup(func() { tg.Close() })
	if err := sqllock.Migrate(ctxT(t), d); err != nil {
		t.Fatal(err)
	}
	seedJobs(t, backend{kind: "postgres", d: d, ns: schema})
	locks, err := sqllock.NewTable(d, sqllock.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := locks.TryAcquire(ctxT(t), "held")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	c, err := newConsole(tg, "", serveOptions{interval: 1 << 62, attempts: 100, perJob: 10})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)
	return c, srv
}

// The database statements of a refresh do not depend on the number of
// viewers: after one read, 1 and then 50 viewers load every page, the API,
// /metrics and the event stream, and the count of statements is the same.
func TestServeStatementsPerViewer(t *testing.T) {
	t.Parallel()
	tr := &countingTracer{}
	c, srv := consoleOn(t, tr)
	paths := []string{"/", "/locks", "/locks/held", "/elections", "/jobs", "/jobs/broken", "/jobs/nightly",
		"/api/locks", "/api/runs", "/api/runs?job=broken", "/metrics"}
	round := func(viewers int) int64 {
		before := tr.n.Load()
		c.hub.refresh(ctxT(t))
		var wg sync.WaitGroup
		for range viewers {
			wg.Go(func() {
				for _, p := range paths {
					resp, err := http.Get(srv.URL + p)
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Errorf("GET %s: %d", p, resp.StatusCode)
					}
				}
				ctx, cancel := context.WithCancel(ctxT(t))
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				buf := make([]byte, 64)
				if _, err := resp.Body.Read(buf); err != nil || !strings.Contains(string(buf), "event: read") {
					t.Errorf("/events: %q, %v", buf, err)
				}
			})
		}
		wg.Wait()
		return tr.n.Load() - before
	}
	round(1) // the first reads of the job pages
	one, fifty := round(1), round(50)
	if one != fifty || one == 0 {
		t.Errorf("a refresh with 1 viewer ran %d statements, with 50 viewers %d: want the same", one, fifty)
	}
	t.Logf("%d statements per refresh, with 1 or 50 viewers", one)
}

// faultProxy forwards TCP connections to a server until cut, which closes
// them and stops listening, until restore listens again on the same
// address.
type faultProxy struct {
	upstream string
	mu       sync.Mutex
	ln       net.Listener
	conns    []net.Conn
	addr     string
}

func newFaultProxy(t *testing.T, upstream string) *faultProxy {
	p := &faultProxy{upstream: upstream}
	p.listen(t, "127.0.0.1:0")
	t.Cleanup(p.cut)
	return p
}

func (p *faultProxy) listen(t *testing.T, addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
}

func (p *faultProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *faultProxy) restore(t *testing.T) { p.listen(t, p.addr) }

// A database that goes away shows a banner on every page and makes
// /metrics answer 503; both clear once it is back.
func TestServeDatabaseDown(t *testing.T) {
	t.Parallel()
	_, schema := dbtest.Postgres(t)
	u, err := url.Parse(dbtest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newFaultProxy(t, u.Host)
	u.Host = proxy.addr
	tg, err := openReady(ctxT(t), u.String(), schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	if err := sqllock.Migrate(ctxT(t), tg.d); err != nil {
		t.Fatal(err)
	}
	c, err := newConsole(tg, u.String(), serveOptions{interval: 1 << 62, attempts: 100, perJob: 10})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const banner = "The database cannot be read"
	check := func(when string, down bool) {
		t.Helper()
		code, page := get("/locks")
		mcode, _ := get("/metrics")
		if strings.Contains(page, banner) != down || code != http.StatusOK || (mcode == http.StatusServiceUnavailable) != down {
			t.Errorf("%s: /locks %d (banner %v), /metrics %d; want the banner and a 503: %v",
				when, code, strings.Contains(page, banner), mcode, down)
		}
	}
	c.hub.refresh(ctxT(t))
	check("database up", false)
	proxy.cut()
	c.hub.refresh(ctxT(t))
	check("database gone", true)
	proxy.restore(t)
	c.hub.refresh(ctxT(t))
	if !c.hub.snapshot().ok() { // a pooled connection cut may fail once more
		c.hub.refresh(ctxT(t))
	}
	check("database back", false)
}
