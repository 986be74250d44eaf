package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/sqllock/sqllock/dialect"
)

// galeraCheck remembers what checkPessimistic found.
type galeraCheck struct {
	mu   sync.Mutex
	done bool
	err  error
}

// checkPessimistic is the catalogue's CheckPessimistic. On a MariaDB
// Galera cluster (wsrep_on) it returns an error wrapping
// dialect.ErrUnsupported: SELECT ... FOR UPDATE there locks the row on the
// local node only, and a transaction on another node is not kept out but
// certified at commit, so two holders on different nodes would both hold
// the lock (and one of them fail at commit with a deadlock error). The
// table and optimistic strategies are correct on Galera: every grant is
// one certified write. The answer is asked once and remembered; an error
// reaching the server is not remembered.
func (d *Dialect) checkPessimistic(ctx context.Context) error {
	d.galera.mu.Lock()
	defer d.galera.mu.Unlock()
	if d.galera.done {
		return d.galera.err
	}
	var name, value string
	err := d.run.Conn(ctx, func(ctx context.Context, conn *sql.Conn) error {
		err := conn.QueryRowContext(ctx, `SHOW GLOBAL VARIABLES LIKE 'wsrep_on'`).Scan(&name, &value)
		if errors.Is(err, sql.ErrNoRows) { // MySQL: no wsrep at all
			return nil
		}
		return wrap(err)
	})
	if err != nil {
		return err
	}
	if strings.EqualFold(value, "ON") {
		d.galera.err = fmt.Errorf("%w: the server is a Galera cluster node (wsrep_on): SELECT ... FOR UPDATE locks "+
			"the row on the local node only, so pessimistic locks taken on different nodes would not exclude each other; "+
			"use the table or optimistic strategy", dialect.ErrUnsupported)
	}
	d.galera.done = true
	return d.galera.err
}
