package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	_ "github.com/go-sql-driver/mysql" // the "mysql" driver
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	"github.com/redis/go-redis/v9"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
)

// config says where every system's server is. The parent hands it to its
// worker processes as JSON in an environment variable.
type config struct {
	Redis    string // host:port
	Postgres string // URL of the bench database
	MySQL    string // DSN of the bench database
	SQLite   string // path of the lock file
	// Schema is the PostgreSQL schema sqllock's tables are migrated into.
	Schema string
}

// client is one process's (or, uncontended, one goroutine group's)
// connection to a system.
type client interface {
	// acquire blocks until it holds name or ctx ends, and returns the
	// function that releases it.
	acquire(ctx context.Context, name string) (release func(context.Context) error, err error)
	close() error
}

// system is one lock service under test.
type system struct {
	name string
	// kind is the server whose statements are counted: "postgres",
	// "mysql", or "" (not counted).
	kind string
	// uncontended: measured in the uncontended runs too (redsync's 1 ms
	// retry differs from its defaults only in how it waits).
	uncontended bool
	open        func(ctx context.Context, c config) (client, error)
}

// systems are every system, in the order each round runs them.
var systems = []system{
	{"redsync", "", true, openRedsync(nil)},
	{"redsync-1ms", "", false, openRedsync([]redsync.Option{redsync.WithRetryDelay(time.Millisecond), redsync.WithTries(1 << 30)})},
	{"redislock", "", true, openRedislock},
	{"pg-advisory", "postgres", true, openAdvisory},
	{"mysql-getlock", "mysql", true, openGetLock},
	{"sqllock-pg", "postgres", true, openSqllockPG(false)},
	// What the opt-in hot path of issue 49 (leases committed without
	// waiting for the WAL flush) would gain: the same, with the session's
	// synchronous_commit off. An estimate, not a mode of sqllock: without
	// an epoch per server start and a grace after a crash, a crash could
	// repeat tokens and let two hold.
	{"sqllock-pg-nosync", "postgres", true, openSqllockPG(true)},
	{"sqllock-mysql", "mysql", true, openSqllockMySQL},
	{"sqllock-sqlite", "", true, openSqllockSQLite},
}

// lookup returns the system called name.
func lookup(name string) (system, error) {
	for _, s := range systems {
		if s.name == name {
			return s, nil
		}
	}
	return system{}, fmt.Errorf("peers: no system %q", name)
}

// --- Redis ---

type redsyncClient struct {
	rdb  *redis.Client
	rs   *redsync.Redsync
	opts []redsync.Option
}

// openRedsync opens redsync v4 on one Redis node, its mutexes made with
// opts (nil: its defaults: 8 s expiry, 32 tries 50-250 ms apart).
func openRedsync(opts []redsync.Option) func(context.Context, config) (client, error) {
	return func(ctx context.Context, c config) (client, error) {
		rdb := redis.NewClient(&redis.Options{Addr: c.Redis})
		if err := rdb.Ping(ctx).Err(); err != nil {
			rdb.Close()
			return nil, fmt.Errorf("redis %s: %w", c.Redis, err)
		}
		return &redsyncClient{rdb, redsync.New(goredis.NewPool(rdb)), opts}, nil
	}
}

func (r *redsyncClient) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	m := r.rs.NewMutex(name, r.opts...)
	for {
		err := m.LockContext(ctx)
		if err == nil {
			return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// Out of tries (ErrFailed) while another holds it: a caller that
		// must have the lock asks again.
		var taken *redsync.ErrTaken
		if !errors.Is(err, redsync.ErrFailed) && !errors.As(err, &taken) {
			return nil, err
		}
	}
}

func (r *redsyncClient) close() error { return r.rdb.Close() }

type redislockClient struct {
	rdb *redis.Client
	rl  *redislock.Client
}

// openRedislock opens bsm/redislock on one Redis node; a blocking obtain
// retries every millisecond (redislock.LinearBackoff), its fastest.
func openRedislock(ctx context.Context, c config) (client, error) {
	rdb := redis.NewClient(&redis.Options{Addr: c.Redis})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis %s: %w", c.Redis, err)
	}
	return &redislockClient{rdb, redislock.New(rdb)}, nil
}

func (r *redislockClient) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	l, err := r.rl.Obtain(ctx, name, 8*time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)})
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (r *redislockClient) close() error { return r.rdb.Close() }

