package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	dsnpkg "github.com/sqllock/sqllock/dsn"
)

// exitDoctor is sqllock doctor's exit status when a check found a problem.
const exitDoctor = 2

// doctorFlags is "sqllock doctor": look at the database as sqllock uses
// it and say what was found.
func doctorFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := dsnFlag(fs), schemaFlag(fs)
	timeout := durationFlag(fs, "timeout", 30*time.Second, "give up after `SECONDS` (or a duration)")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		if len(args) != 0 {
			return usageError{msg: "doctor takes no arguments"}
		}
		if *timeout <= 0 {
			return usageError{msg: "--timeout must be positive"}
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		t, err := openTarget(ctx, *dsn, *schema)
		if err != nil {
			return err
		}
		defer t.Close()
		cfg, err := dsnpkg.Parse(*dsn)
		if err != nil {
			return usageFrom(err)
		}
		findings := t.diagnose(ctx, cfg)
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CHECK\tSTATUS\tFOUND")
		problems := 0
		for _, f := range findings {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", f.check, f.status, f.found)
			if f.status != statusOK {
				problems++
			}
		}
		tw.Flush()
		if problems > 0 {
			return exitError{code: exitDoctor, err: fmt.Errorf("doctor: %d of %d checks are not ok", problems, len(findings))}
		}
		return nil
	}
}

// The statuses of a finding.
const (
	statusOK      = "ok"
	statusMissing = "missing" // a capability or privilege sqllock would use
	statusProblem = "problem" // something to fix
)

// finding is what one check found: a status, and in words what was seen
// and, unless ok, what it costs.
type finding struct {
	check, status, found string
}

// found is a finding whose words are formatted as fmt.Sprintf does.
func found(check, status, format string, args ...any) finding {
	return finding{check, status, fmt.Sprintf(format, args...)}
}

// diagnose runs the checks of t's kind of database.
func (t *target) diagnose(ctx context.Context, cfg *dsnpkg.Config) []finding {
	findings := []finding{t.server(ctx)}
	switch t.d.Name() {
	case "postgres":
		pooler, transaction := t.pgPooler(ctx, cfg)
		findings = append(findings, pooler, t.schemaFinding(ctx), t.privileges(ctx),
			t.clock(ctx, `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`),
			t.pgListen(ctx, transaction))
	case "mysql":
		findings = append(findings, t.mysqlPooler(ctx), t.schemaFinding(ctx), t.privileges(ctx),
			t.clock(ctx, `SELECT CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)`))
		findings = append(findings, t.mysqlWakeups(ctx)...)
	default:
		findings = append(findings, t.schemaFinding(ctx),
			found("clock", statusOK, "this host's: an SQLite file has no server clock"),
			found("wake-ups", statusOK, "within this host: a release wakes the waiting processes through Unix sockets in the directory beside the file (its name + \"-wake\"); fair queues and elections poll; none needs a privilege"))
	}
	return findings
}

// server reports the server's kind and version.
func (t *target) server(ctx context.Context) finding {
	q := map[string]string{"postgres": `SELECT version()`, "mysql": `SELECT CONCAT(VERSION(), ' ', @@version_comment)`}[t.d.Name()]
	if q == "" {
		q = `SELECT 'SQLite ' || sqlite_version()`
	}
	var v string
	if err := t.db.QueryRowContext(ctx, q).Scan(&v); err != nil {
		return found("server", statusProblem, "cannot read its version: %v", message(err))
	}
	if i := strings.Index(v, ", compiled by"); i > 0 { // PostgreSQL's
		v = v[:i]
	}
	return found("server", statusOK, "%s", v)
}

// schemaFinding reports the schema's version and dirty flag against the
// migrations this sqllock carries.
func (t *target) schemaFinding(ctx context.Context) finding {
	vs := versions(t.d)
	latest := vs[len(vs)-1]
	var (
		v     int
		dirty bool
	)
	err := t.db.QueryRowContext(ctx, "SELECT version, dirty FROM "+t.migrationsTable()+" LIMIT 1").Scan(&v, &dirty)
	switch {
	case err != nil && t.embedded:
		return found("schema", statusOK, "no version recorded yet: migrated on first use (to version %d)", latest)
	case err != nil:
		return found("schema", statusProblem, "missing (%s): every command exits 69 until `sqllock migrate up`", message(err))
	case dirty:
		return found("schema", statusProblem, "version %d, dirty: a migration failed half-way; repair it by hand, then `sqllock migrate force VERSION` and `sqllock migrate up`", v)
	case v < latest:
		return found("schema", statusProblem, "version %d of %d: outdated, run `sqllock migrate up`", v, latest)
	case !slices.Contains(vs, v):
		return found("schema", statusProblem, "version %d, newer than this sqllock knows (%d): use a sqllock of that version", v, latest)
	}
	return found("schema", statusOK, "version %d (the latest), clean", v)
}

