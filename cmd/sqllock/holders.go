package main

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
)

// lockRow is one held lock, as sqllock locks shows it.
type lockRow struct {
	Name string `json:"name"`
	// Strategy is the kind of lock: "table", "election" (a lock table
	// lease whose holder proclaimed a value), "optimistic", "semaphore",
	// "rwlock" or "pessimistic".
	Strategy string `json:"strategy"`
	// Mode is "exclusive" or "shared" (a semaphore's permits are shared:
	// up to its limit of holders at once; so is a read lock).
	Mode string `json:"mode"`
	// Owner is the holder: the owner string of a lease, or the server
	// session holding a pessimistic lock.
	Owner string `json:"owner"`
	// Token is 0 where the database does not keep it (pessimistic locks).
	Token int64 `json:"token"`
	Holds int   `json:"holds"`
	// Limit is a semaphore's number of holders at once; 0 elsewhere.
	Limit int `json:"limit,omitempty"`
	// Value is the value an election's leader proclaimed (kind
	// "election"); nil elsewhere.
	Value *string `json:"value,omitempty"`
	// Waiters is the number of sessions queued for the lock, where the
	// server shows them (pessimistic locks); nil elsewhere.
	Waiters    *int       `json:"waiters,omitempty"`
	AcquiredAt time.Time  `json:"acquired_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"` // nil: no lease
	HeldForMS  int64      `json:"held_for_ms"`
	// ExpiresInMS is the lease left; negative for an expired lease not yet
	// taken over or reaped; nil without a lease.
	ExpiresInMS *int64 `json:"expires_in_ms,omitempty"`
	// MinHoldUntil is set for a lock whose run has ended before its
	// minimum hold (--min-hold): nobody holds it (Holds is 0), and nobody
	// can take it before this instant.
	MinHoldUntil *time.Time `json:"min_hold_until,omitempty"`
}

// heldFor and expiresIn are the row's durations.
func (r lockRow) heldFor() time.Duration { return time.Duration(r.HeldForMS) * time.Millisecond }

func (r lockRow) expiresIn() (time.Duration, bool) {
	if r.ExpiresInMS == nil {
		return 0, false
	}
	return time.Duration(*r.ExpiresInMS) * time.Millisecond, true
}

// live reports whether r keeps its name from being taken: a held lock
// whose lease has not expired, or a finished run's minimum hold.
func (r lockRow) live() bool {
	left, ok := r.expiresIn()
	return !ok || left > 0
}

// timeLeft is r's TIME LEFT column: the lease left, "expired", "min-hold"
// and the time left of a minimum hold, or "-" without a lease.
func (r lockRow) timeLeft() string {
	left, ok := r.expiresIn()
	switch {
	case !ok:
		return "-"
	case left <= 0:
		return "expired"
	case r.MinHoldUntil != nil:
		return "min-hold " + left.Round(time.Second).String()
	}
	return left.Round(time.Millisecond).String()
}

// describe names r's holder for messages: who, and how long it has left.
func (r lockRow) describe() string {
	var b strings.Builder
	if r.MinHoldUntil != nil {
		left, _ := r.expiresIn()
		fmt.Fprintf(&b, "kept by the minimum hold (--min-hold) of a finished run of %s (%s, token %d) until %s (%v left)",
			r.Owner, r.Strategy, r.Token, r.MinHoldUntil.Format("15:04:05 MST"), left.Round(time.Second))
		return b.String()
	}
	fmt.Fprintf(&b, "held by %s", r.Owner)
	if r.Strategy == "pessimistic" {
		fmt.Fprintf(&b, " (%s, pessimistic, for %v", r.Mode, r.heldFor().Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, " (%s, token %d, for %v", r.Strategy, r.Token, r.heldFor().Round(time.Millisecond))
	}
	if left, ok := r.expiresIn(); ok {
		if left > 0 {
			fmt.Fprintf(&b, ", lease expires in %v", left.Round(time.Millisecond))
		} else {
			b.WriteString(", lease expired")
		}
	}
	if r.Waiters != nil {
		fmt.Fprintf(&b, ", %d waiting", *r.Waiters)
	}
	b.WriteString(")")
	return b.String()
}

