package dialect_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/sqllock/sqllock/dialect"
)

// A driver whose rollbacks fail with driver.ErrBadConn, as pgx's do on a
// connection its cancelled context closed: database/sql then closes the
// sql.Conn from the goroutine that watches the transaction's context. No
// database does this on demand at the moment a test needs it.
type badRollbackDriver struct{}

func (badRollbackDriver) Open(string) (driver.Conn, error) { return &badRollbackConn{}, nil }

type badRollbackConn struct{ mu sync.Mutex }

func (c *badRollbackConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("no statements")
}
func (c *badRollbackConn) Close() error                       { return nil }
func (c *badRollbackConn) Begin() (driver.Tx, error)          { return badRollbackTx{}, nil }
func (c *badRollbackConn) ResetSession(context.Context) error { return nil }
func (c *badRollbackConn) IsValid() bool                      { return true }

type badRollbackTx struct{}

func (badRollbackTx) Commit() error { return nil }
func (badRollbackTx) Rollback() error {
	for i := rand.IntN(64); i > 0; i-- {
		runtime.Gosched() // a round trip's worth of time, as random as one
	}
	return driver.ErrBadConn
}

func init() { sql.Register("sqllock-bad-rollback", badRollbackDriver{}) }

// Discard right after a transaction's context ended races with
// database/sql closing the same sql.Conn on its own goroutine; the close
// may land between sql.Conn.Raw's check that the connection is open and its
// lock, which leaves Raw a nil driver connection. Discard must survive it.
func TestDiscardRacesTheTransactionsOwnClose(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqllock-bad-rollback", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { discardRacing(t, ctx, db) })
	}
	wg.Wait()
}

func discardRacing(t *testing.T, ctx context.Context, db *sql.DB) {
	for range 5000 {
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		tctx, cancel := context.WithCancel(ctx)
		tx, err := conn.BeginTx(tctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		cancel()          // database/sql rolls back, fails, and closes conn
		_ = tx.Rollback() // as a grant that saw its context end does
		_ = dialect.Discard(conn)
	}
}
