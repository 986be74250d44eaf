package sqlite

import "github.com/sqllock/sqllock/dialect"

// latchSQL declares the latch table's statements. Count-downs are not
// announced: waiters poll with a bounded backoff (see sqllock.Latch).
func latchSQL() dialect.LatchSQL {
	return dialect.LatchSQL{
		Create:    dialect.X(`INSERT INTO sqllock_latches (name, initial_count, remaining) VALUES (:name, :limit, :limit) ON CONFLICT (name) DO NOTHING`),
		Initial:   dialect.Q(`SELECT COALESCE((SELECT initial_count FROM sqllock_latches WHERE name = :name), -1)`),
		Count:     dialect.Q(`SELECT COALESCE((SELECT remaining FROM sqllock_latches WHERE name = :name), -1)`),
		CountDown: dialect.Q(`UPDATE sqllock_latches SET remaining = remaining - 1 WHERE name = :name AND remaining > 0 RETURNING remaining + 1`),
		Delete:    dialect.X(`DELETE FROM sqllock_latches WHERE name = :name`),
	}
}