// isTable reports whether r is a lease of the lock table (an election's
// too).
func (r lockRow) isTable() bool { return r.Strategy == "table" || r.Strategy == "election" }

// tableName returns table as the statements of d name it: in d's schema
// (PostgreSQL) or database (MySQL) when d has one.
func tableName(d dialect.Dialect, table string) string {
	switch d := d.(type) {
	case *postgres.Dialect:
		if s := d.Schema(); s != "" {
			return `"` + strings.ReplaceAll(s, `"`, `""`) + `".` + table
		}
	case *mysql.Dialect:
		if db := d.Database(); db != "" {
			return "`" + strings.ReplaceAll(db, "`", "``") + "`." + table
		}
	}
	return table
}

// eachRow runs q on d's pool and calls scan for each row.
func eachRow(ctx context.Context, d dialect.Dialect, q string, scan func(*sql.Rows) error) error {
	rs, err := d.DB().QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		if err := scan(rs); err != nil {
			return err
		}
	}
	return rs.Err()
}

// markElections makes election rows of the lock table's rows: those whose
// holder proclaimed a value for its token (an election's leader).
func markElections(ctx context.Context, d dialect.Dialect, rows []lockRow) error {
	byName := make(map[string]*lockRow, len(rows))
	for i := range rows {
		byName[rows[i].Name] = &rows[i]
	}
	q := `SELECT name, token, value FROM ` + tableName(d, "sqllock_locks") + ` WHERE holds > 0 AND value_token = token`
	if _, ok := d.(*sqlite.Dialect); ok { // values in a table of their own
		q = `SELECT l.name, l.token, v.value FROM sqllock_locks l
JOIN sqllock_lock_values v ON v.name = l.name AND v.token = l.token WHERE l.holds > 0`
	}
	err := eachRow(ctx, d, q, func(rs *sql.Rows) error {
		var (
			name, value []byte
			token       int64
		)
		if err := rs.Scan(&name, &token, &value); err != nil {
			return err
		}
		if r := byName[string(name)]; r != nil && r.Token == token {
			v := string(value)
			r.Strategy, r.Value = "election", &v
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing elections: %w", err)
	}
	return nil
}

// countTickets sets the waiters of the lock table's rows: the live tickets
// of their names (a fair lock's queue, and the waiters of an unfair one
// that took a ticket to be woken).
func countTickets(ctx context.Context, d dialect.Dialect, rows []lockRow) error {
	live := "expires_at > clock_timestamp()"
	switch d.(type) {
	case *mysql.Dialect:
		live = "expires_at > UTC_TIMESTAMP(6)"
	case *sqlite.Dialect: // integer microseconds since the epoch
		live = "expires_at > CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000"
	}
	q := `SELECT name, COUNT(*) FROM ` + tableName(d, "sqllock_tickets") + ` WHERE ` + live + ` GROUP BY name`
	count := map[string]int{}
	err := eachRow(ctx, d, q, func(rs *sql.Rows) error {
		var (
			name []byte
			n    int
		)
		if err := rs.Scan(&name, &n); err != nil {
			return err
		}
		count[string(name)] = n
		return nil
	})
	if err != nil {
		return fmt.Errorf("counting waiters: %w", err)
	}
	for i := range rows {
		if n := count[rows[i].Name]; n > 0 && rows[i].Waiters == nil {
			rows[i].Waiters = &n
		}
	}
	return nil
}

// listRWLocks adds the holders of the dialect's read/write locks to rows,
// one row per holder, shared for a read lock.
func listRWLocks(ctx context.Context, t *target, rows []lockRow) ([]lockRow, error) {
	d, tb := t.d, t.tables
	rw := tb.RWLocks
	if rw == nil {
		return rows, nil
	}
	infos, err := rw.List(ctx)
	if err != nil {
		return nil, err
	}
	n := len(rows)
	rows = leaseRows(rows, "rwlock", infos)
	type key struct{ name, owner string }
	shared := map[key]bool{}
	q := `SELECT name, owner, shared FROM ` + tableName(d, "sqllock_rwlock_holders")
	err = eachRow(ctx, d, q, func(rs *sql.Rows) error {
		var (
			name, owner []byte
			sh          bool
		)
		if err := rs.Scan(&name, &owner, &sh); err != nil {
			return err
		}
		shared[key{string(name), string(owner)}] = sh
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing read/write locks: %w", err)
	}
	for i := n; i < len(rows); i++ {
		if shared[key{rows[i].Name, rows[i].Owner}] {
			rows[i].Mode = "shared"
		}
	}
	return rows, nil
}

// errNoLockView is returned by listPessimistic where the server has no view
// of the row locks held.
var errNoLockView = errors.New("this server shows no row locks")

// listLocks lists the locks of every strategy the dialect supports, held or
// with a lease not yet reaped, by name. Pessimistic locks the server cannot
// show are left out, with the reason in skipped.
func listLocks(ctx context.Context, t *target) (rows []lockRow, skipped error, err error) {
	d, tb := t.d, t.tables
	cat := d.Catalogue()
	infos, err := tb.Locks.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	n := len(rows)
	rows = leaseRows(rows, "table", infos)
	if tb.Elections != nil {
		if err := markElections(ctx, d, rows[n:]); err != nil {
			return nil, nil, err
		}
	}
	if cat.Fair != nil || cat.Waking != nil {
		if err := countTickets(ctx, d, rows[n:]); err != nil {
			return nil, nil, err
		}
	}
	if vt := tb.Versions; vt != nil {
		infos, err := vt.List(ctx)
		if err != nil {
			return nil, nil, err
		}
		rows = leaseRows(rows, "optimistic", infos)
	}
	if rows, err = listSemaphores(ctx, t, rows); err != nil {
		return nil, nil, err
	}
	if rows, err = listRWLocks(ctx, t, rows); err != nil {
		return nil, nil, err
	}
	if cat.Pessimistic != nil {
		prows, perr := listPessimistic(ctx, d)
		switch {
		case errors.Is(perr, errNoLockView):
			skipped = perr
		case perr != nil:
			return nil, nil, perr
		}
		rows = append(rows, prows...)
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Name != rows[j].Name {
			return rows[i].Name < rows[j].Name
		}
		return rows[i].Strategy < rows[j].Strategy
	})
	return rows, skipped, nil
}

func leaseRows(rows []lockRow, strategy string, infos []dialect.LockInfo) []lockRow {
	for _, li := range infos {
		// The database's now is ExpiresAt - ExpiresIn.
		now := li.ExpiresAt.Add(-li.ExpiresIn)
		expires := li.ExpiresAt.Local()
		left := li.ExpiresIn.Milliseconds()
		r := lockRow{
			Name: li.Name, Strategy: strategy, Mode: "exclusive", Owner: li.Owner, Token: li.Token, Holds: li.Holds,
			AcquiredAt: li.AcquiredAt.Local(), ExpiresAt: &expires,
			HeldForMS: now.Sub(li.AcquiredAt).Milliseconds(), ExpiresInMS: &left,
		}
		if li.Holds == 0 && li.ExpiresIn > 0 {
			r.MinHoldUntil = &expires
		}
		rows = append(rows, r)
	}
	return rows
}

// listPessimistic lists the row locks held on the row-lock table.
//
// PostgreSQL marks a locked row with the locking transaction's ID (xmax),
// which pg_locks and pg_stat_activity resolve to the session holding it
// while that transaction runs; several shared holders share a MultiXact ID
// that only the pgrowlocks extension resolves, so those rows are not shown,
// and the mode is read from the session's last statement
// (postgresRowLockMode): the locking read, or the lock's keep-alive, which
// names the mode too.
// MariaDB shows row locks (information_schema.INNODB_LOCKS) only while some
// transaction waits for them, so only contended locks are listed; MySQL 8
// has no such view here (errNoLockView).
func listPessimistic(ctx context.Context, d dialect.Dialect) ([]lockRow, error) {
	switch d := d.(type) {
	case *postgres.Dialect:
		return listPostgresRowLocks(ctx, d)
	case *mysql.Dialect:
		return listMySQLRowLocks(ctx, d)
	}
	return nil, errNoLockView
}

func listPostgresRowLocks(ctx context.Context, d *postgres.Dialect) ([]lockRow, error) {
	table := tableName(d, "sqllock_rowlocks")
	q := `SELECT r.name, a.pid, COALESCE(host(a.client_addr), 'local'), COALESCE(a.application_name, ''),
	COALESCE(a.xact_start, now()), now(), COALESCE(a.query, ''),
	(SELECT count(DISTINCT w.pid) FROM pg_locks w WHERE NOT w.granted AND (
		(w.locktype = 'transactionid' AND w.transactionid = r.xmax) OR
		(w.locktype = 'tuple' AND w.relation = $1::regclass
			AND w.page = (r.ctid::text::point)[0] AND w.tuple = (r.ctid::text::point)[1])))
FROM ` + table + ` r
JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = r.xmax AND l.granted AND l.mode = 'ExclusiveLock'
JOIN pg_stat_activity a ON a.pid = l.pid`
	rs, err := d.DB().QueryContext(ctx, q, table)
	if err != nil {
		return nil, fmt.Errorf("listing pessimistic locks: %w", err)
	}
	defer rs.Close()
	var rows []lockRow
	for rs.Next() {
		var (
			r            lockRow
			pid, waiters int
			addr, app    string
			start, now   time.Time
			query        string
		)
		if err := rs.Scan(&r.Name, &pid, &addr, &app, &start, &now, &query, &waiters); err != nil {
			return nil, err
		}
		r.Strategy, r.Mode, r.Holds = "pessimistic", postgresRowLockMode(query), 1
		r.Owner = fmt.Sprintf("backend %d from %s", pid, addr)
		if app != "" {
			r.Owner += " (" + app + ")"
		}
		r.AcquiredAt, r.HeldForMS, r.Waiters = start.Local(), now.Sub(start).Milliseconds(), &waiters
		rows = append(rows, r)
	}
	return rows, rs.Err()
}

// postgresRowLockMode tells the mode of the row lock a session holds from
// its last statement, the only trace PostgreSQL keeps without the
// pgrowlocks extension: the locking read or sqllock's keep-alive, which both
// name the row-lock table and say FOR SHARE for a shared lock. "unknown"
// once the session ran another statement (the holder's own, on the lock's
// transaction).
func postgresRowLockMode(query string) string {
	switch {
	case !strings.Contains(query, "sqllock_rowlocks"):
		return "unknown"
	case strings.Contains(query, "FOR SHARE"):
		return "shared"
	}
	return "exclusive"
}

func listMySQLRowLocks(ctx context.Context, d *mysql.Dialect) ([]lockRow, error) {
	return mysqlRowLocks(ctx, d.DB(), d.Database())
}

// mysqlRowLocks lists the row locks held on the row-lock table of database
// ("": the connection's) from MariaDB's information_schema.INNODB_LOCKS, or
// where the server has no such table (MySQL 8) from
// performance_schema.data_locks.
func mysqlRowLocks(ctx context.Context, db *sql.DB, database string) ([]lockRow, error) {
	table := "CONCAT('`', DATABASE(), '`.`sqllock_rowlocks`')"
	args := []any{}
	if database != "" {
		table = "?"
		args = append(args, "`"+database+"`.`sqllock_rowlocks`")
	}
	q := `SELECT l.lock_data, l.lock_mode, t.trx_mysql_thread_id, COALESCE(p.host, ''), TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6)),
	(SELECT COUNT(*) FROM information_schema.INNODB_TRX w
		JOIN information_schema.INNODB_LOCKS wl ON wl.lock_id = w.trx_requested_lock_id
		WHERE wl.lock_table = l.lock_table AND wl.lock_space = l.lock_space
			AND wl.lock_page = l.lock_page AND wl.lock_rec = l.lock_rec)
FROM information_schema.INNODB_LOCKS l
JOIN information_schema.INNODB_TRX t ON t.trx_id = l.lock_trx_id
LEFT JOIN information_schema.PROCESSLIST p ON p.id = t.trx_mysql_thread_id
WHERE l.lock_table = ` + table + ` AND l.lock_type = 'RECORD'
	AND l.lock_id NOT IN (SELECT trx_requested_lock_id FROM information_schema.INNODB_TRX WHERE trx_requested_lock_id IS NOT NULL)`
	rs, err := db.QueryContext(ctx, q, args...)
	switch mysqlErrorNumber(err) {
	case 0:
	case 1109: // unknown table: MySQL 8
		return mysqlDataLocks(ctx, db, database)
	case 1227: // access denied
		return nil, fmt.Errorf("%w: reading information_schema.INNODB_LOCKS needs the PROCESS privilege", errNoLockView)
	default:
		return nil, fmt.Errorf("listing pessimistic locks: %w", err)
	}
	return scanMySQLRowLocks(rs)
}

// mysqlDataLocks lists the row locks held on the row-lock table of database
// from MySQL 8's performance_schema.data_locks, which (unlike MariaDB's
// INNODB_LOCKS) lists every granted lock, contended or not.
func mysqlDataLocks(ctx context.Context, db *sql.DB, database string) ([]lockRow, error) {
	var name any // NULL: the connection's database
	if database != "" {
		name = database
	}
	const q = `SELECT l.LOCK_DATA, l.LOCK_MODE, t.trx_mysql_thread_id, COALESCE(p.HOST, ''), TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6)),
	(SELECT COUNT(*) FROM performance_schema.data_lock_waits w WHERE w.BLOCKING_ENGINE_LOCK_ID = l.ENGINE_LOCK_ID)
FROM performance_schema.data_locks l
JOIN information_schema.INNODB_TRX t ON t.trx_id = l.ENGINE_TRANSACTION_ID
LEFT JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
WHERE l.OBJECT_SCHEMA = COALESCE(?, DATABASE()) AND l.OBJECT_NAME = 'sqllock_rowlocks'
	AND l.LOCK_TYPE = 'RECORD' AND l.LOCK_STATUS = 'GRANTED'`
	rs, err := db.QueryContext(ctx, q, name)
	switch mysqlErrorNumber(err) {
	case 0:
	case 1142, 1227: // SELECT denied, access denied
		return nil, fmt.Errorf("%w: reading performance_schema.data_locks needs SELECT on it, and information_schema.INNODB_TRX the PROCESS privilege", errNoLockView)
	default:
		return nil, fmt.Errorf("listing pessimistic locks: %w", err)
	}
	return scanMySQLRowLocks(rs)
}

// mysqlErrorNumber is the server's error number of err, 0 for no error, -1
// for an error the server did not number.
func mysqlErrorNumber(err error) int {
	var me *gomysql.MySQLError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &me):
		return int(me.Number)
	}
	return -1
}