// --- the databases' own locks ---

// sessionLock is a database's session-level named lock: a connection of
// the pool is pinned for as long as the lock is held.
type sessionLock struct {
	db           *sql.DB
	lock, unlock string
	// granted reports whether the lock statement's result means held
	// (GET_LOCK returns 0 when its timeout passed).
	granted func(v sql.NullInt64) bool
}

// openAdvisory is PostgreSQL's blocking session advisory lock.
func openAdvisory(ctx context.Context, c config) (client, error) {
	db, err := openDB(ctx, "pgx", c.Postgres)
	if err != nil {
		return nil, err
	}
	return &sessionLock{db: db,
		lock:    "SELECT pg_advisory_lock(hashtext($1)), 1",
		unlock:  "SELECT pg_advisory_unlock(hashtext($1))",
		granted: func(sql.NullInt64) bool { return true }}, nil
}

// openGetLock is MySQL's and MariaDB's GET_LOCK, waiting on the server in
// steps of 10 s.
func openGetLock(ctx context.Context, c config) (client, error) {
	db, err := openDB(ctx, "mysql", c.MySQL)
	if err != nil {
		return nil, err
	}
	return &sessionLock{db: db,
		lock:    "SELECT '', GET_LOCK(?, 10)",
		unlock:  "SELECT RELEASE_LOCK(?)",
		granted: func(v sql.NullInt64) bool { return v.Valid && v.Int64 == 1 }}, nil
}

func (s *sessionLock) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	for {
		var (
			ignored any
			v       sql.NullInt64
		)
		if err := conn.QueryRowContext(ctx, s.lock, name).Scan(&ignored, &v); err != nil {
			// A cancelled wait leaves the session's state unknown: the
			// connection is not reused.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			conn.Close()
			return nil, err
		}
		if s.granted(v) {
			break
		}
	}
	return func(ctx context.Context) error {
		defer conn.Close()
		_, err := conn.ExecContext(ctx, s.unlock, name)
		return err
	}, nil
}

func (s *sessionLock) close() error { return s.db.Close() }

// --- sqllock ---

type sqllockClient struct {
	d     dialect.Dialect
	table *sqllock.Table
}

// openSqllockPG is sqllock's lock table on PostgreSQL; with nosync, on
// sessions whose synchronous_commit is off.
func openSqllockPG(nosync bool) func(context.Context, config) (client, error) {
	return func(ctx context.Context, c config) (client, error) {
		url := c.Postgres
		if nosync {
			sep := "?"
			if strings.Contains(url, "?") {
				sep = "&"
			}
			url += sep + "synchronous_commit=off" // a run-time parameter to pgx
		}
		db, err := openDB(ctx, "pgx", url)
		if err != nil {
			return nil, err
		}
		d, err := postgres.New(db, postgres.WithSchema(c.Schema))
		if err != nil {
			db.Close()
			return nil, err
		}
		return newSqllockClient(d)
	}
}

func openSqllockMySQL(ctx context.Context, c config) (client, error) {
	db, err := openDB(ctx, "mysql", c.MySQL)
	if err != nil {
		return nil, err
	}
	d, err := mysql.New(db)
	if err != nil {
		db.Close()
		return nil, err
	}
	return newSqllockClient(d)
}

func openSqllockSQLite(_ context.Context, c config) (client, error) {
	db, err := sqlite.Open(c.SQLite)
	if err != nil {
		return nil, err
	}
	d, err := sqlite.New(db)
	if err != nil {
		db.Close()
		return nil, err
	}
	return newSqllockClient(d)
}

func newSqllockClient(d dialect.Dialect) (client, error) {
	t, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 30 * time.Second}})
	if err != nil {
		d.DB().Close()
		return nil, err
	}
	return &sqllockClient{d, t}, nil
}

func (s *sqllockClient) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	l, err := s.table.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (s *sqllockClient) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if c, ok := s.d.(interface{ Close(context.Context) error }); ok {
		err = c.Close(ctx) // the listener and wake-up sockets
	}
	return errors.Join(err, s.d.DB().Close())
}

// openDB opens a pool and checks that the server answers.
func openDB(ctx context.Context, driver, dsn string) (*sql.DB, error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxIdleConns(16)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", driver, err)
	}
	return db, nil
}
