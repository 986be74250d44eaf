package mysql

import (
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// latchSQL declares the latch table's statements. CountDown carries the
// count before it out as the statement's insert id, through
// LAST_INSERT_ID(expr): MySQL's UPDATE has no RETURNING. Count-downs are not
// announced: waiters poll with a bounded backoff (see sqllock.Latch).
func latchSQL(latches string) dialect.LatchSQL {
	return dialect.LatchSQL{
		Create:    dialect.X(fmt.Sprintf(`INSERT IGNORE INTO %s (name, initial_count, remaining) VALUES (:name, :limit, :limit)`, latches)),
		Initial:   dialect.Q(fmt.Sprintf(`SELECT COALESCE((SELECT initial_count FROM %s WHERE name = :name), -1)`, latches)),
		Count:     dialect.Q(fmt.Sprintf(`SELECT COALESCE((SELECT remaining FROM %s WHERE name = :name), -1)`, latches)),
		CountDown: dialect.XID(fmt.Sprintf(`UPDATE %s SET remaining = LAST_INSERT_ID(remaining) - 1 WHERE name = :name AND remaining > 0`, latches)),
		Delete:    dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE name = :name`, latches)),
	}
}

// latchSQLs declares the latch statements in cat.
func (d *Dialect) latchSQLs(cat *dialect.Catalogue) {
	latches := "sqllock_latches"
	sqlrun.Qualify(d.database, quote, &latches)
	cat.Latches = ptr(latchSQL(latches))
}
