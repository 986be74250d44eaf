// Package sqllockk8slease runs client-go's leader election
// (k8s.io/client-go/tools/leaderelection) outside Kubernetes: a [Lock] is
// a resourcelock.Interface kept in sqllock's lock table, as a
// sqllock.Election whose leader's value is the leader election record.
//
//	e, _ := sqllock.NewElection(d, sqllock.LeaseOptions{TTL: 15 * time.Second})
//	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
//		Lock:          sqllockk8slease.New(e, "controller", hostname),
//		LeaseDuration: 15 * time.Second,
//		RenewDeadline: 10 * time.Second,
//		RetryPeriod:   2 * time.Second,
//		Callbacks:     callbacks,
//	})
//
// The record is written only by the holder of the election's lease: Create
// campaigns, and Update succeeds only while the lease is live, so two
// candidates never both succeed, whatever their clocks say. The leader's
// term, a fencing token, is Lock.Leadership().Term().
package sqllockk8slease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/sqllock/sqllock"
)

// resignTimeout bounds the release of a leadership client-go no longer
// renews, which runs on a context of its own.
const resignTimeout = 10 * time.Second

// resource names elections in the errors client-go inspects (NotFound,
// Conflict).
var resource = schema.GroupResource{Group: "sqllock.dev", Resource: "elections"}

// Lock is a resourcelock.Interface over one election name of a
// sqllock.Election, for one candidate identity.
//
// Get returns the record the current leader proclaimed, or a NotFound
// error when the election has no leader. Create campaigns: it waits until
// this candidate leads or ctx ends. Update proclaims the record while this
// candidate's lease is live, and fails with a Conflict error otherwise; an
// update with an empty HolderIdentity (client-go's release) resigns.
//
// The election renews the lease in the background; a Lock gives it up
// when client-go has not updated the record for the record's
// LeaseDurationSeconds (its elector stopped without releasing), so the
// lease never outlives the leadership client-go believes in by more than
// that. The election's TTL is best close to client-go's LeaseDuration.
//
// RecordEvent records nothing. A Lock is safe for concurrent use; Close
// it when done.
type Lock struct {
	election *sqllock.Election
	name     string
	identity string

	mu   sync.Mutex
	lead *sqllock.Leadership // nil when not leading
	idle *time.Timer         // resigns lead when client-go stops updating
}

var _ resourcelock.Interface = (*Lock)(nil)

// New returns the Lock of candidate identity in the election name on e.
func New(e *sqllock.Election, name, identity string) *Lock {
	return &Lock{election: e, name: name, identity: identity}
}

// Get returns the current leader's record and its encoding, or an error
// for which apierrors.IsNotFound reports true if there is no leader.
func (l *Lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	info, err := l.election.Leader(ctx, l.name)
	if errors.Is(err, sqllock.ErrNoLeader) {
		return nil, nil, apierrors.NewNotFound(resource, l.name)
	}
	if err != nil {
		return nil, nil, err
	}
	var rec resourcelock.LeaderElectionRecord
	if err := json.Unmarshal([]byte(info.Value), &rec); err != nil {
		return nil, nil, fmt.Errorf("sqllockk8slease: the leader of %q proclaimed no leader election record: %w", l.name, err)
	}
	return &rec, []byte(info.Value), nil
}

// Create campaigns with the record ler, whose HolderIdentity must be the
// Lock's identity: it waits until this candidate leads, or until ctx ends.
func (l *Lock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity != l.identity {
		return fmt.Errorf("sqllockk8slease: create %q for %q by %q", l.name, ler.HolderIdentity, l.identity)
	}
	value, err := json.Marshal(ler)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resign()
	lead, err := l.election.Campaign(ctx, l.name, string(value))
	if err != nil {
		return err
	}
	l.lead = lead
	l.renewed(lead, ler)
	return nil
}

// Update proclaims ler if this candidate leads, and fails with an error
// for which apierrors.IsConflict reports true if it does not. If ler has
// no HolderIdentity, Update resigns instead.
func (l *Lock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch ler.HolderIdentity {
	case "":
		return l.resign()
	case l.identity:
	default:
		return fmt.Errorf("sqllockk8slease: update %q for %q by %q", l.name, ler.HolderIdentity, l.identity)
	}
	if l.lead == nil {
		return apierrors.NewConflict(resource, l.name, errors.New("not the leader"))
	}
	if err := context.Cause(l.lead.Context()); err != nil {
		l.resign()
		return apierrors.NewConflict(resource, l.name, err)
	}
	value, err := json.Marshal(ler)
	if err != nil {
		return err
	}
	if err := l.lead.Proclaim(ctx, string(value)); err != nil {
		if errors.Is(err, sqllock.ErrLockLost) {
			l.resign()
			return apierrors.NewConflict(resource, l.name, err)
		}
		return err
	}
	l.renewed(l.lead, ler)
	return nil
}

// renewed gives lead up once ler's lease duration passes without another
// update. l.mu is held.
func (l *Lock) renewed(lead *sqllock.Leadership, ler resourcelock.LeaderElectionRecord) {
	if l.idle != nil {
		l.idle.Stop()
	}
	// client-go writes whole seconds: a LeaseDuration under one second
	// is 0 in the record.
	d := max(time.Duration(ler.LeaseDurationSeconds)*time.Second, time.Second)
	l.idle = time.AfterFunc(d, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.lead == lead {
			l.resign()
		}
	})
}

// resign ends the leadership, if any, on a context of its own. A lease
// already lost is no error. l.mu is held.
func (l *Lock) resign() error {
	if l.idle != nil {
		l.idle.Stop()
		l.idle = nil
	}
	if l.lead == nil {
		return nil
	}
	lead := l.lead
	l.lead = nil
	ctx, cancel := context.WithTimeout(context.Background(), resignTimeout)
	defer cancel()
	if err := lead.Resign(ctx); err != nil && !errors.Is(err, sqllock.ErrLockLost) {
		return err
	}
	return nil
}

// Leadership returns the leadership this candidate holds, or nil. Its
// term is a fencing token, and its context ends when the lease is lost,
// which may be before client-go's elector notices.
func (l *Lock) Leadership() *sqllock.Leadership {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lead
}

// Close resigns if this candidate leads. Use it once its elector has
// returned.
func (l *Lock) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.resign()
}

// RecordEvent records nothing: sqllock keeps no event stream.
func (l *Lock) RecordEvent(string) {}

// Identity returns the candidate's identity.
func (l *Lock) Identity() string { return l.identity }

// Describe names the election, as "sqllock election NAME".
func (l *Lock) Describe() string { return "sqllock election " + l.name }
