package postgres

import (
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// latchSQL declares the latch table's statements. The count-down that
// leaves 0 is announced with NOTIFY on the lock table's channel, as
// releases are, so that waiters wake at once.
func latchSQL(latches, channel string) dialect.LatchSQL {
	return dialect.LatchSQL{
		Create:    dialect.X(fmt.Sprintf(`INSERT INTO %s (name, initial_count, remaining) VALUES (:name, :limit, :limit) ON CONFLICT (name) DO NOTHING`, latches)),
		Initial:   dialect.Q(fmt.Sprintf(`SELECT COALESCE((SELECT initial_count FROM %s WHERE name = :name), -1)`, latches)),
		Count:     dialect.Q(fmt.Sprintf(`SELECT COALESCE((SELECT remaining FROM %s WHERE name = :name), -1)`, latches)),
		CountDown: dialect.Q(fmt.Sprintf(`UPDATE %s SET remaining = remaining - 1 WHERE name = :name AND remaining > 0 RETURNING remaining + 1`, latches)),
		Delete:    dialect.X(fmt.Sprintf(`DELETE FROM %s WHERE name = :name`, latches)),
		Announce:  dialect.Q(`SELECT count(pg_notify(:channel, :name))`),
		Channel:   channel,
	}
}

// latchSQLs declares the latch statements in cat.
func (d *Dialect) latchSQLs(cat *dialect.Catalogue) {
	latches := "sqllock_latches"
	sqlrun.Qualify(d.schema, quote, &latches)
	cat.Latches = ptr(latchSQL(latches, d.channel))
}
