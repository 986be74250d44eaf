package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// defaultListen is serve's address: this host only, on a fixed port (7466,
// unassigned by IANA) that docs/console.md and Prometheus's scrape
// configuration can name.
const defaultListen = "127.0.0.1:7466"

// serveOptions are serve's settings.
type serveOptions struct {
	interval    time.Duration // between two reads of the database
	attempts    int           // the latest attempts read to find the jobs
	perJob      int           // the latest attempts of each job read
	grace       time.Duration // --missed-after, Missed's grace (0: each job's own)
	allowWrites bool
	tokens      []apiToken // who may write, with --allow-writes
	log         *slog.Logger
}

// serveFlags is "sqllock serve": the operator's console, web pages and
// /metrics read from the database.
func serveFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := dsnFlag(fs), schemaFlag(fs)
	listen := stringFlag(fs, "listen", defaultListen, "serve on `ADDRESS` (host:port; :7466 for every interface)")
	interval := durationFlag(fs, "interval", 2*time.Second, "read the database every `SECONDS` (or a duration), once for all viewers")
	attempts := intFlag(fs, "attempts", 1000, "read the latest `N` attempts of every job to find the jobs")
	perJob := intFlag(fs, "per-job", 30, "show the latest `N` attempts of each job on the jobs page and its timeline")
	grace := durationFlag(fs, "missed-after", 0, "an occurrence is missed when no replica claimed it within `SECONDS` (or a duration) of its time (0: each job's own grace, else one period)")
	allowWrites := boolFlag(fs, "allow-writes", "offer the actions (break a lock) to the holders of a token of --token-file")
	tokenFile := stringFlag(fs, "token-file", "", "read the tokens of the actions from `FILE`: one LABEL:SECRET a line (the label names who acted in the log); readable by its owner only")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 0 {
			return usageError{msg: "serve takes no arguments"}
		}
		switch {
		case *interval <= 0:
			return usageError{msg: "--interval must be positive"}
		case *attempts <= 0 || *perJob <= 0:
			return usageError{msg: "--attempts and --per-job must be positive"}
		case *grace < 0:
			return usageError{msg: "--missed-after must not be negative"}
		case *allowWrites && *tokenFile == "":
			return usageError{msg: "--allow-writes needs --token-file: the actions are refused without a token"}
		case !*allowWrites && *tokenFile != "":
			return usageError{msg: "--token-file is for --allow-writes, which is off"}
		}
		opts := serveOptions{interval: *interval, attempts: *attempts, perJob: *perJob, grace: *grace,
			allowWrites: *allowWrites, log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
		if *allowWrites {
			var err error
			if opts.tokens, err = readTokens(*tokenFile); err != nil {
				return err
			}
		}
		t, err := openReady(ctx, *dsn, *schema)
		if err != nil {
			return err
		}
		defer t.Close()
		c, err := newConsole(t, *dsn, opts)
		if err != nil {
			return t.fail(err)
		}
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return usageError{msg: fmt.Sprintf("--listen %s: %v", *listen, err)}
		}
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		mode := "read-only"
		if opts.allowWrites {
			mode = fmt.Sprintf("actions allowed to %s", count(len(opts.tokens), "token", "tokens"))
		}
		fmt.Fprintf(stdout, "sqllock serve: http://%s/ (%s) on %s, read every %v\n", ln.Addr(), mode, t.dsn, opts.interval)
		return c.serve(ctx, ln)
	}
}

// serve runs the console on ln until ctx ends, then shuts down: open event
// streams end at once, requests under way get a few seconds.
func (c *console) serve(ctx context.Context, ln net.Listener) error {
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	srv := &http.Server{
		Handler:           c.handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// The event stream moves its own deadline on with each event.
		WriteTimeout:   30 * time.Second,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 32 << 10,
		BaseContext:    func(net.Listener) context.Context { return base },
		ErrorLog:       slog.NewLogLogger(c.log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.hub.run(base)
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel() // ends the event streams and the reads of the database
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if serr := srv.Shutdown(sctx); serr != nil && err == nil {
		err = serr
	}
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// apiToken is a secret of --token-file and the label that names its holder.
type apiToken struct {
	label  string
	secret []byte
}

// readTokens reads --token-file: LABEL:SECRET lines, blank lines and
// #-comments aside. A file others may read is refused, as ssh refuses a
// private key.
func readTokens(path string) ([]apiToken, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageError{msg: fmt.Sprintf("--token-file: %v", err)}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, usageError{msg: fmt.Sprintf("--token-file: %v", err)}
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, usageError{msg: fmt.Sprintf("--token-file %s is readable by others (mode %v): chmod 600 it", path, fi.Mode().Perm())}
	}
	var tokens []apiToken
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		label, secret, ok := strings.Cut(line, ":")
		label, secret = strings.TrimSpace(label), strings.TrimSpace(secret)
		switch {
		case !ok || label == "":
			return nil, usageError{msg: fmt.Sprintf("--token-file %s:%d: want LABEL:SECRET", path, n)}
		case len(secret) < 16:
			return nil, usageError{msg: fmt.Sprintf("--token-file %s:%d: the secret of %q is shorter than 16 characters", path, n, label)}
		}
		tokens = append(tokens, apiToken{label: label, secret: []byte(secret)})
	}
	if err := sc.Err(); err != nil {
		return nil, usageError{msg: fmt.Sprintf("--token-file: %v", err)}
	}
	if len(tokens) == 0 {
		return nil, usageError{msg: fmt.Sprintf("--token-file %s has no LABEL:SECRET line", path)}
	}
	return tokens, nil
}