// clockSkew is the skew past which the clock check is a problem.
const clockSkew = time.Second

// clock measures how far the server's clock (read by q, in microseconds
// since 1970) is from this host's, from the reading with the shortest
// round trip of three.
func (t *target) clock(ctx context.Context, q string) finding {
	var (
		skew time.Duration
		rtt  = time.Duration(-1)
	)
	for range 3 {
		var us int64
		start := time.Now()
		if err := t.db.QueryRowContext(ctx, q).Scan(&us); err != nil {
			return found("clock", statusProblem, "cannot read the server's clock: %v", message(err))
		}
		end := time.Now()
		if d := end.Sub(start); rtt < 0 || d < rtt {
			rtt = d
			skew = time.UnixMicro(us).Sub(start.Add(d / 2))
		}
	}
	ahead := "ahead of"
	if skew < 0 {
		ahead = "behind"
	}
	f := found("clock", statusOK, "the server is %v %s this host (±%v)", skew.Abs().Round(time.Microsecond), ahead, (rtt / 2).Round(time.Microsecond))
	if skew.Abs() > clockSkew+rtt/2 {
		f.status = statusProblem
		f.found += ": leases run on the server's clock and are unaffected, but the times locks shows, and this host's logs, are off by as much; run NTP on both"
	}
	return f
}

// pgPooler tells whether a pooler stands between sqllock and PostgreSQL,
// and whether it keeps a server session per connection. A direct
// connection's server process is the one it was told of at startup; a
// pooler makes the latter up. Behind a pooler, a connection keeps its
// server process (session pooling) unless a statement of another
// connection, asked just after, runs on it or its next statement runs
// elsewhere (transaction pooling hands out the server connection used
// last).
func (t *target) pgPooler(ctx context.Context, cfg *dsnpkg.Config) (f finding, transaction bool) {
	a, err := t.db.Conn(ctx)
	if err != nil {
		return found("pooler", statusProblem, "no connection: %v", message(err)), false
	}
	defer a.Close()
	b, err := t.db.Conn(ctx)
	if err != nil {
		return found("pooler", statusProblem, "no second connection: %v", message(err)), false
	}
	defer b.Close()
	var startup uint32
	if err := a.Raw(func(dc any) error {
		pc, err := pgxConn(dc)
		if err == nil {
			startup = pc.PgConn().PID()
		}
		return err
	}); err != nil {
		return found("pooler", statusProblem, "%v", err), false
	}
	pid := func(c *sql.Conn) (uint32, error) {
		var p uint32
		err := c.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&p)
		return p, err
	}
	first, err := pid(a)
	if err != nil {
		return found("pooler", statusProblem, "%v", message(err)), false
	}
	if first == startup {
		return found("pooler", statusOK, "none: the server process is the one the connection was given at startup"), false
	}
	name := pgBouncerName(ctx, cfg)
	status, risk := statusOK, ""
	if pgBouncerExitsOnCancel(name) {
		status, risk = statusProblem, "; PgBouncer before 1.21 can exit on a cancel request, which sqllock sends when a context ends during a wait: upgrade it"
	}
	for range 3 {
		other, err1 := pid(b)
		again, err2 := pid(a)
		if err := errors.Join(err1, err2); err != nil {
			return found("pooler", statusProblem, "%s: %v", name, message(err)), false
		}
		if other == first || again != first {
			return found("pooler", status, "%s, transaction pooling: a connection's statements run on changing server processes (sqllock's statements run unnamed and need no session)%s", name, risk), true
		}
	}
	return found("pooler", status, "%s, session pooling: each connection keeps its server process%s", name, risk), false
}

