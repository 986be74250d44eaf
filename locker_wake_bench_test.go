package sqllock_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync/atomic"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock/internal/dbtest"
)

// countedMySQL opens a private MySQL pool, closed when b ends, that counts
// every statement sent on it: the dialect's own (releases, rings, the
// bell's sleeps and reads, registrations, renewals) as well as the
// lockers' attempts.
func countedMySQL(b *testing.B, n *atomic.Int64) *sql.DB {
	b.Helper()
	cfg, err := gomysql.ParseDSN(dbtest.MySQLDSN(b))
	if err != nil {
		b.Fatal(err)
	}
	c, err := gomysql.NewConnector(cfg)
	if err != nil {
		b.Fatal(err)
	}
	db := sql.OpenDB(countingConnector{c, n})
	db.SetMaxOpenConns(dbtest.MaxOpenConns)
	db.SetMaxIdleConns(dbtest.MaxOpenConns)
	b.Cleanup(func() { db.Close() })
	return db
}

// countingConnector makes connections that count the statements sent.
type countingConnector struct {
	driver.Connector
	n *atomic.Int64
}

// mysqlConn is what the MySQL driver's connections implement.
type mysqlConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return countingConn{conn.(mysqlConn), c.n}, nil
}

// countingConn counts a statement at each ExecContext and QueryContext (a
// statement the driver then prepares, as it does for those with arguments,
// is counted once).
type countingConn struct {
	mysqlConn
	n *atomic.Int64
}

func (c countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.n.Add(1)
	return c.mysqlConn.ExecContext(ctx, query, args)
}

func (c countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.n.Add(1)
	return c.mysqlConn.QueryContext(ctx, query, args)
}
