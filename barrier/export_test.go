package barrier

import (
	"context"
	"errors"

	"github.com/sqllock/sqllock/internal/sqlrun"
)

// Abandon stops m's renewal and forgets it, leaving its row to expire: as
// if its process had died.
func Abandon(m *Member) {
	m.cancel(context.Canceled)
	<-m.done
}

// MembersOf reads the member rows of b's name, and whether owner's is live.
func MembersOf(ctx context.Context, b *Barrier, owner string) (sqlrun.BarrierMembers, error) {
	return b.barriers.Members(ctx, b.name, owner)
}

// Join joins b's round as Enter does, without waiting for it to fill.
func Join(ctx context.Context, b *Barrier) (*Member, error) {
	owner := b.newOwner()
	e, err := b.barriers.Enter(ctx, b.name, owner, b.size, b.ttl)
	if err != nil {
		return nil, err
	}
	if !e.Joined {
		return nil, errors.New("barrier: not joined")
	}
	return b.start(owner), nil
}

// Evict deletes the row of owner, a member of b's round, as a later Enter
// deletes an expired one.
func Evict(ctx context.Context, b *Barrier, owner string) error {
	return b.barriers.Quit(ctx, b.name, owner)
}
