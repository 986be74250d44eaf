package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sqllock/sqllock/dialect"
)

// marker tags statements with a comment unique to one call, by which another
// connection finds them in the process list.
type marker struct {
	prefix string
	n      atomic.Uint64
}

func newMarker() marker {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return marker{prefix: "/* sqllock " + hex.EncodeToString(b[:]) + "-"}
}

// next returns a new mark: a comment to put in front of a statement.
func (m *marker) next() string {
	return m.prefix + strconv.FormatUint(m.n.Add(1), 36) + " */ "
}

// processByMark finds the connection running a statement that starts with
// a mark. The mark is made of letters, digits, spaces, '/', '*' and '-',
// none of them special in LIKE.
const processByMark = `SELECT ID FROM information_schema.PROCESSLIST
WHERE INFO LIKE CONCAT(?, '%') AND ID <> CONNECTION_ID() LIMIT 1`

// killMarked ends the statement that starts with mark, if one runs, with
// KILL QUERY from another connection of the pool.
func (d *Dialect) killMarked(ctx context.Context, mark string) error {
	var id int64
	err := d.db.QueryRowContext(ctx, processByMark, mark[:len(mark)-1]).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // not there yet, or done: the caller repeats while it runs
	}
	if err != nil {
		return err
	}
	_, err = d.db.ExecContext(ctx, "KILL QUERY "+strconv.FormatInt(id, 10))
	return err
}

// clockCheck remembers what checkServer found.
type clockCheck struct {
	ok   atomic.Bool // checked, and fine: the fast path
	mu   sync.Mutex
	done bool
	err  error
}

// sysdateIsNow detects a server started with --sysdate-is-now, where
// SYSDATE() is the statement's start like NOW(): the derived table's SLEEP
// runs before the select list is evaluated, so the two differ (by at least
// the sleep, or by how far the session's clock is set off) unless SYSDATE()
// follows NOW().
// It also reads whether the server refuses writes: read_only (which
// super_read_only implies) or innodb_read_only.
const sysdateIsNow = `SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) = 0, @@global.read_only OR @@global.innodb_read_only
FROM (SELECT SLEEP(0.002)) AS s`

// checkServer makes sure, once per dialect, that SYSDATE() reads the real
// clock, which lease expiry relies on (see now). A server started with
// --sysdate-is-now is refused with an error wrapping dialect.ErrUnsupported:
// there, any session could move the clock its lock statements see.
//
// A read-only server (a replica) is refused with an error wrapping
// dialect.ErrReadOnly, and checked again at the next grant: an account
// with SUPER or READ_ONLY ADMIN may write despite read_only, and would
// otherwise grant locks on a replica. Once a server was found writable,
// its later demotion is detected only by the errors its statements meet
// (all accounts under super_read_only, unprivileged ones under read_only).
func (d *Dialect) checkServer(ctx context.Context) error {
	if d.clock.ok.Load() {
		return nil
	}
	d.clock.mu.Lock()
	defer d.clock.mu.Unlock()
	if d.clock.done {
		return d.clock.err
	}
	// On a connection pinned like a lock statement's, so that an exhausted
	// pool is reported as such (ErrPoolExhausted: nothing was sent).
	var same, readOnly bool
	err := d.run.Conn(ctx, func(ctx context.Context, conn *sql.Conn) error {
		return wrap(conn.QueryRowContext(ctx, sysdateIsNow).Scan(&same, &readOnly))
	})
	if err != nil {
		return err
	}
	if readOnly && !same {
		return fmt.Errorf("%w: read_only or innodb_read_only is set", dialect.ErrReadOnly)
	}
	if same {
		d.clock.err = fmt.Errorf("%w: the server runs with --sysdate-is-now, so SYSDATE() follows each session's "+
			"own clock (SET timestamp) and lease expiry could not be computed on the real clock", dialect.ErrUnsupported)
	}
	d.clock.done = true
	d.clock.ok.Store(d.clock.err == nil)
	return d.clock.err
}