// pgBouncerExitsOnCancel reports whether name (of pgBouncerName) is a
// PgBouncer version before 1.21, which can exit on a cancel request that
// races with the end of its statement (PgBouncer issues 822 and 847).
func pgBouncerExitsOnCancel(name string) bool {
	_, v, ok := strings.Cut(name, "PgBouncer ")
	var major, minor int
	if !ok {
		return false
	}
	if n, _ := fmt.Sscanf(v, "%d.%d", &major, &minor); n != 2 {
		return false
	}
	return major < 1 || major == 1 && minor < 21
}

// pgxConn is the pgx connection under a driver connection of the pool.
func pgxConn(dc any) (*pgx.Conn, error) {
	sc, ok := dc.(*stdlib.Conn)
	if !ok {
		return nil, fmt.Errorf("not a pgx connection: %T", dc)
	}
	return sc.Conn(), nil
}

// pgBouncerName names the pooler in front of the server of cfg: PgBouncer's
// admin console (database pgbouncer) answers SHOW VERSION, or refuses a user
// it does not list as an admin with "not allowed"; a server, or another
// pooler, has no such database.
func pgBouncerName(ctx context.Context, cfg *dsnpkg.Config) string {
	c := cfg.Postgres.Copy()
	c.Database = "pgbouncer"
	c.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	c.ConnectTimeout = 5 * time.Second
	conn, err := pgx.ConnectConfig(ctx, c)
	if err != nil {
		if strings.Contains(err.Error(), "not allowed") {
			return "a pooler: PgBouncer (its console refused SHOW VERSION to this user)"
		}
		return "a pooler (the server process differs from the one given at startup)"
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v string
	if err := conn.QueryRow(ctx, "SHOW VERSION").Scan(&v); err != nil {
		return "a pooler: PgBouncer"
	}
	return "a pooler: " + v
}

// pgListen checks the wake-ups: LISTEN on a connection of the pool hears a
// notification sent through another. Through a transaction pooler it is
// not tried: LISTEN would stay behind on a server connection the pooler
// hands to others.
func (t *target) pgListen(ctx context.Context, transaction bool) finding {
	const consequence = "waiters are not woken by a release: they poll, and take a freed lock up to their poll interval late"
	if transaction {
		return found("LISTEN", statusMissing, "a transaction pooler keeps no session for LISTEN: %s", consequence)
	}
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return found("LISTEN", statusProblem, "no connection: %v", message(err))
	}
	defer conn.Close()
	channel := newChannel()
	start := time.Now()
	err = conn.Raw(func(dc any) error {
		pc, err := pgxConn(dc)
		if err != nil {
			return err
		}
		if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			return err
		}
		defer pc.Exec(context.WithoutCancel(ctx), "UNLISTEN *")
		if _, err := t.db.ExecContext(ctx, `SELECT pg_notify($1, '')`, channel); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = pc.WaitForNotification(wctx)
		return err
	})
	if err != nil {
		return found("LISTEN", statusMissing, "a notification sent through the pool did not arrive (%v): %s", message(err), consequence)
	}
	return found("LISTEN", statusOK, "a notification sent through the pool arrived in %v: releases wake waiters", time.Since(start).Round(time.Millisecond))
}

// mysqlPooler tells whether a connection keeps its server connection: a
// proxy that multiplexes connections (ProxySQL, say) moves its statements
// between server connections.
func (t *target) mysqlPooler(ctx context.Context) finding {
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return found("pooler", statusProblem, "no connection: %v", message(err))
	}
	defer conn.Close()
	var ids [3]int64
	for i := range ids {
		if err := conn.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&ids[i]); err != nil {
			return found("pooler", statusProblem, "%v", message(err))
		}
	}
	if ids[0] != ids[1] || ids[1] != ids[2] {
		return found("pooler", statusMissing, "a proxy moves a connection's statements between server connections (CONNECTION_ID() changed): the wake-ups' bells cannot work, waiters poll")
	}
	return found("pooler", statusOK, "none seen: a connection keeps its server connection (CONNECTION_ID() stays %d)", ids[0])
}

