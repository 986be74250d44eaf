package postgres

import (
	"context"
	"crypto/rand"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqllock/sqllock/dialect/internal/listen"
)

// WithPooler makes the dialect fit for a connection pooler in transaction
// or statement pooling mode (PgBouncer, RDS Proxy, Supavisor, pgcat): every
// statement of the dialect runs in pgx's QueryExecModeExec, one round trip
// with an unnamed statement, so that none relies on a server-side prepared
// statement, which a pooler may have created on another server connection
// or not at all. Without it the dialect's statements follow the pool's
// default_query_exec_mode (pgx's default prepares and caches them per
// connection), which fails through a transaction pooler with SQLSTATE
// 42P05 or 26000; the dialect then says so and names this option.
//
// The dialect never relies on session state: its locks, fences and
// settings are transaction-scoped. Only its waiters' wake-ups need a
// session (LISTEN): see WithListenDSN.
//
// Directly on PostgreSQL, or through session pooling, WithPooler works too
// but is not needed; it costs the server a parse and a plan per statement.
func WithPooler() Option {
	return func(d *Dialect) error {
		d.lead = []any{pgx.QueryExecModeExec}
		return nil
	}
}

// WithListenDSN gives the dialect's listening connection (see Subscribe) a
// connection string of its own, typically the PostgreSQL server itself when
// the pool goes through a transaction pooler: LISTEN needs a session, which
// such a pooler does not keep. The connection is opened while lockers wait
// and closed with the dialect. The DSN is parsed by pgx.ParseConfig; an
// error is returned by New.
func WithListenDSN(dsn string) Option {
	return func(d *Dialect) error {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return fmt.Errorf("postgres: listen DSN: %w", err)
		}
		d.listenCfg = cfg
		return nil
	}
}

// WithListenConfig is WithListenDSN for a parsed configuration, for
// settings a connection string cannot carry (a TLS configuration, a dialer,
// a password callback). The dialect uses a copy.
func WithListenConfig(cfg *pgx.ConnConfig) Option {
	return func(d *Dialect) error {
		if cfg == nil {
			return errors.New("postgres: WithListenConfig: nil configuration")
		}
		d.listenCfg = cfg.Copy()
		return nil
	}
}

// args returns a statement's arguments, after the dialect's leading ones
// (see WithPooler).
func (d *Dialect) args(args ...any) []any {
	return append(d.lead[:len(d.lead):len(d.lead)], args...)
}

// The listening connection's probes: a notification on a channel of the
// connection's own, sent through the pool, which must come back within
// probeTimeout — first before the connection counts as listening, then
// every probeEvery while it listens, so that a connection that went silent
// (a peer gone without a reset) is found out.
const (
	probeTimeout = 5 * time.Second
	probeEvery   = 15 * time.Second // Dialect.probeEvery, unless a test sets it
)

// errNotDelivered says that the first probe sent to the listening
// connection did not arrive.
var errNotDelivered = fmt.Errorf("%w: a notification sent to the listening connection did not arrive within %v: "+
	"LISTEN needs a session, which a transaction or statement pooler (PgBouncer pool_mode=transaction) does not keep; "+
	"give the dialect a direct connection for it with postgres.WithListenDSN", listen.ErrNotDelivered, probeTimeout)

// errProbeLost says that a later probe did not come back.
var errProbeLost = fmt.Errorf("postgres: the listening connection's probe did not come back within %v: taken for dead", probeTimeout)

// listen holds one connection with LISTEN in effect: the dialect's
// listen.Func. The connection is the one of WithListenDSN, or else one of
// the pool, discarded afterwards.
func (d *Dialect) listen(ctx context.Context, ready func(), wake func(name string)) error {
	if d.listenCfg != nil {
		pc, err := pgx.ConnectConfig(ctx, d.listenCfg)
		if err != nil {
			return fmt.Errorf("postgres: listening connection: %w", err)
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_ = pc.Close(cctx)
		}()
		return d.listenOn(ctx, pc, ready, wake)
	}
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return wrap(err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("postgres: LISTEN needs the pgx driver, not %T", dc)
		}
		pc := sc.Conn()
		// LISTEN through a transaction pooler would stay behind on one of
		// its server connections, receiving notifications that the pooler
		// does not expect (PgBouncer 1.18 logs "got packet 'A' from server
		// when not linked", and was seen to crash on a cancel request
		// after that): look first.
		pinned, err := d.pinned(ctx, pc)
		if err == nil && !pinned {
			err = errUnpinned
		}
		if err == nil {
			err = d.listenOn(ctx, pc, ready, wake)
		}
		// Listening, or cut off mid-wait: never back to the pool.
		return errors.Join(err, driver.ErrBadConn)
	})
}

// errUnpinned says that the pool's connections do not keep a server
// session.
var errUnpinned = fmt.Errorf("%w: the pool's connections do not keep a server session, as behind a transaction or statement pooler "+
	"(PgBouncer pool_mode=transaction), and LISTEN needs one; give the dialect a direct connection for it with postgres.WithListenDSN",
	listen.ErrNotDelivered)

