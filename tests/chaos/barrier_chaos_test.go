package chaos

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/barrier"
)

// TestBarrierChaos runs rounds of a double barrier whose members, each
// with a pool and a Barrier of its own (as processes of their own would),
// reach the database through a proxy: in the first round the proxy
// resets some of their connections, and a member whose Enter failed
// enters again; in the second one member's pool is closed once it is
// inside (its process "dies": its lease is no longer renewed), and the
// others must be told as they leave, within the TTL. Each history must
// satisfy CheckBarrier.
func TestBarrierChaos(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t, kind, nil)
			proxy, dsn := s.proxied(t)
			// newMember is a process: its pool, and its Barrier of name.
			newMember := func(name string, size int, ttl time.Duration) (*barrier.Barrier, *sql.DB) {
				d, db := s.process(t, dsn)
				b, err := barrier.New(d, name, size, barrier.Options{TTL: ttl, MaxBackoff: 50 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				return b, db
			}
			var mu sync.Mutex
			record := func(ops *[]BarrierOp, ctx context.Context, member int, kind string, start time.Time, err error) {
				op := BarrierOp{Member: member, Kind: kind, Start: start, End: time.Now()}
				if err != nil {
					op.Err = err.Error()
					op.Lost = errors.Is(err, barrier.ErrMemberLost)
					op.Expired = ctx.Err() != nil
				}
				mu.Lock()
				*ops = append(*ops, op)
				mu.Unlock()
			}

			t.Run("resets", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				const size = 5
				var (
					ops []BarrierOp
					wg  sync.WaitGroup
				)
				for i := range size {
					b, _ := newMember("resets", size, 10*time.Second)
					wg.Go(func() {
						// A failed Enter withdrew its member: it enters
						// again, unless the round filled meanwhile (the
						// withdrawal then counts as its leave, and the
						// next round would never fill): a retry that
						// finds no round to join within 10s gives up.
						var m *barrier.Member
						for try := 0; m == nil && ctx.Err() == nil; try++ {
							actx, acancel := ctx, context.CancelFunc(func() {})
							if try > 0 {
								actx, acancel = context.WithTimeout(ctx, 10*time.Second)
							}
							start := time.Now()
							var err error
							m, err = b.Enter(actx)
							gaveUp := err != nil && actx.Err() != nil
							acancel()
							record(&ops, ctx, i, "enter", start, err)
							if gaveUp {
								return
							}
						}
						// A Leave whose first statement failed leaves the
						// member inside, and it leaves again; any other
						// outcome ends the membership, and a Leave after
						// it is ErrNotHeld.
						for m != nil && ctx.Err() == nil {
							start := time.Now()
							err := m.Leave(ctx)
							if errors.Is(err, sqllock.ErrNotHeld) {
								return
							}
							record(&ops, ctx, i, "leave", start, err)
							if err == nil {
								return
							}
						}
					})
				}
				rng := rand.New(rand.NewPCG(3, 4))
				for range 5 {
					proxy.ResetRandom(0.3, rng)
					time.Sleep(10 * time.Millisecond)
				}
				wg.Wait()
				for _, v := range CheckBarrier(BarrierHistory{Size: size, Ops: ops}) {
					t.Error(v)
				}
				if t.Failed() {
					for i, op := range ops {
						t.Logf("op %d: %+v", i, op)
					}
				}
				t.Logf("%d ops", len(ops))
			})

			t.Run("killed", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				const size = 3
				var (
					ops     []BarrierOp
					members = make([]*barrier.Member, size)
					entered sync.WaitGroup
				)
				bs := make([]*barrier.Barrier, size)
				var dying *sql.DB
				for i := range size {
					ttl := 30 * time.Second
					if i == 0 {
						ttl = time.Second // the member that dies: its lease ends within a second of its last renewal
					}
					var db *sql.DB
					bs[i], db = newMember("killed", size, ttl)
					if i == 0 {
						dying = db
					}
				}
				for i, b := range bs {
					entered.Go(func() {
						start := time.Now()
						m, err := b.Enter(ctx)
						record(&ops, ctx, i, "enter", start, err)
						members[i] = m
					})
				}
				entered.Wait()
				for _, m := range members {
					if m == nil {
						t.Fatal("a member did not enter")
					}
				}
				dying.Close() // its renewals fail from now on; it never leaves
				var wg sync.WaitGroup
				for i := 1; i < size; i++ {
					wg.Go(func() {
						start := time.Now()
						err := members[i].Leave(ctx)
						record(&ops, ctx, i, "leave", start, err)
					})
				}
				wg.Wait()
				<-members[0].Context().Done() // the dead member's renewal gives up within its TTL
				for _, v := range CheckBarrier(BarrierHistory{Size: size, Ops: ops, Killed: []int{0}}) {
					t.Error(v)
				}
				for _, op := range ops {
					if op.Kind == "leave" && !op.Lost {
						t.Errorf("member %d's Leave: %q, want ErrMemberLost", op.Member, op.Err)
					}
				}
			})
		})
	}
}
