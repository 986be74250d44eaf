package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/testutil"
)

// The bad-input campaign: strings a user controls — lock names, owners,
// schema and database names — that try to escape SQL quoting, start
// comments, match patterns or break encodings. Valid ones must round-trip
// byte for byte and touch nothing else; invalid ones must be refused with
// their documented error before any statement is sent.

// hostileStrings are tried as lock names, owners and schema names. Some are
// valid names (they must work), some are not (they must be refused).
var hostileStrings = []string{
	"'", "''", `"`, `\`, `\'`, `\\'`, "`", `\"`,
	"'; DROP TABLE sqllock_locks; --",
	`" OR 1=1 --`,
	"' OR '1'='1",
	"`; DROP TABLE sqllock_locks; --",
	"x'); DELETE FROM sqllock_locks; --",
	"'||(SELECT owner FROM sqllock_locks LIMIT 1)||'",
	"$$", "$1", "$$; DROP TABLE sqllock_locks; $$", "?", "%s", "%", "_", "%_%", "*",
	"{}", `{"a","b"}`, "(a,b)", "NULL", "null",
	"\n", "\r\n", "a\nb", "\t", "*/", "/*", "/* x */", "-- ", "#", ";", "\x1a", "\b", "\x7f",
	" ", "a ", " a", "0", "-1", "0x27", "CHAR(39)",
	"\x00", "a\x00b", "'\x00'", "", "\xff", "\xc3\x28", "\xed\xa0\x80", "\xc0\xa7", "é\xff",
	"ünïcødé ✓", "🔒", "\u202e", "\u200b", "\ufeff", "＇", "ʼ",
	strings.Repeat("n", sqllock.MaxNameLen),
	strings.Repeat("n", sqllock.MaxNameLen+1),
	strings.Repeat("é", (sqllock.MaxNameLen-1)/2) + "'",
	strings.Repeat("é", (sqllock.MaxNameLen+1)/2),
	strings.Repeat("'", sqllock.MaxNameLen),
	strings.Repeat(`\`, sqllock.MaxNameLen),
	strings.Repeat("x", 1<<16),
}

// lookAlikes are pairs of distinct names that a case-insensitive, padding,
// normalising, pattern-matching or truncating comparison would confuse. The
// two of a pair must be separate locks, and neither's owner may re-enter the
// other's hold.
var lookAlikes = [][2]string{
	{"a", "A"}, {"a", "a "}, {"a", " a"}, {"a", "a\n"}, {"a", "a\t"}, {"a", "ａ"},
	{"é", "e\u0301"}, {"ß", "ss"}, {"i", "ı"}, {"'", "''"}, {`\`, `\\`},
	{"%", "a"}, {"_", "a"}, {"a%", "ab"}, {"a_", "ab"}, {"*", "a"},
	{strings.Repeat("x", sqllock.MaxNameLen), strings.Repeat("x", sqllock.MaxNameLen-1) + "y"},
}

// validName is the documented rule for names and owners: 1 to MaxNameLen
// bytes of valid UTF-8 without NUL bytes.
func validName(s string) bool {
	return s != "" && len(s) <= sqllock.MaxNameLen && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// injectionEnvs are the dialects of envs, plus connection settings under
// which the driver, not the server, writes parameters into the statement
// text: where an escaping mistake would become an injection.
var injectionEnvs = append(envs[:len(envs):len(envs)],
	envMaker{"mysql+interpolateParams", func(t *testing.T) *env {
		return mysqlVariant(t, func(c *gomysql.Config) { c.InterpolateParams = true })
	}},
	envMaker{"mysql+interpolateParams+NO_BACKSLASH_ESCAPES", func(t *testing.T) *env {
		e := mysqlVariant(t, func(c *gomysql.Config) {
			c.InterpolateParams = true
			c.Params = map[string]string{"sql_mode": "CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')"}
		})
		var mode string
		if err := e.db.QueryRowContext(ctxT(t), "SELECT @@SESSION.sql_mode").Scan(&mode); err != nil || !strings.Contains(mode, "NO_BACKSLASH_ESCAPES") {
			t.Fatalf("sql_mode %q, %v: want NO_BACKSLASH_ESCAPES", mode, err)
		}
		return e
	}},
	envMaker{"postgres+simple_protocol", func(t *testing.T) *env {
		_, schema := dbtest.Postgres(t)
		db := dbtest.OpenPostgres(t, withQuery(dbtest.PostgresURL(t), "default_query_exec_mode=simple_protocol"))
		d, err := postgres.New(db, postgres.WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		closeAtEnd(t, d)
		return migrated(t, &env{kind: "postgres", db: db, d: d, ns: schema, s: tableStrategy})
	}},
)

// withQuery appends the parameter kv to the query of the URL u.
func withQuery(u, kv string) string {
	if strings.Contains(u, "?") {
		return u + "&" + kv
	}
	return u + "?" + kv
}

// mysqlVariant is the MySQL env on a private pool, with the test server's
// DSN changed by mod.
func mysqlVariant(t *testing.T, mod func(c *gomysql.Config)) *env {
	t.Helper()
	c, err := gomysql.ParseDSN(dbtest.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	_, database := dbtest.MySQL(t)
	mod(c)
	db := dbtest.OpenMySQL(t, c.FormatDSN())
	d, err := mysql.New(db, mysql.WithDatabase(database))
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, d)
	return migrated(t, &env{kind: "mysql", db: db, d: d, ns: database, s: tableStrategy})
}

// eachInjectionTarget runs fn for every strategy on every env of
// injectionEnvs that has it, in parallel subtests.
func eachInjectionTarget(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Parallel()
	for _, m := range injectionEnvs {
		for _, strategy := range []string{"table", "optimistic", "pessimistic"} {
			if strategy == "pessimistic" && m.kind == "sqlite" {
				continue
			}
			t.Run(m.kind+"/"+strategy, func(t *testing.T) {
				t.Parallel()
				e := m.make(t)
				switch strategy {
				case "optimistic":
					e.s = optimisticStrategy
				case "pessimistic":
					e.pess = true
				}
				fn(t, e)
			})
		}
	}
}

// Every hostile string as a lock name and as an owner, through every
// strategy on every dialect: valid ones are locks like any other, stored and
// listed byte for byte, distinct from their look-alikes, renewed and reaped;
// invalid ones are refused with ErrInvalidName or ErrInvalidOwner. A lock
// held throughout by another owner, and the lock tables, survive it all.
func TestBadInputNamesAndOwners(t *testing.T) {
	eachInjectionTarget(t, func(t *testing.T, e *env) {
		c := newCampaign(t, e)
		sentinel := mustTry(t, sqllock.WithOwner(c.ctx, "sentinel-owner"), c.other, "sentinel")
		c.used["sentinel"] = true
		for _, s := range hostileStrings {
			if validName(s) {
				c.roundTrip(t, s)
			} else {
				c.refused(t, s)
			}
		}
		for _, p := range lookAlikes {
			c.distinct(t, p[0], p[1])
		}
		if !e.pess {
			c.allAtOnce(t, sentinel)
		}
		c.untouched(t, sentinel)
	})
}

// campaign drives one strategy on one env through the hostile strings.
type campaign struct {
	e     *env
	ctx   context.Context
	l     sqllock.Locker  // acquires, re-enters and waits
	other sqllock.Locker  // holds what l must wait for, and the sentinel
	used  map[string]bool // the names that have a row in the strategy's table
}

// newCampaign returns a campaign on e. On PostgreSQL the lock-table locker
// that waits polls only once a minute, so that a waiter acquiring sooner was
// woken by the release's NOTIFY, whose payload is the hostile name.
func newCampaign(t *testing.T, e *env) *campaign {
	c := &campaign{e: e, ctx: ctxT(t), used: map[string]bool{}}
	if e.pess {
		c.l, c.other = e.pessimistic(t, sqllock.PessimisticOptions{}), e.pessimistic(t, sqllock.PessimisticOptions{})
		return c
	}
	opts := sqllock.TableOptions{}
	if e.kind == "postgres" && e.s == tableStrategy {
		opts = sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute, MaxBackoff: time.Minute}}
	}
	c.l, c.other = e.locker(t, opts), e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}})
	return c
}

// mustTry acquires name with l.TryAcquire or fails t, and releases the
// lock when t ends if it is still held then.
func mustTry(t *testing.T, ctx context.Context, l sqllock.Locker, name string) *sqllock.Lock {
	t.Helper()
	k, err := l.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", name, err)
	}
	t.Cleanup(func() { releaseAtEnd(k) })
	return k
}

// releaseAtEnd releases k, if still held, from a cleanup: the test's
// context has ended by then.
func releaseAtEnd(k *sqllock.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = k.Release(ctx)
}

// mustRelease releases k or fails t.
func mustRelease(t *testing.T, ctx context.Context, k *sqllock.Lock) {
	t.Helper()
	if err := k.Release(ctx); err != nil {
		t.Fatalf("Release(%q): %v", k.Name(), err)
	}
}

// mustBeLocked fails t unless l.TryAcquire(ctx, name) reports ErrLocked.
func mustBeLocked(t *testing.T, ctx context.Context, l sqllock.Locker, name, why string) {
	t.Helper()
	k, err := l.TryAcquire(ctx, name)
	if k != nil {
		releaseAtEnd(k)
	}
	if !errors.Is(err, sqllock.ErrLocked) {
		t.Fatalf("%s: TryAcquire(%q) = %v, want ErrLocked", why, name, err)
	}
}

// acquireResult is the outcome of an Acquire run in a goroutine.
type acquireResult struct {
	k   *sqllock.Lock
	err error
}

// roundTrip uses the valid name s, with s as the owner too: acquire, check
// what the lock and List report, exclude another owner, re-enter, release,
// and wait for a release by another owner.
func (c *campaign) roundTrip(t *testing.T, s string) {
	t.Helper()
	octx := sqllock.WithOwner(c.ctx, s)
	k := mustTry(t, octx, c.l, s)
	if k.Name() != s || k.Owner() != s {
		t.Fatalf("acquired %q as %q: the lock says name %q, owner %q", s, s, k.Name(), k.Owner())
	}
	mustBeLocked(t, c.ctx, c.other, s, "another owner while held")
	again := mustTry(t, octx, c.l, s)
	if again.Token() != k.Token() {
		t.Fatalf("re-entering %q: token %d, want %d", s, again.Token(), k.Token())
	}
	c.listed(t, s, s, k.Token(), 2)
	mustRelease(t, c.ctx, again)
	mustRelease(t, c.ctx, k)

	h := mustTry(t, c.ctx, c.other, s)
	got := make(chan acquireResult, 1)
	go func() {
		w, err := c.l.Acquire(octx, s)
		got <- acquireResult{w, err}
	}()
	if tl, ok := c.l.(*sqllock.Table); ok {
		waitRoom(t, tl, s, fmt.Sprintf("a queued waiter for %q", s), func(up bool, waiting int) bool {
			return waiting == 1 && (up || c.e.kind != "postgres")
		})
	}
	mustRelease(t, c.ctx, h)
	var r acquireResult
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		t.Fatalf("Acquire(%q) not woken within 20s of the release", s)
	}
	if r.err != nil {
		t.Fatalf("Acquire(%q) after the release: %v", s, r.err)
	}
	t.Cleanup(func() { releaseAtEnd(r.k) })
	if r.k.Token() <= h.Token() {
		t.Fatalf("Acquire(%q): token %d after token %d", s, r.k.Token(), h.Token())
	}
	mustRelease(t, c.ctx, r.k)
	c.used[s] = true
}

// refused checks that the invalid string s is refused as a name with
// ErrInvalidName and as an owner with ErrInvalidOwner, by every way of
// acquiring.
func (c *campaign) refused(t *testing.T, s string) {
	t.Helper()
	acquirers := map[string]func(ctx context.Context, name string) (*sqllock.Lock, error){
		"TryAcquire": c.l.TryAcquire,
		"Acquire":    c.l.Acquire,
		"Do": func(ctx context.Context, name string) (*sqllock.Lock, error) {
			return nil, sqllock.Do(ctx, c.l, name, func(context.Context) error {
				return errors.New("fn ran")
			})
		},
	}
	if p, ok := c.l.(*sqllock.Pessimistic); ok {
		acquirers["TryAcquireShared"] = p.TryAcquireShared
		acquirers["AcquireShared"] = p.AcquireShared
	}
	for how, acquire := range acquirers {
		for _, tc := range []struct {
			ctx        context.Context
			name, role string
			want       error
		}{
			{c.ctx, s, "name", sqllock.ErrInvalidName},
			{sqllock.WithOwner(c.ctx, s), "owner-probe", "owner", sqllock.ErrInvalidOwner},
		} {
			k, err := acquire(tc.ctx, tc.name)
			if k != nil {
				releaseAtEnd(k)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("%s with %q as the %s: %v, want %v", how, s, tc.role, err, tc.want)
			}
		}
	}
}

// distinct checks that the names a and b are separate locks, and that
// owner b cannot re-enter owner a's hold nor the other way round.
func (c *campaign) distinct(t *testing.T, a, b string) {
	t.Helper()
	actx, bctx := sqllock.WithOwner(c.ctx, a), sqllock.WithOwner(c.ctx, b)
	ka := mustTry(t, actx, c.l, a)
	kb := mustTry(t, bctx, c.other, b)
	mustBeLocked(t, bctx, c.l, a, fmt.Sprintf("owner %q on %q", b, a))
	mustBeLocked(t, actx, c.other, b, fmt.Sprintf("owner %q on %q", a, b))
	c.listed(t, a, a, ka.Token(), 1)
	c.listed(t, b, b, kb.Token(), 1)
	mustRelease(t, c.ctx, kb)
	mustRelease(t, c.ctx, ka)
	c.used[a], c.used[b] = true, true
}

// listed checks that List reports name held by owner with token and holds,
// for the strategies that list their locks.
func (c *campaign) listed(t *testing.T, name, owner string, token int64, holds int) {
	t.Helper()
	ll, ok := c.l.(locker)
	if !ok {
		return
	}
	infos, err := ll.List(c.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, li := range infos {
		if li.Name == name {
			if li.Owner != owner || li.Token != token || li.Holds != holds {
				t.Fatalf("List: %q held by %q, token %d, %d holds; want %q, %d, %d", name, li.Owner, li.Token, li.Holds, owner, token, holds)
			}
			return
		}
	}
	t.Fatalf("List does not have %q: %d locks", name, len(infos))
}

// allAtOnce holds every name used so far at once, each owned by itself:
// List must report exactly these leases and the sentinel, byte for byte,
// until each has been renewed (in batches where the dialect renews in
// batches), which makes its lease end more than a TTL after its grant.
//
// The TTL is long and the renewal interval short: renewals come quickly,
// but a busy machine cannot make one miss the trust window and lose a lease.
func (c *campaign) allAtOnce(t *testing.T, sentinel *sqllock.Lock) {
	t.Helper()
	const ttl, every = time.Minute, 100 * time.Millisecond
	rl := c.e.locker(t, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl, RenewInterval: every}})
	held := map[string]*sqllock.Lock{}
	for s := range c.used {
		if s != "sentinel" {
			held[s] = mustTry(t, sqllock.WithOwner(c.ctx, s), rl, s)
		}
	}
	testutil.Eventually(c.ctx, t, "every lease renewed", func() bool {
		infos, err := rl.List(c.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != len(held)+1 {
			t.Fatalf("List: %d locks, want %d", len(infos), len(held)+1)
		}
		renewed := true
		for _, li := range infos {
			want, owner := held[li.Name], li.Name
			if li.Name == "sentinel" {
				want, owner = sentinel, "sentinel-owner"
			}
			if want == nil || li.Owner != owner || li.Token != want.Token() || li.Holds != 1 {
				t.Fatalf("List: %q held by %q, token %d, %d holds: not a lock of this test", li.Name, li.Owner, li.Token, li.Holds)
			}
			// A grant ends exactly a TTL after it, on the database clock:
			// only a renewal at least half an interval later ends it later.
			if want != sentinel && li.ExpiresAt.Sub(li.AcquiredAt) <= ttl+every/2 {
				renewed = false
			}
		}
		for s, k := range held {
			if k.Context().Err() != nil {
				t.Fatalf("lease %q lost: %v", s, context.Cause(k.Context()))
			}
		}
		return renewed
	})
	for _, k := range held {
		mustRelease(t, c.ctx, k)
	}
}

// lockTables are every table the migrations create, per dialect.
var lockTables = map[string][]string{
	"postgres": {"sqllock_locks", "sqllock_versions", "sqllock_version_floor", "sqllock_rowlocks"},
	"mysql": {"sqllock_locks", "sqllock_token_floor", "sqllock_versions", "sqllock_version_floor",
		"sqllock_rowlocks", "sqllock_rowlock_tokens"},
	"sqlite": {"sqllock_locks", "sqllock_token_floor", "sqllock_versions", "sqllock_version_floor"},
}

// untouched checks what must have survived the campaign: every lock table,
// the sentinel's lock, and the rows of the strategy's table, which must be
// exactly those of the names used; then that a reaper pass spares the
// sentinel and deletes every other row.
func (c *campaign) untouched(t *testing.T, sentinel *sqllock.Lock) {
	t.Helper()
	for _, table := range lockTables[c.e.kind] {
		var n int
		if err := c.e.db.QueryRowContext(c.ctx, c.e.q("SELECT count(*) FROM {"+table+"}")).Scan(&n); err != nil {
			t.Fatalf("table %s after the campaign: %v", table, err)
		}
	}
	check := func(when string, want map[string]bool) {
		t.Helper()
		if err := sentinel.Context().Err(); err != nil {
			t.Fatalf("%s: sentinel lost: %v", when, context.Cause(sentinel.Context()))
		}
		mustBeLocked(t, c.ctx, c.l, "sentinel", when)
		c.listed(t, "sentinel", "sentinel-owner", sentinel.Token(), 1)
		if got := c.rowNames(t); !maps.Equal(got, want) {
			t.Fatalf("%s: the table has rows for %q, want %q", when, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
	}
	check("after the campaign", c.used)
	r, err := sqllock.NewReaper(c.e.d, sqllock.ReaperOptions{BatchSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	// A pass leaves a row for a later one while an acquire holds its name's
	// fence, and ends there. The fences are advisory locks of the database,
	// which the parallel tests' schemas share (and their names: "a", "0",
	// ...): pass again until no other row is left.
	testutil.Eventually(c.ctx, t, "reaper passes delete every row but the sentinel's", func() bool {
		if _, err := r.Reap(c.ctx); err != nil {
			t.Fatal(err)
		}
		names := c.rowNames(t)
		if !names["sentinel"] {
			t.Fatalf("a reaper pass deleted the sentinel's row: %q left", slices.Sorted(maps.Keys(names)))
		}
		return len(names) == 1
	})
	check("after reaping", map[string]bool{"sentinel": true})
	mustRelease(t, c.ctx, sentinel)
}

// rowNames returns the names of every row of the strategy's table, read
// back as the database stores them.
func (c *campaign) rowNames(t *testing.T) map[string]bool {
	t.Helper()
	table := "sqllock_rowlocks"
	if !c.e.pess {
		table = c.e.s.table
	}
	rows, err := c.e.db.QueryContext(c.ctx, c.e.q("SELECT name FROM {"+table+"}"))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	names := map[string]bool{}
	for rows.Next() {
		var name []byte
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		names[string(name)] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// identifierStrings are schema and database names that are not plain
// identifiers, besides hostileStrings.
var identifierStrings = []string{
	`a"b`, "a`b", "a b", "a.b", "a-b", "a;b", "a/b", "a'b", "1abc", "9", "schéma", "a\x00", "ab\n",
	strings.Repeat("s", dialect.MaxIdentifierLen+1), "sqllock_locks; DROP SCHEMA public CASCADE",
}

// reservedIdentifiers are plain identifiers that only work quoted: reserved
// words, and case that unquoted names would fold. As schema or database
// names they are shared by every run against a server.
var reservedIdentifiers = []string{"_", "NULL", "null", "select", "user", "order", "Mixed_Case"}

// Schema (PostgreSQL) and database (MySQL) names: anything but a plain
// identifier is refused with ErrInvalidIdentifier before a statement is
// sent; plain identifiers that need quoting — reserved words, case that
// folding would lose, the longest allowed — hold the lock tables under
// exactly that name.
func TestBadInputSchemaNames(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			var (
				db *sql.DB
				ns string
			)
			// A private pool: the pessimistic TryAcquire refuses at once
			// when every connection of its pool is in use, which the
			// shared pool of the package's parallel tests may be.
			if kind == "postgres" {
				_, ns = dbtest.Postgres(t)
				db = dbtest.OpenPostgres(t, dbtest.PostgresURL(t))
			} else {
				_, ns = dbtest.MySQL(t)
				db = dbtest.OpenMySQL(t, dbtest.MySQLDSN(t))
			}
			var valid []string
			for _, s := range append(slices.Clone(hostileStrings), identifierStrings...) {
				if dialect.ValidateIdentifier(s) == nil {
					valid = append(valid, s)
					continue
				}
				if _, err := newNamespaced(kind, db, s); !errors.Is(err, sqllock.ErrInvalidIdentifier) {
					t.Errorf("%s namespace %q: %v, want ErrInvalidIdentifier", kind, s, err)
				}
			}
			if kind == "postgres" {
				pool, _ := dbtest.PostgresPool(t)
				for _, s := range identifierStrings {
					if _, err := postgres.NewFromPool(pool, postgres.WithSchema(s)); !errors.Is(err, sqllock.ErrInvalidIdentifier) {
						t.Errorf("NewFromPool with schema %q: %v, want ErrInvalidIdentifier", s, err)
					}
				}
			}
			// Names derived from the test's own are unique to this run.
			own := []string{strings.ToUpper(ns), ns + strings.Repeat("_", dialect.MaxIdentifierLen-len(ns)), "_" + ns}
			for _, s := range own {
				namespaceRoundTrip(t, ctx, kind, db, s)
			}
			serialise(t, ctx, kind, db)
			shared := map[string]bool{}
			for _, s := range append(valid, reservedIdentifiers...) {
				shared[s] = true
			}
			for _, s := range slices.Sorted(maps.Keys(shared)) {
				namespaceRoundTrip(t, ctx, kind, db, s)
			}
		})
	}
}

// newNamespaced returns the kind's dialect on db with its tables in the
// schema or database name.
func newNamespaced(kind string, db *sql.DB, name string) (dialect.Dialect, error) {
	if kind == "postgres" {
		return postgres.New(db, postgres.WithSchema(name))
	}
	return mysql.New(db, mysql.WithDatabase(name))
}

// serialise holds, until t ends, a server-wide lock that keeps concurrent
// runs of this test against the same server from dropping each other's
// schemas of shared names.
func serialise(t *testing.T, ctx context.Context, kind string, db *sql.DB) {
	t.Helper()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const key = "sqllock badinput schemas"
	lock, unlock := "SELECT pg_advisory_lock(hashtext($1)), 1", "SELECT pg_advisory_unlock(hashtext($1))"
	if kind == "mysql" {
		lock, unlock = "SELECT 1, GET_LOCK(?, 60)", "SELECT RELEASE_LOCK(?)"
	}
	var void any
	var got int
	if err := conn.QueryRowContext(ctx, lock, key).Scan(&void, &got); err != nil || got != 1 {
		conn.Close()
		t.Fatalf("%s: %d, %v", lock, got, err)
	}
	t.Cleanup(func() {
		_, _ = conn.ExecContext(context.Background(), unlock, key)
		conn.Close()
	})
}

// namespaceRoundTrip migrates a dialect with its tables in the schema or
// database name, checks that they are there under exactly that name, and
// takes a lock with a hostile name and owner through each strategy. The
// namespace is dropped before and after.
func namespaceRoundTrip(t *testing.T, ctx context.Context, kind string, db *sql.DB, name string) {
	t.Helper()
	d, err := newNamespaced(kind, db, name)
	if err != nil {
		t.Fatalf("%s namespace %q: %v", kind, name, err)
	}
	drop := `DROP SCHEMA IF EXISTS "` + name + `" CASCADE`
	count := "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name IN ('" +
		strings.Join(lockTables[kind], "', '") + "')"
	if kind == "mysql" {
		drop, count = "DROP DATABASE IF EXISTS `"+name+"`", strings.Replace(count, "$1", "?", 1)
	}
	dropNS := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(dctx, drop); err != nil {
			t.Errorf("%s: %v", drop, err)
		}
	}
	dropNS()
	t.Cleanup(dropNS)
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatalf("migrate into %s namespace %q: %v", kind, name, err)
	}
	var n int
	if err := db.QueryRowContext(ctx, count, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if want := len(lockTables[kind]); n != want {
		t.Fatalf("%s namespace %q has %d sqllock tables, want %d", kind, name, n, want)
	}
	const hostile = "'; DROP TABLE sqllock_locks; --"
	table, err := sqllock.NewTable(d, sqllock.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	optimistic, err := sqllock.NewOptimistic(d, sqllock.OptimisticOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pessimistic, err := sqllock.NewPessimistic(d, sqllock.PessimisticOptions{})
	if err != nil {
		t.Fatal(err)
	}
	octx := sqllock.WithOwner(ctx, hostile)
	for _, l := range []sqllock.Locker{table, optimistic, pessimistic} {
		k := mustTry(t, octx, l, hostile)
		if ll, ok := l.(locker); ok {
			infos, err := ll.List(ctx)
			if err != nil || len(infos) != 1 || infos[0].Name != hostile || infos[0].Owner != hostile {
				t.Fatalf("%s namespace %q: List = %+v, %v", kind, name, infos, err)
			}
		}
		mustRelease(t, ctx, k)
	}
}
