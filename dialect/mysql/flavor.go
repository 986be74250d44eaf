package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sqllock/sqllock/dialect"
)

// flavorCheck remembers what checkFlavor found: whether the server is TiDB,
// and the error to return for it.
type flavorCheck struct {
	ok   atomic.Bool // checked, and fine: the fast path
	mu   sync.Mutex
	done bool
	tidb bool
	// txnMode is a TiDB session's tidb_txn_mode, read by NewTiDB's
	// dialect: "pessimistic" (the default), "optimistic" or "".
	txnMode string
	err     error
}

// isTiDB reports whether VERSION() is a TiDB server's ("8.0.11-TiDB-v8.5.0").
func isTiDB(version string) bool { return strings.Contains(version, "TiDB") }

// check runs before every grant, row lock and reap: checkServer (the
// clock), then checkFlavor (the server's kind).
func (d *Dialect) check(ctx context.Context) error {
	if err := d.checkServer(ctx); err != nil {
		return err
	}
	return d.checkFlavor(ctx)
}

// checkFlavor finds out, once per dialect, whether the server is TiDB. The
// statements of New are MySQL's and MariaDB's; on TiDB they are unsafe
// there, and every strategy is refused with an error wrapping
// dialect.ErrUnsupported. A dialect of NewTiDB runs on TiDB (and, its
// statements being portable, on MySQL and MariaDB too).
func (d *Dialect) checkFlavor(ctx context.Context) error {
	if d.flavor.ok.Load() {
		return nil
	}
	d.flavor.mu.Lock()
	defer d.flavor.mu.Unlock()
	if d.flavor.done {
		return d.flavor.err
	}
	var version string
	err := d.run.Conn(ctx, func(ctx context.Context, conn *sql.Conn) error {
		return d.run.Wrap(conn.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&version))
	})
	if err != nil {
		return err
	}
	d.flavor.tidb = isTiDB(version)
	if d.flavor.tidb && d.tidb != nil {
		err := d.run.Conn(ctx, func(ctx context.Context, conn *sql.Conn) error {
			return d.run.Wrap(conn.QueryRowContext(ctx, `SELECT @@tidb_txn_mode`).Scan(&d.flavor.txnMode))
		})
		if err != nil {
			return err
		}
	}
	if d.flavor.tidb && d.tidb == nil {
		d.flavor.err = fmt.Errorf("%w: the server is TiDB (VERSION() %q), where the MySQL dialect's statements "+
			"could grant one lock to two owners (LAST_INSERT_ID(expr) in an upsert, the order of UPDATE "+
			"assignments, SKIP LOCKED and shared row locks all differ from MySQL): use mysql.NewTiDB",
			dialect.ErrUnsupported, version)
	}
	d.flavor.done = true
	d.flavor.ok.Store(d.flavor.err == nil)
	return d.flavor.err
}