// scanMySQLRowLocks reads the rows of mysqlRowLocks's and mysqlDataLocks's
// queries: lock data, lock mode, the holder's connection, its host, how long
// its transaction has run (µs), and the number of waiters.
func scanMySQLRowLocks(rs *sql.Rows) ([]lockRow, error) {
	defer rs.Close()
	var rows []lockRow
	for rs.Next() {
		var (
			r                lockRow
			data, mode, host string
			thread, heldUS   int64
			waiters          int
		)
		if err := rs.Scan(&data, &mode, &thread, &host, &heldUS, &waiters); err != nil {
			return nil, err
		}
		name, ok := lockDataName(data)
		if !ok {
			continue // the supremum pseudo-record, say
		}
		r.Name, r.Strategy, r.Holds = name, "pessimistic", 1
		r.Mode = "exclusive"
		if strings.HasPrefix(mode, "S") {
			r.Mode = "shared"
		}
		r.Owner = fmt.Sprintf("connection %d", thread)
		if host != "" {
			r.Owner += " from " + host
		}
		held := time.Duration(heldUS) * time.Microsecond
		r.AcquiredAt, r.HeldForMS, r.Waiters = time.Now().Add(-held).Truncate(time.Millisecond), held.Milliseconds(), &waiters
		rows = append(rows, r)
	}
	return rows, rs.Err()
}

// lockDataName decodes the lock data (INNODB_LOCKS.lock_data,
// data_locks.LOCK_DATA) of the row-lock table's VARBINARY key: 0x followed
// by hex digits, or a quoted string; not a pseudo-record.
func lockDataName(data string) (string, bool) {
	if h, ok := strings.CutPrefix(data, "0x"); ok {
		b, err := hex.DecodeString(h)
		return string(b), err == nil
	}
	if len(data) < 2 || data[0] != '\'' || data[len(data)-1] != '\'' {
		return "", false // the supremum pseudo-record, say
	}
	s, err := strconv.Unquote(`"` + data[1:len(data)-1] + `"`)
	return s, err == nil
}
