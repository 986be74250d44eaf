package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/faultproxy"
)

// A COMMIT whose failure the PostgreSQL dialect reports as certain (not
// wrapping ErrOutcomeUnknown) must not have committed, however the
// connection dies. Through the proxy, connections are reset and stalled
// while transactions commit; pgx then reports some COMMITs it sent as "conn
// closed", which it marks safe to retry.
func TestPostgresCommitFailureClassification(t *testing.T) {
	t.Parallel()
	s := &setup{kind: "postgres"}
	s.admin, s.ns = dbtest.Postgres(t)
	s.dsn = dbtest.PostgresURL(t)
	s.app = "classify_" + s.ns
	ctx := t.Context()
	table := `"` + s.ns + `".commits`
	if _, err := s.admin.ExecContext(ctx, `CREATE TABLE `+table+` (id bigint PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.New(s.host())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	dsn, err := s.workerDSN(proxy.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := postgres.New(db, postgres.WithSchema(s.ns))
	if err != nil {
		t.Fatal(err)
	}

	rctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	var (
		mu      sync.Mutex
		next    int64
		certain = map[int64]error{} // commits reported as certainly failed
		tally   = map[string]int{}
		wg      sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for rctx.Err() == nil {
				mu.Lock()
				next++
				id := next
				mu.Unlock()
				outcome, err := commitOne(d, db, table, id)
				mu.Lock()
				tally[outcome]++
				if outcome == "failed" {
					certain[id] = err
				}
				mu.Unlock()
			}
		})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	tm := time.NewTimer(0)
	defer tm.Stop()
	for step := 0; ; step++ {
		select {
		case <-rctx.Done():
		case <-tm.C:
			switch step % 3 {
			case 0:
				proxy.ResetRandom(0.5, rng)
			case 1:
				proxy.Stall(200 * time.Millisecond)
			case 2:
				proxy.SetLatency(time.Duration(rng.IntN(20))*time.Millisecond, 10*time.Millisecond)
			}
			tm.Reset(time.Duration(50+rng.IntN(150)) * time.Millisecond)
			continue
		}
		break
	}
	wg.Wait()

	rows, err := s.admin.QueryContext(ctx, `SELECT id FROM `+table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		if err, ok := certain[id]; ok {
			t.Errorf("transaction %d committed, but its commit was reported as certainly failed: %v", id, err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("outcomes: %v", tally)
	if tally["failed"]+tally["unknown"] == 0 {
		t.Error("no commit failed: the faults did not bite")
	}
}

// commitOne inserts id in a transaction and reports the outcome as the
// dialect classifies it: "ok", "failed" (certainly not committed),
// "unknown", or "aborted" (failed before COMMIT was sent).
func commitOne(d *postgres.Dialect, db *sql.DB, table string, id int64) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "aborted", err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+table+` VALUES ($1)`, id); err != nil {
		_ = tx.Rollback()
		return "aborted", err
	}
	err = tx.Commit()
	switch {
	case err == nil:
		return "ok", nil
	case errors.Is(d.Catalogue().Pessimistic.Classify(err), sqllock.ErrOutcomeUnknown):
		return "unknown", err
	default:
		return "failed", fmt.Errorf("%w%s", err, chain(err))
	}
}