// mysqlWakeups checks what the wake-ups' bells need (see dialect/mysql): a
// user lock (GET_LOCK, IS_USED_LOCK, RELEASE_LOCK) held by one connection
// and waited for by another, and KILL QUERY ending that wait, from a third
// connection of the same user; and the privilege to end the waits of other
// users' connections.
func (t *target) mysqlWakeups(ctx context.Context) []finding {
	const consequence = "waiters are not woken by a release: they poll, and take a freed lock up to their poll interval late"
	conns := make([]*sql.Conn, 3)
	for i := range conns {
		c, err := t.db.Conn(ctx)
		if err != nil {
			return []finding{found("user locks", statusProblem, "no connection: %v", message(err))}
		}
		defer c.Close()
		conns[i] = c
	}
	holder, waiter, killer := conns[0], conns[1], conns[2]
	name := "sqllock doctor " + newChannel()
	var got, used bool
	err := holder.QueryRowContext(ctx, `SELECT GET_LOCK(?, 0) = 1, IS_USED_LOCK(?) = CONNECTION_ID()`, name, name).Scan(&got, &used)
	if err == nil && (!got || !used) {
		err = errors.New("GET_LOCK or IS_USED_LOCK answered NULL or 0")
	}
	if err != nil {
		return []finding{found("user locks", statusMissing, "GET_LOCK and IS_USED_LOCK: %v: %s", message(err), consequence)}
	}
	defer holder.ExecContext(context.WithoutCancel(ctx), `DO RELEASE_LOCK(?)`, name)
	fs := []finding{found("user locks", statusOK, "GET_LOCK, IS_USED_LOCK and RELEASE_LOCK work")}

	var id int64
	if err := waiter.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&id); err != nil {
		return append(fs, found("KILL QUERY", statusProblem, "%v", message(err)))
	}
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		var r sql.NullInt64
		_ = waiter.QueryRowContext(ctx, `SELECT GET_LOCK(?, 10)`, name).Scan(&r)
	}()
	// One KILL, once the wait shows in the process list: a second KILL of
	// a thread can stall MariaDB.
	const waiting = `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO LIKE 'SELECT GET_LOCK%'`
	for seen := 0; seen == 0; {
		select {
		case <-waited:
			return append(fs, found("KILL QUERY", statusProblem, "the wait for a user lock held by another connection ended by itself"))
		default:
		}
		if err := killer.QueryRowContext(ctx, waiting, id).Scan(&seen); err != nil {
			<-waited
			return append(fs, found("KILL QUERY", statusProblem, "reading the process list: %v", message(err)))
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	if _, err := killer.ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", id)); err != nil {
		<-waited
		return append(fs, found("KILL QUERY", statusMissing, "ending another connection's wait: %v: %s", message(err), consequence))
	}
	select {
	case <-waited:
		fs = append(fs, found("KILL QUERY", statusOK, "ends another connection's wait for a user lock (in %v)", time.Since(start).Round(time.Microsecond)))
	case <-time.After(5 * time.Second):
		<-waited
		fs = append(fs, found("KILL QUERY", statusMissing, "KILL QUERY did not end another connection's wait for a user lock: %s", consequence))
	}
	return append(fs, t.mysqlConnectionAdmin(ctx))
}

// mysqlConnectionAdmin reports whether the user may end other users'
// statements: a release by one user ends the bells of another's waiters
// only with CONNECTION_ADMIN (MySQL 8), CONNECTION ADMIN (MariaDB 10.5+)
// or SUPER.
func (t *target) mysqlConnectionAdmin(ctx context.Context) finding {
	rows, err := t.db.QueryContext(ctx, `SHOW GRANTS`)
	if err != nil {
		return found("kill others", statusProblem, "SHOW GRANTS: %v", message(err))
	}
	defer rows.Close()
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			return found("kill others", statusProblem, "SHOW GRANTS: %v", message(err))
		}
		on := strings.ToUpper(g)
		if !strings.Contains(on, " ON *.* ") {
			continue
		}
		for _, p := range []string{"ALL PRIVILEGES", "SUPER", "CONNECTION_ADMIN", "CONNECTION ADMIN"} {
			if strings.Contains(on, p) {
				return found("kill others", statusOK, "%s: releases by this user wake the waiters of other database users too", p)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return found("kill others", statusProblem, "SHOW GRANTS: %v", message(err))
	}
	return found("kill others", statusMissing, "no CONNECTION_ADMIN, CONNECTION ADMIN or SUPER: a release by this user cannot wake the waiters of another database user, which then poll (waiters of this user are woken)")
}

// newChannel returns a random name for a check's channel or user lock.
func newChannel() string { return "sqllock_doctor_" + strings.ToLower(rand.Text()) }