// pinnedChecks is how many times pinned looks for a server process shared
// with another connection.
const pinnedChecks = 3

// pinned reports whether pc keeps one server session, as a direct
// connection or one through a session pooler does. A direct connection is
// told by its server process, which is the one it was told at connection
// time (a pooler makes up the latter). Through a pooler, pc is pinned if
// its statements all run in the same server process and those of another
// connection of the pool never do: behind a transaction pooler, the
// process that ran pc's statement goes back to the pooler's pool, and the
// next client, asking at once, is usually given it (PgBouncer hands out its
// most recently used server connection first).
func (d *Dialect) pinned(ctx context.Context, pc *pgx.Conn) (bool, error) {
	const q = `SELECT pg_backend_pid()`
	var first uint32
	if err := pc.QueryRow(ctx, q, pgx.QueryExecModeSimpleProtocol).Scan(&first); err != nil {
		return false, err
	}
	if first == pc.PgConn().PID() {
		return true, nil
	}
	for range pinnedChecks {
		var other, again uint32
		if err := d.db.QueryRowContext(ctx, q, pgx.QueryExecModeSimpleProtocol).Scan(&other); err != nil {
			return false, wrap(err)
		}
		if err := pc.QueryRow(ctx, q, pgx.QueryExecModeSimpleProtocol).Scan(&again); err != nil {
			return false, err
		}
		if other == first || again != first {
			return false, nil
		}
	}
	return true, nil
}

// listenOn listens on pc until ctx ends or the connection fails, probing
// it (see probeTimeout).
func (d *Dialect) listenOn(ctx context.Context, pc *pgx.Conn, ready func(), wake func(name string)) error {
	probeChannel := newProbeChannel()
	// The dialect's channel last: operators (and tests) find the
	// listening connection by its last statement.
	for _, ch := range []string{probeChannel, d.waker, d.channel} {
		if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithCancelCause(ctx)
	// The probes go out through the pool, from another goroutine, while
	// this one waits for notifications.
	got, done := make(chan struct{}, 1), make(chan struct{})
	go func() {
		defer close(done)
		d.probe(wctx, cancel, probeChannel, got)
	}()
	defer func() { cancel(nil); <-done }()
	confirmed := false
	for {
		n, err := pc.WaitForNotification(wctx)
		if err != nil {
			if ctx.Err() == nil && wctx.Err() != nil {
				err = context.Cause(wctx)
				if errors.Is(err, listen.ErrNotDelivered) {
					unlisten(ctx, pc)
				}
			}
			return err
		}
		if n.Channel != probeChannel {
			wake(n.Payload)
			continue
		}
		select {
		case got <- struct{}{}:
		default:
		}
		if !confirmed {
			confirmed = true
			ready()
		}
	}
}

// probe sends the listening connection's probes on channel until ctx ends,
// each once the one before came back (got). It ends ctx, with the reason,
// when one cannot be sent or does not come back in time.
func (d *Dialect) probe(ctx context.Context, stop context.CancelCauseFunc, channel string, got <-chan struct{}) {
	lost := errNotDelivered
	for {
		sctx, scancel := context.WithTimeout(ctx, probeTimeout)
		_, err := d.db.ExecContext(sctx, `SELECT pg_notify($1, '')`, d.args(channel)...)
		if err == nil {
			select {
			case <-got:
			case <-sctx.Done():
				err = lost
			}
		} else {
			err = fmt.Errorf("postgres: sending the listening connection's probe: %w", wrap(err))
		}
		scancel()
		if err != nil {
			if ctx.Err() == nil {
				stop(err)
			}
			return
		}
		lost = errProbeLost
		t := time.NewTimer(d.probeEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// unlisten undoes LISTEN on a connection whose notifications do not
// arrive: behind a transaction pooler, on a server connection that is
// likely the one LISTEN ran on, so that it does not keep collecting
// notifications for nobody. The connection is discarded afterwards.
func unlisten(ctx context.Context, pc *pgx.Conn) {
	if pc.PgConn().IsClosed() {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = pc.Exec(cctx, "UNLISTEN *")
}

// newProbeChannel returns a random channel name for a connection's
// probes: nobody else listens on it.
func newProbeChannel() string {
	b := make([]byte, 16)
	rand.Read(b) // never fails
	return "sqllock_probe_" + hex.EncodeToString(b)
}

// preparedStatementsLost explains SQLSTATE 42P05 (duplicate prepared
// statement) and 26000 (no such prepared statement) from pgx's statement
// cache.
type preparedStatementsLost struct{ err *pgconn.PgError }

func (e *preparedStatementsLost) Error() string {
	return "postgres: " + e.err.Error() + ": the server connection's prepared statements are not those pgx expects, " +
		"as happens behind a pooler in transaction or statement mode (PgBouncer pool_mode=transaction before 1.21 or without max_prepared_statements); " +
		"use postgres.WithPooler() for sqllock's statements, and default_query_exec_mode=exec in the DSN for your own"
}

func (e *preparedStatementsLost) Unwrap() error { return e.err }
